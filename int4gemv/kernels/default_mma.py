"""The default tiling's M = 1 fold on tensor cores (``DefaultConfig.mma``).

The products and the group sums of one row leave the CUDA cores: a warp's 16 columns are the A
operand of ``mma.sync.m16n8k16`` and the activations are spread over B's columns so that each
column of D is one lane's partial sum over half a chunk.

Mapping (the default tiling with ``lanes = 4``, ``cols = 2``: lane ``l = 4 g + t`` takes the
columns ``g`` and ``g + 8`` of its column group and the chunks ``t, t + 4, ...`` of both)::

    word w (8 elements) of the lane's chunk, half h (0, 1) of the word's re-paired pairs:
        a0 = (1024 + q[2h], 1024 + q[2h+4]) of column g     a2 = (64 + q[2h+1], 64 + q[2h+5])
        a1, a3: the same of column g + 8                    (:func:`.half2.offset_pairs8`)
        b0 = (x[2h], x[2h+4]), b1 = (x[2h+1], x[2h+5]) of the word's activations, held only by
        the lane (g, t) with g == 2 t + w // 2 (every other lane holds zeros)
    so B's column n = 2 t + w // 2 carries lane t's words w, and after a chunk's 8 mma lane
    (g, t) holds D[g][2t], D[g][2t+1] (column g, its own chunk's halves: words 0-1, 2-3) and
    D[g+8][2t], D[g+8][2t+1] (column g + 8): exactly the partial sums it has the scales for.

The mma's k order is a permutation shared by A and B (lane t's four k positions are elements
``2h, 2h+4, 2h+1, 2h+5`` of a word), which a dot product does not see. A holds the nibbles with
an offset, not ``q - zp``: a low nibble (even element) as ``1024 + q``, a high one (odd element)
as ``64 + q``, both exact fp16 straight from the LOP3, so no HFMA2 touches the weights. A half's
D is then ``sum a (q - zp) + C + zp T`` with ``C = 1024 S_lo + 64 S_hi`` and ``T = S_lo + S_hi``
(``S_lo``/``S_hi``: the sums of the half's even/odd staged activations), which the stage fill
computes once per block and chunk (:data:`.default_m1.CORRECTION`); the fold subtracts
``C + zp T`` (zp = 8 without zero points) before the scale. Per 8 elements of a column: 1 shift,
4 LOP3 and half an HMMA (the CUDA-core fold: 1 shift, 4 LOP3, 8 HFMA2 and its fp16-to-float32
sums); the steady full step of ``c2l4u2b5`` is 218 SASS instructions per 128 elements of a lane
(1.70 per element) against 269 with the exact ``q - zp`` pairs and 2.34 for the CUDA-core fold
(bench/NOTES.md, session 16).

Precision: each product is exact in float32 and D sums them in float32, but the sum carries the
offset terms (``1024 a`` per low nibble) that the subtraction cancels, so a half's absolute
error is about ``2**-24 (1040 + zp) sum |a|`` times the few additions of its accumulation (more
where the tensor cores truncate their alignment), i.e. ~1e-4 of ``sum |a|``, against the
CUDA-core fold's ``8u = 4e-3`` of ``sum |a| |q - zp|``. Unlike it, a weight whose nibbles all
equal the zero point gives a residue of that size, not an exact 0.

Activations (B): read from the stage of :func:`.default_m1.stage_activations` (fp16 as it is,
bf16 scaled into fp16 range), one ``LDS.128`` per word; a lane that does not feed B reads the
stage's zero slot instead (one address for all of them: a broadcast), so no register is
selected. Tails as the tiling's: words past K and clamped chunks past the column get zeros
(staged as zeros, so outside every ``C`` and ``T``), and a clamped chunk subtracts nothing.

*Unstaged* (the direct fold): where the tiling does not stage the row (too few column groups
per warp, K > ``STAGE_MAX_K``, a bf16 row out of the fp16 range, and every K-split grid:
``ksplit`` warps sharing a column group, :func:`.default_mma_batch.ksplit_walk`), the feeding
lane loads its word's 8 activations itself (one 16-byte load, L1 hits; the other lanes load
nothing and hold zeros) and re-pairs them (4 PRMT), and ``C`` and ``T`` come from the tensor
cores too: a second ``mma`` on the same B with a constant A, rows 0..7 ``(1024, 64)`` (``C``) and
rows 8..15 ``(1, 1)`` (``T``), leaves lane ``(g, t)`` exactly the ``C_0, C_1, T_0, T_1`` of its
chunk. bf16 folds on bf16 tensor cores, with no range limit: A holds ``128 + q`` for every
nibble (exact bf16: 3 shifts, 4 LOP3 a word), the constant A ``(128, 128)`` and ``(1, 1)``.
Words past K load nothing, so a clamped chunk's D and its ``C``, ``T`` are all zero.

Every lane of the warp must call the fold together (``mma.sync.aligned``): the default tiling
calls it in warp-uniform loops.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from .mma_tiling import MMA_LANES
from .default_m1 import CHUNK_STRIDE, CORRECTION, ZERO_SLOT
from .half2 import offset_pairs8, pair_words
from .intrinsics import and_or, int_as_float
from .mma import mma_bf16, mma_f16

__all__ = ["mma_fold", "offset_pairs8_bf16", "CORRECTION_A"]

_U0, _U1, _U2, _U3 = np.uint32(0), np.uint32(1), np.uint32(2), np.uint32(3)
_ALL = np.uint32(0xFFFFFFFF)
_LOW = np.uint32(0x000F000F)
_BF16_MAGIC = np.uint32(0x43004300)      # bf16x2 (128, 128): a step of 1 at bits 0..3
#: The direct fold's constant A (a0, a1, a2, a3) per dtype: rows 0..7 the offsets of the low and
#: high nibbles' pairs (``C``), rows 8..15 ones (``T``).
CORRECTION_A = {"float16": (np.uint32(0x64006400), np.uint32(0x3C003C00), np.uint32(0x54005400),
                            np.uint32(0x3C003C00)),
                "bfloat16": (np.uint32(0x43004300), np.uint32(0x3F803F80), np.uint32(0x43004300),
                             np.uint32(0x3F803F80))}


@cuda.jit(device=True, inline=True)
def offset_pairs8_bf16(w):
    """:func:`.half2.offset_pairs8`'s pairs as exact bf16 with one offset: ``(128 + q0, 128 + q4),
    (128 + q1, 128 + q5), (128 + q2, 128 + q6), (128 + q3, 128 + q7)`` of uint32 ``w`` (bf16's 7
    mantissa bits leave no room for a nibble at bits 4..7: 3 shifts, 4 LOP3)."""
    t = w >> np.uint32(8)
    return (and_or(w, _LOW, _BF16_MAGIC), and_or(w >> np.uint32(4), _LOW, _BF16_MAGIC),
            and_or(t, _LOW, _BF16_MAGIC), and_or(t >> np.uint32(4), _LOW, _BF16_MAGIC))


def mma_fold(config, load_act):
    """The M = 1 tensor-core fold of ``config`` (a :class:`~.default_config.DefaultConfig` with
    ``mma``, whose check ensures M = 1 and the tiling the mapping needs): ``fold(act, stage, j0,
    nwords, nchunks, raw, sv, zv, acc, full, staged)``, the signature and contract of
    :func:`.default_m1.scalar_fold`."""
    if not config.mma:
        raise ValueError(f"the mma fold needs a DefaultConfig with mma=True; got {config}")
    U, ZP, TWO_GROUPS = config.unroll, config.zero_points, config.block_size == 16
    F16 = config.dtype == "float16"
    STRIPES = MMA_LANES * config.ksplit      # chunk stride of a lane's chunks
    K0, K1, K2, K3 = CORRECTION_A[config.dtype]
    offsets = offset_pairs8 if F16 else offset_pairs8_bf16   # the direct fold's A pairs

    @cuda.jit(device=True, inline=True)
    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """The direct fold's ``mma`` in the row's dtype."""
        if F16:
            return mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        return mma_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

    @cuda.jit(device=True, inline=True)
    def b_operand(stage, j, w, feeds, valid):
        """The re-paired activations of word ``w`` of chunk ``j`` from the stage; the stage's
        zero slot unless the lane ``feeds`` B with them and they are ``valid`` (inside K):
        one 16-byte read either way (an address select, no register select)."""
        q = np.uint32(4) * (np.uint32(CHUNK_STRIDE // 4) * np.uint32(j) + np.uint32(w))
        b = q if feeds and valid else np.uint32(ZERO_SLOT)
        return (stage[b], stage[b + np.uint32(1)], stage[b + np.uint32(2)], stage[b + np.uint32(3)])

    @cuda.jit(device=True, inline=True)
    def offset_sums(stage, j, keep):
        """``(C_0, C_1, T_0, T_1)`` of chunk ``j`` (the stage fill's :data:`.default_m1.CORRECTION`
        words; zeros unless ``keep``: a chunk clamped past the column folded zeros)."""
        b = np.uint32(CHUNK_STRIDE) * np.uint32(j) + np.uint32(CORRECTION)
        m = _ALL if keep else _U0
        return (int_as_float(np.int32(stage[b] & m)), int_as_float(np.int32(stage[b + _U1] & m)),
                int_as_float(np.int32(stage[b + _U2] & m)), int_as_float(np.int32(stage[b + _U3] & m)))

    @cuda.jit(device=True, inline=True)
    def zero_point(zv, c, u, h):
        """Column ``c``'s zero point as float32 (8 without zero points)."""
        return float32(zv[c, u, h]) if ZP else float32(8.0)

    @cuda.jit(device=True, inline=True)
    def add_step(acc, d0, d1, d2, d3, c0, c1, t0, t1, sv, zv, u):
        """Chunk ``u``'s D (``d*``) and offset sums (``c*``, ``t*``) into ``acc[0, 0..1]``."""
        if TWO_GROUPS:
            acc[0, 0] += ((d0 - (c0 + zero_point(zv, 0, u, 0) * t0)) * sv[0, u, 0]
                          + (d1 - (c1 + zero_point(zv, 0, u, 1) * t1)) * sv[0, u, 1])
            acc[0, 1] += ((d2 - (c0 + zero_point(zv, 1, u, 0) * t0)) * sv[1, u, 0]
                          + (d3 - (c1 + zero_point(zv, 1, u, 1) * t1)) * sv[1, u, 1])
        else:
            c, t_ = c0 + c1, t0 + t1
            acc[0, 0] += (d0 + d1 - (c + zero_point(zv, 0, u, 0) * t_)) * sv[0, u, 0]
            acc[0, 1] += (d2 + d3 - (c + zero_point(zv, 1, u, 0) * t_)) * sv[1, u, 0]

    @cuda.jit(device=True, inline=True)
    def fold_mma(stage, j0, nwords, nchunks, raw, sv, zv, acc, full):
        lane = cuda.threadIdx.x % 32
        g, t = lane // 4, lane % 4
        for u in range(U):
            j_raw = j0 + u * STRIPES
            j = j_raw if full else min(j_raw, nchunks - 1)
            d0 = d1 = d2 = d3 = float32(0.0)
            for w in range(4):
                x = b_operand(stage, j, w, g == 2 * t + w // 2, full or 4 * j_raw + w < nwords)
                p = offset_pairs8(raw[0, u, w])   # (1024 + q0, 1024 + q4), (64 + q1, 64 + q5), ...
                r = offset_pairs8(raw[1, u, w])
                d0, d1, d2, d3 = mma_f16(p[0], r[0], p[1], r[1], x[0], x[1], d0, d1, d2, d3)
                d0, d1, d2, d3 = mma_f16(p[2], r[2], p[3], r[3], x[2], x[3], d0, d1, d2, d3)
            c0, c1, t0, t1 = offset_sums(stage, j, full or j_raw < nchunks)
            add_step(acc, d0, d1, d2, d3, c0, c1, t0, t1, sv, zv, u)

    @cuda.jit(device=True, inline=True)
    def fold_direct(act, j0, nwords, nchunks, raw, sv, zv, acc, full):
        """The unstaged fold (see the module docstring): B loaded by its feeding lanes, the
        offset sums from a second ``mma`` on a constant A."""
        lane = cuda.threadIdx.x % 32
        g, t = lane // 4, lane % 4
        for u in range(U):
            j_raw = j0 + u * STRIPES
            j = j_raw if full else min(j_raw, nchunks - 1)
            d0 = d1 = d2 = d3 = float32(0.0)
            e0 = e1 = e2 = e3 = float32(0.0)
            for w in range(4):
                feeds = g == 2 * t + w // 2 and (full or 4 * j_raw + w < nwords)
                y = load_act(act, 32 * j + 8 * w, feeds)   # zeros unless it feeds B
                x = pair_words(y[0], y[1], y[2], y[3])
                p = offsets(raw[0, u, w])
                r = offsets(raw[1, u, w])
                d0, d1, d2, d3 = mma(p[0], r[0], p[1], r[1], x[0], x[1], d0, d1, d2, d3)
                d0, d1, d2, d3 = mma(p[2], r[2], p[3], r[3], x[2], x[3], d0, d1, d2, d3)
                e0, e1, e2, e3 = mma(K0, K1, K2, K3, x[0], x[1], e0, e1, e2, e3)
                e0, e1, e2, e3 = mma(K0, K1, K2, K3, x[2], x[3], e0, e1, e2, e3)
            add_step(acc, d0, d1, d2, d3, e0, e1, e2, e3, sv, zv, u)

    @cuda.jit(device=True, inline=True)
    def fold(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full, staged):
        """One step's products into ``acc[0, 0..1]`` (see the module docstring); ``staged``: the
        row is in the stage (fp16 words), else the direct fold."""
        if staged:
            fold_mma(stage, j0, nwords, nchunks, raw, sv, zv, acc, full)
        else:
            fold_direct(act, j0, nwords, nchunks, raw, sv, zv, acc, full)

    return fold
