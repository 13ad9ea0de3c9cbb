"""Tensor-core INT4 GEMV for a batch of M = 1..16 rows: ``mma.sync.m16n8k16``, fp32 accumulation.

``Y[M, N] = X[M, K] · W[N, K]ᵀ (+ bias)`` is computed transposed, ``Yᵀ = W · Xᵀ``: 16 weight
columns are the ``mma`` A operand (16×16, dequantized in registers), the activation rows the B
operand (16×8: rows 0..7, and a second ``mma`` for rows 8..15 when M > 8), so one ``mma`` serves
up to 8 rows for the price of one and M = 1..16 cost about the same.

Mapping (lane ``l``: ``g = l // 4``, ``t = l % 4``; a *segment* is 128 elements of K)::

    column group = tiles x 16 columns     warp w of a block: kpart = w % ksplit, slot = w // ksplit
    lane (g, t) of a tile: columns g and g + 8; K elements [128 s + 32 t, 128 s + 32 t + 32)
        -> one 16-byte load per column and segment (bytes 16 t .. 16 t + 15 of the segment)
    mma j = 0..7 of segment s (word i = j // 2, bytes 2 (j % 2) and 2 (j % 2) + 1 of it):
        a0 = pair(col g, byte 2 (j%2)),   a2 = pair(col g, byte 2 (j%2) + 1)     A rows g
        a1, a3: the same bytes of column g + 8                                  A rows g + 8
        b0, b1 = activation row g (8 + g), elements 128 s + 32 t + 4 j .. + 3    (8 bytes)
    D: d0, d1 = columns g, rows 2t, 2t+1; d2, d3 = column g + 8 (rows + 8 for the second tile)

The ``mma`` sums its 16 k over the four lanes of a group, which hold different 32-element
ranges of K: the mapping permutes K, identically for A and B, so the sum is unchanged, and every
lane's loads are contiguous. Weight pairs are the exact ``(q - zp)`` of :mod:`.mma_pairs`,
multiplied by their group's scale (one x2 rounding, as a dequantized weight in the activations'
dtype; bs 16: two groups per lane and segment). Activations are read with 16-byte loads from
global memory (L1 hits: every warp of an SM reads the same rows), not staged in shared memory:
a resident ``[16, K]`` copy needs 64-192 KB of dynamic shared memory (bench/NOTES.md, "Tensor
cores", lists that experiment).

Work: a block's ``warps`` fold ``warps / ksplit`` column groups at once; the ``ksplit`` warps of
a group each take a contiguous slice of the segments, then add their partial sums through shared
memory in a fixed order (no atomics; the result does not depend on timing), each warp summing and
writing a share of the group's outputs. The grid is
persistent: block ``b`` takes block-rounds ``b, b + gridDim, ...``. A warp's step issues the
weight, scale and zero-point loads of ``tiles x unroll`` segments before folding any; with
``double_buffer`` the next step's loads are issued before this step folds. A step that lies
wholly inside K and the warp's slice (warp-uniform) runs without guards or clamps.

Each step's activation lines are prefetched into L1 (``prefetch.global.L1``) with its weight
loads, so the fold's activation loads hit L1 instead of each waiting for L2 in turn. Index math is
unsigned 64-bit (no floor-division fix-ups or negative-index checks), and the first step's loads
are issued before the activation offsets are computed (bench/NOTES.md, "Tensor cores v4").

Tails: a segment word past the packed row is not loaded (zero); activations past K (whole 8-element
chunks: K % 8 == 0) or in rows >= M are zero, so padding nibbles add exactly 0; columns past N are
clamped for loads and never stored; group indices are clamped to the row.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
from numba import cuda, float32

from .intrinsics import SIMULATED
from .mma import mma_bf16, mma_f16
from .mma_pairs import (NO_ZP_OFFSET_BF16, NO_ZP_OFFSET_F16, scaled_pair_bf16, scaled_pair_f16,
                        zero_point_offset_bf16, zero_point_offset_f16)
from .tensor_core_config import SEGMENT, TILE_COLS, TensorCoreConfig
from .tensor_core_epilogue import split_k_epilogue
from .vector_loads import load8, load16, load16_stream, prefetch_l1

__all__ = ["tensor_core_kernel"]

_Z = np.uint32(0)
_SIXTEEN = np.uint32(16)
_FOUR = np.uint32(4)
_NIBBLE = np.uint32(15)
#: Index math is unsigned 64-bit throughout: Python's signed ``//`` and negative-index wrap
#: cost ptxas 3-4 fix-up instructions per division and per array index, and the kernel's
#: prologue ran ~400 instructions before its first weight load (bench/NOTES.md, "v4").
_U = np.uint64
_U0, _U1, _U2, _U4, _U8 = _U(0), _U(1), _U(2), _U(4), _U(8)
#: Bytes of one lane's K range in a segment (32 nibbles), and of a segment.
_LANE_BYTES = _U(16)
_SEGMENT_BYTES = _U(SEGMENT // 2)
#: K elements of one lane's range in a segment.
_LANE_K = _U(32)
_USEGMENT = _U(SEGMENT)
_WARP = _U(32)


def tensor_core_kernel(config: TensorCoreConfig):
    """The compiled kernel of ``config``. Arguments, in order:
    ``(act, packed, scales, zero_points, bias, has_bias, out, K, N, M)``: act uint16 ``[M*K]``
    (activation bits); packed uint8 ``[N * ceil(K/bs) * bs/2]``; scales uint16 ``[N *
    ceil(K/bs)]`` (fp16 or bf16 bits); zero_points uint8 ``[N * ceil(ceil(K/bs)/2)]`` (read only
    when ``config.zero_points``); bias ``[N]`` (float16, or uint16 bf16 bits; read only if
    has_bias); out ``[M*N]`` (float16, or uint16 bf16 bits). ``packed`` 16-byte aligned (8 when
    not ``weight_vector``), ``act`` 16-byte aligned when ``act_vector``. ``M`` is a run-time
    argument: one compilation serves every M with the same number of 8-row tiles."""
    if not isinstance(config, TensorCoreConfig):
        raise TypeError(f"config must be a TensorCoreConfig; got {type(config).__name__}")
    tiles = 8 * config.row_tiles
    # compiled per row-tile count, and whether every row of the tiles exists (M = 8 or 16:
    # activation loads without predicates); M itself is a run-time argument
    return _compile(replace(config, M=tiles if config.M == tiles else tiles - 1))


@functools.lru_cache(maxsize=None)
def _compile(config):
    F16 = config.dtype == "float16"
    BS, ZP = config.block_size, config.zero_points
    C, U, KS, WARPS, MT = config.tiles, config.unroll, config.ksplit, config.warps, config.row_tiles
    SLOTS, DOUBLE = config.slots, config.double_buffer
    FULL_ROWS = config.M == 8 * MT               # every row of the row tiles exists
    W_VEC, ACT_VEC = config.weight_vector, config.act_vector
    P = 2 if BS == 16 else 1                    # scale groups in a lane's 32 elements
    NO_ZP = NO_ZP_OFFSET_F16 if F16 else NO_ZP_OFFSET_BF16
    mma = mma_f16 if F16 else mma_bf16
    SLOTS_PER_WARP = C * MT * 4                # accumulators a lane holds
    RED = (WARPS, SLOTS_PER_WARP, 32) if KS > 1 else (1, 1, 1)
    # the same constants as unsigned 64-bit values, for the index math
    UBS, UU, UKS, USLOTS = _U(BS), _U(U), _U(KS), _U(SLOTS)
    UGROUP_COLS, UTILE = _U(TILE_COLS * C), _U(TILE_COLS)

    @cuda.jit(device=True, inline=True)
    def load_weights(packed, offset, second, valid):
        """A lane's 16 bytes of a segment (zeros unless ``valid``; the second 8 only where
        ``second``: inside the row)."""
        if not valid:
            return (_Z, _Z, _Z, _Z)
        if W_VEC:   # read once: kept out of L1, which holds the activations every warp re-reads
            return load16_stream(packed, offset)
        lo = load8(packed, offset)
        hi = load8(packed, offset + _U8) if second else (_Z, _Z)
        return (lo[0], lo[1], hi[0], hi[1])

    @cuda.jit(device=True, inline=True)
    def load_act(act, offset, valid):
        """8 activations from element ``offset`` (uint64) as 4 uint32 pairs; zeros unless
        ``valid``."""
        if not valid:
            return (_Z, _Z, _Z, _Z)
        o = offset
        if ACT_VEC:
            return load16(act, o)
        return (np.uint32(act[o]) | (np.uint32(act[o + _U1]) << _SIXTEEN),
                np.uint32(act[o + _U2]) | (np.uint32(act[o + _U(3)]) << _SIXTEEN),
                np.uint32(act[o + _U4]) | (np.uint32(act[o + _U(5)]) << _SIXTEEN),
                np.uint32(act[o + _U(6)]) | (np.uint32(act[o + _U(7)]) << _SIXTEEN))

    @cuda.jit(device=True, inline=True)
    def group_constants(scales, zero_points, n, gi, nb, nzb):
        """``(scale, zero-point offset)`` of column ``n``'s group ``gi``, both as x2 bits."""
        s = np.uint32(scales[n * nb + gi])
        s2 = s | (s << _SIXTEEN)
        if ZP:
            byte = np.uint32(zero_points[n * nzb + (gi >> _U1)])
            zp = (byte >> np.uint32((gi & _U1) * _U4)) & _NIBBLE
            z = zero_point_offset_f16(zp) if F16 else zero_point_offset_bf16(zp)
        else:
            z = NO_ZP
        return s2, z

    @cuda.jit(device=True, inline=True)
    def issue(packed, scales, zero_points, cols, s0, seg_end, t, nb, nzb, row_bytes,
              raw, sv, zv, full):
        """Issue every weight, scale and zero-point load of one step before any is used.
        ``full`` (warp-uniform): every segment of the step lies inside K and the warp's slice,
        so the guards and clamps fold away."""
        for c in range(C):
            for h in range(2):
                n = cols[c, h]
                for u in range(U):
                    s = s0 + _U(u)
                    within = _SEGMENT_BYTES * s + _LANE_BYTES * t
                    x = load_weights(packed, n * row_bytes + within,
                                     full or within + _U8 < row_bytes,
                                     full or (s < seg_end and within < row_bytes))
                    for i in range(4):
                        raw[c, h, u, i] = x[i]
                    for p in range(P):
                        gi = (_USEGMENT * s + _LANE_K * t) // UBS + _U(p)
                        s2, z = group_constants(scales, zero_points, n,
                                                gi if full else min(gi, nb - _U1), nb, nzb)
                        sv[c, h, u, p] = s2
                        zv[c, h, u, p] = z

    @cuda.jit(device=True, inline=True)
    def pair(w, w_shifted, b, z, s2):
        """The scaled operand pair of byte ``b`` of word ``w`` (fp16 or bf16 bits)."""
        if F16:
            return scaled_pair_f16(w, w_shifted, b, z, s2)
        return scaled_pair_bf16(w, w_shifted, b, z, s2)

    @cuda.jit(device=True, inline=True)
    def fold(act, act_at, rows_ok, s0, seg_end, t, K, raw, sv, zv, acc, full):
        """Add one step's products to ``acc[tile, row tile, 0..3]`` (warp-uniform control;
        ``act_at[mt]``: this lane's activation offset of segment 0, ``rows_ok[mt]``: its row
        exists)."""
        xs = cuda.local.array((MT, 4), np.uint32)
        for u in range(U):
            s = s0 + _U(u)
            if full or s < seg_end:
                for i in range(4):
                    k = _USEGMENT * s + _U8 * _U(i)
                    for mt in range(MT):
                        x = load_act(act, act_at[mt] + k,
                                     rows_ok[mt] and (full or k + _LANE_K * t < K))
                        for e in range(4):
                            xs[mt, e] = x[e]
                    p = i // 2 if P == 2 else 0
                    for c in range(C):
                        w0, w1 = raw[c, 0, u, i], raw[c, 1, u, i]
                        w0s, w1s = w0 >> _FOUR, w1 >> _FOUR
                        for jj in range(2):
                            a0 = pair(w0, w0s, 2 * jj, zv[c, 0, u, p], sv[c, 0, u, p])
                            a2 = pair(w0, w0s, 2 * jj + 1, zv[c, 0, u, p], sv[c, 0, u, p])
                            a1 = pair(w1, w1s, 2 * jj, zv[c, 1, u, p], sv[c, 1, u, p])
                            a3 = pair(w1, w1s, 2 * jj + 1, zv[c, 1, u, p], sv[c, 1, u, p])
                            for mt in range(MT):
                                d = mma(a0, a1, a2, a3, xs[mt, 2 * jj], xs[mt, 2 * jj + 1],
                                        acc[c, mt, 0], acc[c, mt, 1], acc[c, mt, 2], acc[c, mt, 3])
                                for r in range(4):
                                    acc[c, mt, r] = d[r]

    @cuda.jit(device=True, inline=True)
    def step_is_full(s0, seg_end, K):
        return s0 + UU <= seg_end and _USEGMENT * (s0 + UU) <= K

    @cuda.jit(device=True, inline=True)
    def issue_step(packed, scales, zero_points, cols, s0, seg_end, t, K, nb, nzb, row_bytes,
                   raw, sv, zv):
        if step_is_full(s0, seg_end, K):
            issue(packed, scales, zero_points, cols, s0, seg_end, t, nb, nzb, row_bytes,
                  raw, sv, zv, True)
        else:
            issue(packed, scales, zero_points, cols, s0, seg_end, t, nb, nzb, row_bytes,
                  raw, sv, zv, False)

    @cuda.jit(device=True, inline=True)
    def fold_step(act, act_at, rows_ok, s0, seg_end, t, K, raw, sv, zv, acc):
        if step_is_full(s0, seg_end, K):
            fold(act, act_at, rows_ok, s0, seg_end, t, K, raw, sv, zv, acc, True)
        else:
            fold(act, act_at, rows_ok, s0, seg_end, t, K, raw, sv, zv, acc, False)

    @cuda.jit(device=True, inline=True)
    def prefetch_act(act, act_at, rows_ok, s0, seg_end, t, K):
        """Bring the activation lines of the step at ``s0`` into L1 (this lane's 64 bytes of
        each row and segment), issued with the step's weight loads: the fold's activation loads
        then hit L1 instead of each waiting for L2 in turn (bench/NOTES.md, "v4")."""
        full = step_is_full(s0, seg_end, K)
        for u in range(U):
            k = _USEGMENT * (s0 + _U(u))
            if full or (s0 + _U(u) < seg_end and k + _LANE_K * t < K):
                for mt in range(MT):
                    if rows_ok[mt]:
                        prefetch_l1(act, act_at[mt] + k)

    reduce_and_store = split_k_epilogue(F16, MT, C, KS)

    bounds = {} if SIMULATED else {"launch_bounds": (32 * WARPS, config.blocks_per_sm)}

    @cuda.jit(**bounds)
    def kernel(act, packed, scales, zero_points, bias, has_bias, out, K_, N_, M_):
        K, N, M = _U(K_), _U(N_), _U(M_)
        tid = _U(cuda.threadIdx.x)
        lane, warp = tid % _WARP, tid // _WARP
        g, t = lane >> _U2, lane & _U(3)
        kpart, slot = warp % UKS, warp // UKS
        nseg = (K + _USEGMENT - _U1) // _USEGMENT
        nb = (K + UBS - _U1) // UBS             # quantization groups per column
        nzb = (nb + _U1) // _U2
        row_bytes = nb * (UBS // _U2)
        per_warp = (nseg + UKS - _U1) // UKS
        seg_begin = min(nseg, kpart * per_warp)
        seg_end = min(nseg, seg_begin + per_warp)
        groups = (N + UGROUP_COLS - _U1) // UGROUP_COLS
        rounds = (groups + USLOTS - _U1) // USLOTS
        cols = cuda.local.array((C, 2), np.uint64)
        raw = cuda.local.array((C, 2, U, 4), np.uint32)
        sv = cuda.local.array((C, 2, U, P), np.uint32)
        zv = cuda.local.array((C, 2, U, P), np.uint32)
        raw2 = cuda.local.array((C, 2, U, 4) if DOUBLE else (1, 1, 1, 1), np.uint32)
        sv2 = cuda.local.array((C, 2, U, P) if DOUBLE else (1, 1, 1, 1), np.uint32)
        zv2 = cuda.local.array((C, 2, U, P) if DOUBLE else (1, 1, 1, 1), np.uint32)
        acc = cuda.local.array((C, MT, 4), float32)
        act_at = cuda.local.array(MT, np.uint64)    # this lane's activation offsets, rows
        rows_ok = cuda.local.array(MT, np.bool_)
        red = cuda.shared.array(RED, float32)
        blk = _U(cuda.blockIdx.x)
        while blk < rounds:                     # block-uniform: the reduction syncs the block
            grp = blk * USLOTS + slot
            col0 = grp * UGROUP_COLS
            for c in range(C):
                for h in range(2):
                    cols[c, h] = min(col0 + UTILE * _U(c) + _U8 * _U(h) + g, N - _U1)
                for mt in range(MT):
                    for r in range(4):
                        acc[c, mt, r] = float32(0.0)
            if grp < groups and seg_begin < seg_end:    # warp-uniform
                # the first step's loads go out before anything else is computed
                issue_step(packed, scales, zero_points, cols, seg_begin, seg_end, t, K, nb,
                           nzb, row_bytes, raw, sv, zv)
                for mt in range(MT):
                    rows_ok[mt] = FULL_ROWS or _U8 * _U(mt) + g < M
                    act_at[mt] = (_U8 * _U(mt) + g) * K + _LANE_K * t
                s0 = seg_begin
                prefetch_act(act, act_at, rows_ok, s0, seg_end, t, K)
                if DOUBLE:  # the next step's loads are in flight while this one folds
                    while s0 < seg_end:
                        if s0 + UU < seg_end:
                            issue_step(packed, scales, zero_points, cols, s0 + UU, seg_end, t,
                                       K, nb, nzb, row_bytes, raw2, sv2, zv2)
                            prefetch_act(act, act_at, rows_ok, s0 + UU, seg_end, t, K)
                        fold_step(act, act_at, rows_ok, s0, seg_end, t, K, raw, sv, zv, acc)
                        s0 += UU
                        if s0 < seg_end:
                            if s0 + UU < seg_end:
                                issue_step(packed, scales, zero_points, cols, s0 + UU, seg_end,
                                           t, K, nb, nzb, row_bytes, raw, sv, zv)
                                prefetch_act(act, act_at, rows_ok, s0 + UU, seg_end, t, K)
                            fold_step(act, act_at, rows_ok, s0, seg_end, t, K, raw2, sv2, zv2,
                                      acc)
                            s0 += UU
                else:
                    while True:
                        fold_step(act, act_at, rows_ok, s0, seg_end, t, K, raw, sv, zv, acc)
                        s0 += UU
                        if s0 >= seg_end:
                            break
                        issue_step(packed, scales, zero_points, cols, s0, seg_end, t, K, nb,
                                   nzb, row_bytes, raw, sv, zv)
                        prefetch_act(act, act_at, rows_ok, s0, seg_end, t, K)
            reduce_and_store(red, acc, warp, lane, kpart, grp < groups, col0, g, t, N, M,
                             bias, has_bias, out)
            blk += _U(cuda.gridDim.x)

    return kernel
