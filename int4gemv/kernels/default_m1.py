"""The default tiling's M = 1 fold: one activation row, so the arithmetic can be re-paired.

With a single row, the activations of a chunk are shared by all of a lane's columns, so they
can be re-paired (``(a0, a4), (a1, a5), (a2, a6), (a3, a7)`` per 8 elements: 4 PRMT,
:func:`.half2.pair_words`) once for every column, and each weight word then needs no byte
permute: ``(w & 0x000F000F) | 0x64006400`` already lines up with ``(a0, a4)``
(:func:`.half2.dequant8`, one ``lop3`` and one HFMA2 per pair). Per word: 1 shift, 4 LOP3,
4 HFMA2 (exact ``q - zp`` pairs) and 4 HFMA2 (products); each half sums 8 products (two words)
in fp16 before float32, as the M > 1 fold does.

bf16 takes the same fp16 arithmetic on its row scaled by a power of two (:mod:`.bf16`: the
largest ``|a|`` lands in ``[128, 256)``, the results are scaled back in float32), in grids of at
least ``STAGE_MIN_GROUPS`` column groups per warp and K <= ``STAGE_MAX_K``
(:func:`.default_config.stages_row`): each block finds the row's largest magnitude, then
converts the whole row once into the re-paired, scaled fp16 words (8 shifts/masks, 8 FMUL and 4
``cvt.rn.f16x2.f32`` per 8 activations) in shared memory; every step then reads its words there
(:func:`stage_activations`), so a bf16 word costs what an fp16 word costs, less fp16's PRMT. A
row outside the scale's range (:data:`.bf16.MAX_SHIFT`, NaN and infinities included) and every
other bf16 M = 1 grid fold in float32 instead: the exact fp16 pairs converted to float32 (one
HADD2.F32 per element) times the activations' float32 values in FFMA. The same stage (fp16 rows
too) feeds the tensor-core fold, :mod:`.default_mma`.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from . import bf16
from .default_config import STAGE_MAX_K
from .half2 import NO_ZP_HIGH, NO_ZP_LOW, dequant8, dot8, pair_words, zero_point_constants
from .intrinsics import float_as_int, half2_sum, shfl_xor
from .nibble_pairs import half_high, half_low

__all__ = ["scalar_fold", "stage_activations", "STAGE_WORDS", "STAGE_SIZE", "CHUNK_STRIDE", "ZERO_SLOT",
           "CORRECTION"]

_U0, _U1, _U2, _U3 = np.uint32(0), np.uint32(1), np.uint32(2), np.uint32(3)
_ALL = np.uint32(0xFFFFFFFF)

#: Words between two chunks' 16 staged words: 20, a multiple of 4, so that a group's 4 words are
#: 16-byte aligned and read with one ``LDS.128`` (the stage is allocated 16-byte aligned on the
#: GPU), and the 8 lanes of a quarter-warp, reading chunks ``s .. s + 7``, start at banks
#: ``20 s mod 32`` = 0, 20, 8, 28, 16, 4, 24, 12: 32 different banks, no conflict. (17, the
#: stride for scalar reads, left odd chunks unaligned: 4 ``LDS`` and their address math per group.)
CHUNK_STRIDE = 20
#: Where a chunk's 4 padding words start: for the mma fold (:mod:`.default_mma`) the stage fill
#: puts there the float32 bits of ``C_h = 1024 S_lo + 64 S_hi`` and ``T_h = S_lo + S_hi`` of the
#: chunk's halves ``h`` (``C_0, C_1, T_0, T_1``; ``S_lo``/``S_hi``: the sums of the staged
#: activations of the half's low/high nibbles, i.e. its even/odd elements): one ``LDS.128``.
CORRECTION = 16
#: The row's words: 10 KB per block.
STAGE_WORDS = STAGE_MAX_K // 32 * CHUNK_STRIDE
#: 4 zero words after the bf16 fill's per-warp words (up to 8 warps), zeroed by the stage fill
#: for the mma fold: a 16-byte zero read.
ZERO_SLOT = STAGE_WORDS + 8
#: The stage's size in uint32 words.
STAGE_SIZE = ZERO_SLOT + 4


def stage_activations(config, load_act):
    """``fill(act, stage, nwords, nchunks) -> (half, unscale)``: the block converts the activation
    row (``load_act`` as in :func:`scalar_fold`; words past K as zeros) into re-paired fp16
    words, chunk ``j``'s 16 at ``stage[CHUNK_STRIDE * j + 4 * q + e]`` (``q``: its 8-element
    group) and, with ``config.mma``, 4 zeros at ``stage[ZERO_SLOT ..]`` (a 16-byte zero operand
    for :mod:`.default_mma`) and each chunk's offset sums at :data:`CORRECTION` (one more pass
    and barrier), and returns, to every thread of the block, whether the row takes the fp16
    arithmetic and the float32 factor that undoes its scale.
    bf16: the row scaled by its power of two (:func:`.bf16.row_scales`; ``2**-s`` undoes it,
    1 where the row is out of range and not staged), two passes over the row: its largest
    magnitude (each warp's by shuffles, the block's through ``stage[STAGE_WORDS + warp]``), then
    the conversion. fp16: one pass, the words as they are (always ``(True, 1.0)``). Every thread
    of the block must call it (two barriers for bf16, one for fp16; one more with the mma fold);
    K <= :data:`.default_config.STAGE_MAX_K`; ``stage`` holds :data:`STAGE_SIZE` words."""
    THREADS, WARPS = 32 * config.warps, config.warps
    F16, MMA = config.dtype == "float16", config.mma   # the zero slot and sums: the mma fold's

    @cuda.jit(device=True, inline=True)
    def mma_operands(stage, nchunks):
        """The mma fold's zero slot and, after a barrier, its per-half sums (:data:`CORRECTION`),
        from the staged words as the fold will read them (a second pass over the stage)."""
        if MMA:
            if cuda.threadIdx.x < 4:
                stage[ZERO_SLOT + cuda.threadIdx.x] = _U0
            cuda.syncthreads()
            for i in range(cuda.threadIdx.x, 2 * nchunks, THREADS):
                j, h = i // 2, i % 2
                b = np.uint32(CHUNK_STRIDE * j + 8 * h)
                low, high = float32(0.0), float32(0.0)
                for e in range(8):   # even words (a0, a4), (a2, a6): low nibbles; odd: high
                    v = stage[b + np.uint32(e)]
                    if e % 2 == 0:
                        low += half_low(v) + half_high(v)
                    else:
                        high += half_low(v) + half_high(v)
                c = np.uint32(CHUNK_STRIDE * j + CORRECTION + h)
                stage[c] = np.uint32(float_as_int(float32(1024.0) * low + float32(64.0) * high))
                stage[c + _U2] = np.uint32(float_as_int(low + high))

    @cuda.jit(device=True, inline=True)
    def fill(act, stage, nwords, nchunks):
        if F16:
            for i in range(cuda.threadIdx.x, 4 * nchunks, THREADS):
                j, q = i // 4, i % 4
                x = load_act(act, 32 * j + 8 * q, 4 * j + q < nwords)
                w = pair_words(x[0], x[1], x[2], x[3])
                for e in range(4):
                    stage[CHUNK_STRIDE * j + 4 * q + e] = w[e]
            mma_operands(stage, nchunks)
            cuda.syncthreads()
            return True, float32(1.0)
        top = np.int32(0)        # magnitude bits (<= 0x7FFF); int32: what shuffles take
        for i in range(cuda.threadIdx.x, 4 * nchunks, THREADS):
            j, q = i // 4, i % 4
            x = load_act(act, 32 * j + 8 * q, 4 * j + q < nwords)
            for e in range(4):
                top = max(top, np.int32(bf16.magnitude_top(x[e])))
        for r in range(5):
            top = max(top, shfl_xor(top, np.uint32(16 >> r)))
        if cuda.threadIdx.x % 32 == 0:
            stage[STAGE_WORDS + cuda.threadIdx.x // 32] = np.uint32(top)
        cuda.syncthreads()
        for k in range(WARPS):
            top = max(top, np.int32(stage[STAGE_WORDS + k]))
        half, scale, unscale = bf16.row_scales(np.uint32(top))
        if half:
            for i in range(cuda.threadIdx.x, 4 * nchunks, THREADS):
                j, q = i // 4, i % 4
                x = load_act(act, 32 * j + 8 * q, 4 * j + q < nwords)
                w = bf16.half_pairs(x[0], x[1], x[2], x[3], scale)
                for e in range(4):
                    stage[CHUNK_STRIDE * j + 4 * q + e] = w[e]
            mma_operands(stage, nchunks)
        cuda.syncthreads()
        return half, unscale

    return fill


def scalar_fold(config, load_act):
    """The M = 1 fold device function of ``config`` (a :class:`~.default_config.DefaultConfig`):
    ``fold_m1(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full, staged)`` adds one step's
    products to ``acc[0, c]``. ``raw``/``sv``/``zv`` are what the default tiling's ``issue``
    loaded, with the zero points as nibbles; ``load_act(act, offset, valid)`` reads 8 activations
    (4 uint32). ``staged`` (bf16; fp16 never is): fp16 arithmetic on the re-paired words of
    ``stage`` (the caller may pass it only after :func:`stage_activations` returned True); else
    fp16 loads and re-pairs its activations itself, and bf16 folds in float32."""
    F16 = config.dtype == "float16"

    fold_staged = _fold(config, load_act, True, True)
    fold_loaded = _fold(config, load_act, F16, False)

    @cuda.jit(device=True, inline=True)
    def fold_m1(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full, staged):
        """M = 1 form of the default tiling's fold (see the module docstring)."""
        if staged:
            fold_staged(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full)
        else:
            fold_loaded(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full)

    return fold_m1


