"""The default tiling's M > 1 fold: each weight word unpacked once, applied to every row.

Byte ``b`` of a weight word becomes the exact fp16 pair ``(q[2b] - zp, q[2b+1] - zp)`` with one
PRMT, one LOP3 and one HFMA2 (:mod:`.nibble_pairs`); these pairs line up with the activations as
they lie in memory, so each of the M rows costs one ``fma.rn.f16x2`` per pair (fp16: 8 products
summed per half in fp16, then float32), or float32 FFMA (bf16: the pair's halves converted to
float32 times the activations' float32 values). Scales multiply the float32 partial sums once
per 16 (bs 16: a chunk holds two quantization groups) or 32 elements. The M = 1 fold, which
re-pairs the activations instead, is :mod:`.default_m1`.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from . import bf16
from .intrinsics import half2_fma, half2_sum
from .nibble_pairs import dequant_pair, half_high, half_low

__all__ = ["batch_fold"]

_U0 = np.uint32(0)


def batch_fold(config, load_act):
    """The M > 1 fold device function of ``config`` (a :class:`~.default_config.DefaultConfig`):
    ``fold(act, j0, nwords, nchunks, K, raw, sv, zv, acc, full)`` adds one step's products to
    ``acc[m, c]`` (``m < config.M``, ``c < config.cols``). ``raw[c, u, 0..3]`` are the words of
    chunk ``j0 + u * lanes`` (clamped to ``nchunks - 1`` unless ``full``) of column ``c``,
    ``sv``/``zv`` its float32 scales and :func:`~.nibble_pairs.zero_point_offset` words (two
    per chunk at block size 16, else one), as the default tiling's ``issue`` loaded them;
    ``load_act(act, offset, valid)`` reads 8 activations (4 uint32, zeros unless ``valid``).
    ``full`` (warp-uniform): no chunk of the step reaches past K, so the guards fold away."""
    F16 = config.dtype == "float16"
    M, C, L, U = config.M, config.cols, config.lanes, config.unroll
    TWO_GROUPS = config.block_size == 16     # a chunk holds two quantization groups

    @cuda.jit(device=True, inline=True)
    def fold(act, j0, nwords, nchunks, K, raw, sv, zv, acc, full):
        """Add one step's products to ``acc[m, c]``: each word is unpacked once (exact fp16
        pairs ``q - zp``) and applied to every activation row (``full`` as in ``issue``)."""
        dq = cuda.local.array((C, 16), np.uint32)
        part = cuda.local.array(C, float32)
        for u in range(U):
            j_raw = j0 + u * L
            j = j_raw if full else min(j_raw, nchunks - 1)
            for c in range(C):
                for i in range(4):
                    z = zv[c, u, i // 2] if TWO_GROUPS else zv[c, u, 0]
                    for b in range(4):
                        dq[c, 4 * i + b] = dequant_pair(raw[c, u, i], b, z)
            for m in range(M):
                base = m * K + 32 * j
                for c in range(C):
                    part[c] = float32(0.0)
                for h in range(2):
                    xa = load_act(act, base + 16 * h, full or 4 * j_raw + 2 * h < nwords)
                    xb = load_act(act, base + 16 * h + 8, full or 4 * j_raw + 2 * h + 1 < nwords)
                    for c in range(C):
                        if F16:
                            t = _U0
                            for e in range(4):
                                t = half2_fma(dq[c, 8 * h + e], xa[e], t)
                            for e in range(4):
                                t = half2_fma(dq[c, 8 * h + 4 + e], xb[e], t)
                            f = half2_sum(t)
                        else:
                            f = float32(0.0)
                            for e in range(4):
                                d = dq[c, 8 * h + e]
                                f += half_low(d) * bf16.low_value(xa[e])
                                f += half_high(d) * bf16.high_value(xa[e])
                            for e in range(4):
                                d = dq[c, 8 * h + 4 + e]
                                f += half_low(d) * bf16.low_value(xb[e])
                                f += half_high(d) * bf16.high_value(xb[e])
                        if TWO_GROUPS:
                            part[c] += sv[c, u, h] * f
                        else:
                            part[c] += f
                for c in range(C):
                    acc[m, c] += part[c] if TWO_GROUPS else sv[c, u, 0] * part[c]

    return fold
