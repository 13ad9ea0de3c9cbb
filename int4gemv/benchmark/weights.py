"""Weights for timing: random INT4 weights, rotated copies, byte counts and the reference check.

A timed graph cycles its launches through copies of the weight totalling :data:`ROTATE_BYTES`
(several times the H200's 60 MB L2), so no launch finds its weight in L2 from an earlier launch.
Random weights are drawn as raw bytes (every nibble uniform in 0..15) with scales uniform in a
small range, which is fast enough for a decode step's gigabyte; they are ordinary
:class:`~int4gemv.QuantizedWeight` objects, so :func:`int4gemv.reference_gemv` checks them.
"""

from __future__ import annotations

import numpy as np

from ..reference import relative_error  # re-exported: the benchmark's error measure

__all__ = [
    "REL_ERR_OK",
    "ROTATE_BYTES",
    "random_weight",
    "reference",
    "relative_error",
    "rotated_copies",
    "rotation_copies",
    "weight_bytes",
]

#: Bytes of distinct weights a timed graph cycles through (at least four times a 60 MB L2).
ROTATE_BYTES = 256 * 2**20

#: Most copies one timing rotates through: each is an allocation and a launch of the timed graph
#: (a decode shape's smallest weight, k/v 1024x2048 bs 32, needs 230).
MAX_COPIES = 512

#: A relative error above this marks a result as wrong (fp16 outputs of random data: ~1e-3).
REL_ERR_OK = 1e-2

_CHECK_ROWS = 8192  # columns of the float64 reference computed at a time


def weight_bytes(N: int, K: int, block_size: int = 32, zero_points: bool = False) -> int:
    """Bytes one GEMV must read: packed nibbles, fp16 scales and (when present) zero points."""
    n_blocks = -(-K // block_size)
    return N * n_blocks * block_size // 2 + N * n_blocks * 2 + (N * -(-n_blocks // 2) if zero_points else 0)


def random_weight(N: int, K: int, block_size: int = 32, *, rng=None, zero_points: bool = False,
                  scale_range=(0.001, 0.011)):
    """A host :class:`~int4gemv.QuantizedWeight` with uniformly random nibbles, scales uniform in
    ``scale_range`` and, with ``zero_points``, random zero points. ``rng``: a numpy Generator or
    a seed (default 0)."""
    import int4gemv

    rng = np.random.default_rng(rng if rng is not None else 0)
    n_blocks = -(-K // block_size)
    packed = np.frombuffer(rng.bytes(N * n_blocks * block_size // 2), np.uint8)
    lo, hi = scale_range
    scales = (rng.random((N, n_blocks), np.float32) * (hi - lo) + lo).astype(np.float16)
    zp = np.frombuffer(rng.bytes(N * -(-n_blocks // 2)), np.uint8) if zero_points else None
    return int4gemv.QuantizedWeight(packed, scales, zp, K=K, N=N, block_size=block_size)


def rotation_copies(nbytes: int, rotate_bytes: int = ROTATE_BYTES) -> int:
    """How many copies of an ``nbytes`` weight add up to ``rotate_bytes``: at least 2, at most
    :data:`MAX_COPIES` (a weight under ``rotate_bytes / MAX_COPIES`` then rotates through fewer
    bytes than asked, and its timing may be partly L2-resident; the row records ``copies``)."""
    if nbytes <= 0:
        raise ValueError(f"nbytes must be positive; got {nbytes}")
    return min(MAX_COPIES, max(2, -(-int(rotate_bytes) // int(nbytes))))


def rotated_copies(w, rotate_bytes: int = ROTATE_BYTES, *, copies: int | None = None) -> list:
    """``w`` followed by copies of it (same values, their own device memory), uploaded:
    :func:`rotation_copies` of them unless ``copies`` is given."""
    import int4gemv

    n = copies if copies is not None else rotation_copies(w.nbytes, rotate_bytes)
    out = [w.to_device()]
    for _ in range(n - 1):
        out.append(int4gemv.QuantizedWeight(w.packed, w.scales, w.zero_points, K=w.K, N=w.N,
                                            block_size=w.block_size).to_device())
    return out


def reference(a, w, bias=None) -> np.ndarray:
    """``a · wᵀ + bias`` in float64 (:func:`int4gemv.reference_gemv`) as ``[M, N]``, computed a
    few thousand columns at a time so that large weights (lm_head) need little memory."""
    import int4gemv

    a = np.asarray(a)
    ref = np.empty((a.reshape(-1, w.K).shape[0], w.N), np.float64)
    for start in range(0, w.N, _CHECK_ROWS):
        rows = slice(start, min(w.N, start + _CHECK_ROWS))
        part = int4gemv.QuantizedWeight(w.packed[rows], w.scales[rows],
                                        None if w.zero_points is None else w.zero_points[rows],
                                        K=w.K, N=rows.stop - rows.start, block_size=w.block_size)
        b = None if bias is None else np.asarray(bias)[rows]
        ref[:, rows] = np.asarray(int4gemv.reference_gemv(a, part, b)).reshape(-1, rows.stop - rows.start)
    return ref