def _fold(config, load_act, HALF, STAGED):
    """The fold in fp16 pair arithmetic (``HALF``) or in float32 (bf16 outside the fp16 range),
    on the stage's words (``STAGED``, fp16 arithmetic only) or on activations it loads."""
    F16 = config.dtype == "float16"
    C, L, U = config.cols, config.lanes, config.unroll
    ZP, TWO_GROUPS = config.zero_points, config.block_size == 16

    @cuda.jit(device=True, inline=True)
    def offsets(z):
        """The re-paired zero-point constants of a group (``z``: its nibble, from ``issue``)."""
        return zero_point_constants(z) if ZP else (NO_ZP_LOW, NO_ZP_HIGH)

    @cuda.jit(device=True, inline=True)
    def word_dot(w, x, low, high, f):
        """``f + sum a_i (q_i - zp)`` over the 8 nibbles of word ``w`` and the activations ``x``.
        ``HALF``: ``x`` are re-paired half2 words and ``f`` a half2 accumulator; else ``x`` are
        the 8 float32 values and ``f`` float32."""
        if HALF:
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
    def act_operand(act, stage, j, q, valid):
        """The 8 activations of group ``q`` of chunk ``j`` as :func:`word_dot` takes them (zeros
        where not ``valid``): re-paired fp16 words ``(a0,a4), (a1,a5), (a2,a6), (a3,a7)`` (from
        the stage, or fp16 loaded and re-paired: 4 PRMT), or (float32 fold) their float32
        values."""
        if STAGED:
            # a select, not a branch: j is a valid (clamped) chunk, so the words can be read
            # and masked (a branch here kept the K-tail guards in the bf16 full step: SASS)
            keep = _ALL if valid else _U0
            b = np.uint32(CHUNK_STRIDE * j + 4 * q)   # unsigned: no negative-index wrap
            return (stage[b] & keep, stage[b + _U1] & keep, stage[b + _U2] & keep,
                    stage[b + _U3] & keep)
        x = load_act(act, 32 * j + 8 * q, valid)
        if F16:
            return pair_words(x[0], x[1], x[2], x[3])
        return (bf16.low_value(x[0]), bf16.high_value(x[0]), bf16.low_value(x[1]),
                bf16.high_value(x[1]), bf16.low_value(x[2]), bf16.high_value(x[2]),
                bf16.low_value(x[3]), bf16.high_value(x[3]))

    @cuda.jit(device=True, inline=True)
    def fold(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full):
        """The chunk's activations are loaded (or read from the stage) once for all ``C`` columns; each
        word costs 1 shift, 4 LOP3 and 8 HFMA2 (``HALF``; no byte permutes): ``(w & 0x000F000F)``
        lines up with ``(a0, a4)`` (:mod:`.half2`)."""
        part = cuda.local.array(C, float32)
        for u in range(U):
            j_raw = j0 + u * L
            j = j_raw if full else min(j_raw, nchunks - 1)
            for h in range(2):           # the chunk's two 16-element halves: words 2h, 2h + 1
                xa = act_operand(act, stage, j, 2 * h, full or 4 * j_raw + 2 * h < nwords)
                xb = act_operand(act, stage, j, 2 * h + 1, full or 4 * j_raw + 2 * h + 1 < nwords)
                for c in range(C):
                    low, high = offsets(zv[c, u, h] if TWO_GROUPS else zv[c, u, 0])
                    if HALF:
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

    return fold
