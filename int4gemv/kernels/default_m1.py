"""The default tiling's M = 1 fold: one activation row, so the arithmetic can be re-paired.

With a single row, the activations of a chunk are loaded once and shared by all of a lane's
columns, so they can be re-paired (``(a0, a4), (a1, a5), (a2, a6), (a3, a7)`` per 8 elements: 4
PRMT, :func:`.half2.pair_words`) once for every column, and each weight word then needs no
byte permute: ``(w & 0x000F000F) | 0x64006400`` already lines up with ``(a0, a4)``
(:func:`.half2.dequant8`, one ``lop3`` and one HFMA2 per pair). Per word: 1 shift, 4 LOP3,
4 HFMA2 (exact ``q - zp`` pairs) and 4 HFMA2 (products) for fp16; bf16 converts the exact fp16
pairs to float32 (one HADD2.F32 per element) and multiplies them with the activations' float32
values in FFMA (float32 accumulation: a bf16x2 product would round each term to 8 bits).
fp16 sums 8 products per half (two words) before float32, as the M > 1 fold does.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from . import bf16
from .half2 import NO_ZP_HIGH, NO_ZP_LOW, dequant8, dot8, pair_words, zero_point_constants
from .intrinsics import half2_sum
from .nibble_pairs import half_high, half_low

__all__ = ["scalar_fold"]

_U0 = np.uint32(0)


def scalar_fold(config, load_act):
    """The M = 1 fold device function of ``config`` (a :class:`~.default_config.DefaultConfig`):
    ``fold_m1(act, j0, nwords, nchunks, raw, sv, zv, acc, full)`` adds one step's products to
    ``acc[0, c]``. ``raw``/``sv``/``zv`` are what the default tiling's ``issue`` loaded, with the
    zero points as nibbles; ``load_act(act, offset, valid)`` reads 8 activations (4 uint32)."""
    F16 = config.dtype == "float16"
    C, L, U = config.cols, config.lanes, config.unroll
    ZP, TWO_GROUPS = config.zero_points, config.block_size == 16

    @cuda.jit(device=True, inline=True)
    def offsets(z):
        """The re-paired zero-point constants of a group (``z``: its nibble, from ``issue``)."""
        return zero_point_constants(z) if ZP else (NO_ZP_LOW, NO_ZP_HIGH)

    @cuda.jit(device=True, inline=True)
    def word_dot(w, x, low, high, f):
        """``f + sum a_i (q_i - zp)`` over the 8 nibbles of word ``w`` and the activations ``x``
        (4 uint32 in memory order; bf16: their 8 float32 values). fp16: ``x`` are re-paired
        half2 words and ``f`` a half2 accumulator; bf16: float32 throughout."""
        if F16:
            return dot8(w, x[0], x[1], x[2], x[3], low, high, f)
        d0, d1, d2, d3 = dequant8(w, low, high)      # (q0, q4), (q1, q5), (q2, q6), (q3, q7)
        f += half_low(d0) * x[0]           # one FFMA per element
        f += half_high(d0) * x[4]
        f += half_low(d1) * x[1]
        f += half_high(d1) * x[5]
        f += half_low(d2) * x[2]
        f += half_high(d2) * x[6]
        f += half_low(d3) * x[3]
        return f + half_high(d3) * x[7]

    @cuda.jit(device=True, inline=True)
    def act_operand(x):
        """8 activations (4 uint32 in memory order) as :func:`word_dot` takes them: fp16 re-paired
        ``(a0,a4), (a1,a5), (a2,a6), (a3,a7)``; bf16 their float32 values ``a0 .. a7``."""
        if F16:
            return pair_words(x[0], x[1], x[2], x[3])
        return (bf16.low_value(x[0]), bf16.high_value(x[0]), bf16.low_value(x[1]),
                bf16.high_value(x[1]), bf16.low_value(x[2]), bf16.high_value(x[2]),
                bf16.low_value(x[3]), bf16.high_value(x[3]))

    @cuda.jit(device=True, inline=True)
    def fold_m1(act, j0, nwords, nchunks, raw, sv, zv, acc, full):
        """M = 1 form of the default tiling's fold: the chunk's activations are loaded and re-paired once
        for all ``C`` columns, and each word costs 1 shift, 4 LOP3 and 8 HFMA2 (fp16; no byte
        permutes): ``(w & 0x000F000F)`` lines up with ``(a0, a4)`` (:mod:`.half2`)."""
        part = cuda.local.array(C, float32)
        for u in range(U):
            j_raw = j0 + u * L
            j = j_raw if full else min(j_raw, nchunks - 1)
            for h in range(2):           # the chunk's two 16-element halves: words 2h, 2h + 1
                xa = act_operand(load_act(act, 32 * j + 16 * h, full or 4 * j_raw + 2 * h < nwords))
                xb = act_operand(load_act(act, 32 * j + 16 * h + 8,
                                          full or 4 * j_raw + 2 * h + 1 < nwords))
                for c in range(C):
                    low, high = offsets(zv[c, u, h] if TWO_GROUPS else zv[c, u, 0])
                    if F16:
                        t = word_dot(raw[c, u, 2 * h + 1], xb, low, high,
                                     word_dot(raw[c, u, 2 * h], xa, low, high, _U0))
                        f = half2_sum(t)
                    else:
                        f = word_dot(raw[c, u, 2 * h + 1], xb, low, high,
                                     word_dot(raw[c, u, 2 * h], xa, low, high, float32(0.0)))
                    if TWO_GROUPS:
                        acc[0, c] += sv[c, u, h] * f
                    elif h == 0:
                        part[c] = f
                    else:
                        acc[0, c] += sv[c, u, 0] * (part[c] + f)

    return fold_m1
