"""One step of a tensor-core warp: its weight loads and the ``mma.sync.m16n8k16`` fold of them.

A *segment* is 128 elements of K; a *step* is ``unroll`` consecutive segments of a warp's
column group (``tiles x 16`` columns). The weights are the ``mma`` A operand (16 columns x 16 k,
dequantized in registers), the activation rows the B operand (16 k x 8 rows; a second row tile
for rows 8..15). Mapping (lane ``l``: ``g = l // 4``, ``t = l % 4``)::

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
cores", lists that experiment). Each step's activation lines are prefetched into L1
(``prefetch.global.L1``) with its weight loads, so the fold's activation loads hit L1 instead of
each waiting for L2 in turn (bench/NOTES.md, "Tensor cores v4").

A step that lies wholly inside K and the warp's slice of the segments (warp-uniform) runs
without guards or clamps. Tails: a segment word past the packed row is not loaded (zero);
activations past K (whole 8-element chunks: K % 8 == 0) or in rows that do not exist are zero,
so padding nibbles add exactly 0; group indices are clamped to the row.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .mma import mma_bf16, mma_f16
from .mma_pairs import (NO_ZP_OFFSET_BF16, NO_ZP_OFFSET_F16, scaled_pair_bf16, scaled_pair_f16,
                        zero_point_offset_bf16, zero_point_offset_f16)
from .tensor_core_config import SEGMENT
from .vector_loads import load8, load16, load16_stream, prefetch_l1

__all__ = ["step_functions", "lane_groups", "LANE_K"]

#: K elements of one lane's range in a segment: the four lanes ``t`` of a column share it.
LANE_K = SEGMENT // 4

_Z = np.uint32(0)
_SIXTEEN = np.uint32(16)
_FOUR = np.uint32(4)
_NIBBLE = np.uint32(15)
#: Index math is unsigned 64-bit (see :mod:`.tensor_core`: no signed-division fix-ups).
_U = np.uint64
_U1, _U2, _U4, _U8 = _U(1), _U(2), _U(4), _U(8)
#: Bytes of one lane's K range in a segment (32 nibbles), and of a segment.
_LANE_BYTES = _U(LANE_K // 2)
_SEGMENT_BYTES = _U(SEGMENT // 2)
_LANE_K = _U(LANE_K)
_USEGMENT = _U(SEGMENT)


def lane_groups(block_size: int) -> int:
    """Quantization groups in a lane's 32 elements of a segment: 2 at block size 16, else 1."""
    return 2 if block_size == 16 else 1


def step_functions(config):
    """The step device functions of ``config`` (a :class:`~.tensor_core_config.TensorCoreConfig`;
    its ``M`` matters only through ``row_tiles``): ``(issue_step, fold_step, prefetch_act)``.

    ``issue_step(packed, scales, zero_points, cols, s0, seg_end, t, K, nb, nzb, row_bytes, raw,
    sv, zv)`` issues every weight, scale and zero-point load of the step at segment ``s0``
    (columns ``cols[c, h]``, clamped below N by the caller; ``seg_end``: the end of the warp's
    slice) into ``raw[c, h, u, 0..3]``, ``sv``/``zv[c, h, u, p]`` (``p < lane_groups``) before
    any is used. ``fold_step(act, act_at, rows_ok, s0, seg_end, t, K, raw, sv, zv, acc)`` adds
    that step's products to ``acc[c, mt, 0..3]`` (``act_at[mt]``: the lane's activation offset
    of segment 0 in row tile ``mt``, ``rows_ok[mt]``: its row exists). ``prefetch_act(act,
    act_at, rows_ok, s0, seg_end, t, K)`` brings the step's activation lines into L1. All index
    arguments are uint64; control flow is warp-uniform."""
    F16 = config.dtype == "float16"
    BS, ZP = config.block_size, config.zero_points
    C, U, MT = config.tiles, config.unroll, config.row_tiles
    W_VEC, ACT_VEC = config.weight_vector, config.act_vector
    P = lane_groups(BS)                         # scale groups in a lane's 32 elements
    NO_ZP = NO_ZP_OFFSET_F16 if F16 else NO_ZP_OFFSET_BF16
    mma = mma_f16 if F16 else mma_bf16
    UBS, UU = _U(BS), _U(U)

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

    return issue_step, fold_step, prefetch_act
