"""Merging projections: concatenate QuantizedWeights along N (packed, scales, zero points).

Projections that read the same input (q/k/v, gate/up) can run as one GEMV over the weights
stacked along N: ``gemv(a, concat_weights([q, k, v]))`` equals the concatenation of the three
outputs, and a decode step needs fewer launches. MatMulNBits stores each column's run
contiguously, so the merged arrays are the parts' arrays concatenated along axis 0.

Constraints: every part has the same ``K`` and ``block_size``. If some parts carry zero points and
others do not, the others get 8 for every block (what "no zero points" means), so the merged
weight stores zero points.
"""

from __future__ import annotations

import numpy as np

__all__ = ["concat_weights"]


def _check(parts):
    parts = list(parts)
    if not parts:
        raise ValueError("concat needs at least one weight")
    K, bs = parts[0].K, parts[0].block_size
    for i, p in enumerate(parts):
        if (p.K, p.block_size) != (K, bs):
            raise ValueError(f"weight {i} has K={p.K}, block_size={p.block_size}; "
                             f"weight 0 has K={K}, block_size={bs} (they must match)")
    return parts, K, bs


def _zero_points(p):
    """Packed zero points of ``p``, or 8 in every nibble when it has none."""
    if p.zero_points is not None:
        return p.zero_points
    return np.full((p.N, -(-p.n_blocks // 2)), 0x88, np.uint8)


def concat_weights(parts):
    """One host :class:`~int4gemv.QuantizedWeight` with the parts stacked along N, in order."""
    import int4gemv

    parts, K, bs = _check(parts)
    packed = np.concatenate([p.packed for p in parts], axis=0)
    scales = np.concatenate([p.scales for p in parts], axis=0)
    zp = None
    if any(p.zero_points is not None for p in parts):
        zp = np.concatenate([_zero_points(p) for p in parts], axis=0)
    return int4gemv.QuantizedWeight(packed, scales, zp, K=K, N=int(packed.shape[0]), block_size=bs)
