"""Tensor-core INT4 GEMV for a batch of M = 1..16 rows: ``mma.sync.m16n8k16``, fp32 accumulation.

``Y[M, N] = X[M, K] · W[N, K]ᵀ (+ bias)`` is computed transposed, ``Yᵀ = W · Xᵀ``: 16 weight
columns are the ``mma`` A operand (16×16, dequantized in registers), the activation rows the B
operand (16×8: rows 0..7, and a second ``mma`` for rows 8..15 when M > 8), so one ``mma`` serves
up to 8 rows for the price of one and M = 1..16 cost about the same. This module holds the work
decomposition and the kernel's loop; a step's loads, the lane-to-fragment mapping and the fold
are :mod:`.tensor_core_step`, the split-K sum and store :mod:`.tensor_core_epilogue`.

Work (a *segment* is 128 elements of K; lane ``l``: ``g = l // 4``, ``t = l % 4``)::

    column group = tiles x 16 columns     warp w of a block: kpart = w % ksplit, slot = w // ksplit

A block's ``warps`` fold ``warps / ksplit`` column groups at once; the ``ksplit`` warps of a
group each take a contiguous slice of the segments, then add their partial sums through shared
memory in a fixed order (no atomics; the result does not depend on timing), each warp summing and
writing a share of the group's outputs. The grid is persistent: block ``b`` takes block-rounds
``b, b + gridDim, ...``. A warp's step issues the weight, scale and zero-point loads (and the L1
prefetch of the activations) of ``tiles x unroll`` segments before folding any; with
``double_buffer`` the next step's loads are issued before this step folds.

Index math is unsigned 64-bit (no floor-division fix-ups or negative-index checks), and the first
step's loads are issued before the activation offsets are computed (bench/NOTES.md, "Tensor
cores v4"). Tails: columns past N are clamped for loads and never stored; rows >= M read zero
activations and are never stored; the K tails are the step's (:mod:`.tensor_core_step`).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
from numba import cuda, float32

from .intrinsics import SIMULATED
from .tensor_core_config import SEGMENT, TILE_COLS, TensorCoreConfig
from .tensor_core_epilogue import split_k_epilogue
from .tensor_core_step import LANE_K, lane_groups, step_functions

__all__ = ["tensor_core_kernel"]

#: Index math is unsigned 64-bit throughout: Python's signed ``//`` and negative-index wrap
#: cost ptxas 3-4 fix-up instructions per division and per array index, and the kernel's
#: prologue ran ~400 instructions before its first weight load (bench/NOTES.md, "v4").
_U = np.uint64
_U1, _U2, _U8 = _U(1), _U(2), _U(8)
#: K elements of one lane's range in a segment.
_LANE_K = _U(LANE_K)
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
    BS = config.block_size
    C, U, KS, WARPS, MT = config.tiles, config.unroll, config.ksplit, config.warps, config.row_tiles
    SLOTS, DOUBLE = config.slots, config.double_buffer
    FULL_ROWS = config.M == 8 * MT               # every row of the row tiles exists
    P = lane_groups(BS)                         # scale groups in a lane's 32 elements
    SLOTS_PER_WARP = C * MT * 4                # accumulators a lane holds
    RED = (WARPS, SLOTS_PER_WARP, 32) if KS > 1 else (1, 1, 1)
    # the same constants as unsigned 64-bit values, for the index math
    UBS, UU, UKS, USLOTS = _U(BS), _U(U), _U(KS), _U(SLOTS)
    UGROUP_COLS, UTILE = _U(TILE_COLS * C), _U(TILE_COLS)

    issue_step, fold_step, prefetch_act = step_functions(config)

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
