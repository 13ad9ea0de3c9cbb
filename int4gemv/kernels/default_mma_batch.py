"""The default tiling's M = 2..16 fold on tensor cores (``DefaultConfig.mma`` with ``M > 1``).

A warp's columns are the A operand of ``mma.sync.m16n8k16`` (16 per tile) and the activation
rows its B operand (rows 0..7; a second ``mma`` for rows 8..15 when M > 8), so one ``mma``
serves every row of a tile and M = 2..8 cost one pass over the weights, not M. The tiling is
the default one's (``lanes = 4``, ``cols = C`` of 2 or 4: lane ``l = 4 g + t`` takes columns
``g + 8 c`` (``c < C``) of its column group and chunks ``t, t + 4, ...``), so the loads, the
steps and the persistent grid are exactly those of the M = 1 kernel (:mod:`.default`); only the
fold and the store differ. Tile ``k < C / 2`` is columns ``c = 2k`` (A rows 0..7) and ``2k + 1``
(A rows 8..15), and every tile shares the word's activation fragment::

    word w (8 elements) of the lane's chunk, jj = 0, 1, tile k:
        a0 = ((q[4jj] - zp) s, (q[4jj+1] - zp) s) of column c = 2k    a2 = the same of q[4jj+2..3]
        a1, a3: column c = 2k + 1                                      (:mod:`.mma_pairs`)
        b0 = (x[4jj], x[4jj+1]), b1 = (x[4jj+2], x[4jj+3]) of the word's activations in row
        8 mt + g (16 bytes of the row per word: one load feeds both jj and every tile)
    D (tile k, row tile mt): d0, d1 = column 2k, rows 8 mt + 2t, 2t + 1; d2, d3 = column 2k + 1

The four lanes ``t`` of a column hold four different chunks, so one ``mma`` sums 16 k taken from
four chunks: the same permutation of K in A and B, which a dot product does not see; D is
therefore already the sum over the column's lanes (no shuffles), and it accumulates over the
column's steps in float32. A chunk can hold two quantization groups (bs 16) and the four lanes'
chunks may lie in different groups, so the scale is applied in A: each pair is the exact
``q - zp`` (an add to the magic-number pair) times the group scale, one rounding to the
activations' dtype, as a dequantized weight (fp16 or bf16 ``mma``). Per 8 elements of a
column: 1 shift, 4 PRMT, 4 LOP3, 8 x2 FMA and one ``mma`` per row tile for 16 columns.

Activations are read from global memory (L1 hits: every warp reads the same rows), 16 bytes
per lane, row ``8 mt + g``; a row that does not exist, a word past K or a chunk clamped past
the column reads zeros, so padding nibbles add exactly 0. Every lane of the warp must call the
fold together (``mma.sync.aligned``): the default tiling calls it in warp-uniform loops.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from .mma import mma_bf16, mma_f16
from .mma_pairs import (NO_ZP_OFFSET_BF16, NO_ZP_OFFSET_F16, scaled_pair_bf16, scaled_pair_f16,
                        zero_point_offset_bf16, zero_point_offset_f16)
from .default_finish import lanes_finish, output_access
from .intrinsics import pack_half2, wait_for_previous_grid

__all__ = ["batch_mma_fold", "batch_mma_finish", "batch_mma_constants", "row_tiles", "ksplit_finish",
           "ksplit_walk", "reduction_shape"]

_FOUR = np.uint32(4)
_PAIR = np.uint32(0x00010001)


def row_tiles(M: int) -> int:
    """8-row tiles of B for ``M`` rows: 1 up to 8 rows, 2 up to 16."""
    return (M + 7) // 8


def batch_mma_constants(config):
    """``constants(scale, zp)``: a group's ``(scale, zero-point offset)`` as x2 bits for the A
    pairs, from the raw ``scales`` element (float16 for fp16, uint16 bf16 bits) and the nibble
    zero point ``zp`` (uint32; ignored without zero points). ``config`` as for
    :func:`batch_mma_fold`."""
    F16, ZP = config.dtype == "float16", config.zero_points

    @cuda.jit(device=True, inline=True)
    def constants(scale, zp):
        if F16:
            s = float32(scale)
            s2 = pack_half2(s, s)
            z = zero_point_offset_f16(zp) if ZP else NO_ZP_OFFSET_F16
        else:
            s2 = np.uint32(scale) * _PAIR
            z = zero_point_offset_bf16(zp) if ZP else NO_ZP_OFFSET_BF16
        return s2, z

    return constants


def batch_mma_fold(config, load_act):
    """The M > 1 tensor-core fold of ``config`` (a :class:`~.default_config.DefaultConfig` with
    ``mma``, ``lanes = 4``, ``cols = 2``): ``fold(act, j0, nwords, nchunks, K, raw, sv, zv, acc,
    full)``, the signature and contract of :func:`.default_batch.batch_fold`, except that
    ``sv``/``zv[c, u, h]`` hold the :func:`batch_mma_constants` x2 bits and ``acc[mt * T + k,
    0..3]`` the lane's D fragments of row tile ``mt`` and column tile ``k < T = cols / 2`` (see
    the module docstring)."""
    F16, M, U = config.dtype == "float16", config.M, config.unroll
    MT, L, T = row_tiles(M), config.lanes, config.cols // 2
    STRIPES = L * config.ksplit                # chunk stride of a lane's chunks
    FULL_ROWS = M == 8 * MT                   # every row of the tiles exists: no row predicate
    TWO_GROUPS = config.block_size == 16
    mma = mma_f16 if F16 else mma_bf16
    pair = scaled_pair_f16 if F16 else scaled_pair_bf16

    @cuda.jit(device=True, inline=True)
    def fold_chunk(act, j0, u, nwords, K, raw, sv, zv, acc, full, xs):
        """Chunk ``u`` (a constant) of the step."""
        g = (cuda.threadIdx.x % 32) // L
        j_raw = j0 + u * STRIPES
        for w in range(4):
            for mt in range(MT):
                row = 8 * mt + g
                x = load_act(act, row * K + 32 * j_raw + 8 * w,
                             (FULL_ROWS or row < M) and (full or 4 * j_raw + w < nwords))
                for e in range(4):
                    xs[mt, e] = x[e]
            h = w // 2 if TWO_GROUPS else 0
            for k in range(T):
                c0, c1 = 2 * k, 2 * k + 1
                w0, w1 = raw[c0, u, w], raw[c1, u, w]
                w0s, w1s = w0 >> _FOUR, w1 >> _FOUR
                for jj in range(2):
                    a0 = pair(w0, w0s, 2 * jj, zv[c0, u, h], sv[c0, u, h])
                    a2 = pair(w0, w0s, 2 * jj + 1, zv[c0, u, h], sv[c0, u, h])
                    a1 = pair(w1, w1s, 2 * jj, zv[c1, u, h], sv[c1, u, h])
                    a3 = pair(w1, w1s, 2 * jj + 1, zv[c1, u, h], sv[c1, u, h])
                    for mt in range(MT):
                        i = mt * T + k
                        d = mma(a0, a1, a2, a3, xs[mt, 2 * jj], xs[mt, 2 * jj + 1],
                                acc[i, 0], acc[i, 1], acc[i, 2], acc[i, 3])
                        for r in range(4):
                            acc[i, r] = d[r]

    @cuda.jit(device=True, inline=True)
    def fold(act, j0, nwords, nchunks, K, raw, sv, zv, acc, full):
        # The chunks are written out, not looped over: at two row tiles LLVM left a
        # ``for u in range(U)`` loop rolled, and ``raw``/``sv``/``zv`` indexed by ``u`` went to
        # local memory (192 B on the H100 for 4 x 2 and 2 x 4 at M = 16; bench/NOTES.md).
        xs = cuda.local.array((MT, 4), np.uint32)
        fold_chunk(act, j0, 0, nwords, K, raw, sv, zv, acc, full, xs)
        if U > 1:
            fold_chunk(act, j0, 1, nwords, K, raw, sv, zv, acc, full, xs)
        if U > 2:
            fold_chunk(act, j0, 2, nwords, K, raw, sv, zv, acc, full, xs)
            fold_chunk(act, j0, 3, nwords, K, raw, sv, zv, acc, full, xs)

    return fold


def batch_mma_finish(config):
    """``finish(acc, col0, s, N, bias, has_bias, out, unscale)``, the default tiling's column
    group end for the M > 1 tensor-core fold: lane ``(g, t)`` writes its D fragments (columns
    ``col0 + 8 c``, ``c < cols``, rows ``8 mt + 2t`` and ``+ 1`` that exist; ``col0`` is already
    the lane's column ``g``), plus the bias, and zeroes them. ``unscale`` is unused."""
    M, C = config.M, config.cols
    MT, T = row_tiles(M), config.cols // 2
    bias_at, store = output_access(config.dtype)

    @cuda.jit(device=True, inline=True)
    def finish(acc, col0, s, N, bias, has_bias, out, unscale):
        t = s
        for c in range(C):
            n = col0 + 8 * c
            if n < N:
                b = bias_at(bias, has_bias, n)
                for mt in range(MT):
                    for r in range(2):
                        m = 8 * mt + 2 * t + r
                        if m < M:
                            store(out, m * N + n, acc[mt * T + c // 2, 2 * (c % 2) + r] + b)
        for i in range(MT * T):
            for r in range(4):
                acc[i, r] = float32(0.0)

    return finish


def reduction_shape(config) -> tuple:
    """The shared-memory shape :func:`ksplit_finish` needs: ``(warps, fragments, 32)`` with
    ``ksplit > 1`` (M = 1: ``(warps, cols, 32)``, the lane's column sums), else ``(1, 1, 1)``
    (no reduction)."""
    if config.ksplit == 1:
        return (1, 1, 1)
    if config.M == 1:
        return (config.warps, config.cols, 32)
    return (config.warps, row_tiles(config.M) * config.cols // 2 * 4, 32)


def ksplit_finish(config):
    """``finish(acc, red, warp, lane, active, col0, N, bias, has_bias, out)``: the column group
    end of a block whose ``ksplit`` warps share one group (``config.ksplit > 1``). Every warp of
    the block calls it together (it holds two block barriers); warps with ``active`` publish
    their sums to ``red`` (:func:`reduction_shape`: M > 1 the D fragments, M = 1 the lane's
    ``acc[0, c]``), and the group's first warp (``warp % ksplit == 0``) adds the ``ksplit`` parts
    in warp order (the result does not depend on timing) and stores them as
    :func:`batch_mma_finish` does (M = 1: :func:`.default_finish.lanes_finish`, which also sums
    the column's 4 lanes); every warp then zeroes ``acc``. ``col0``: the lane's first column
    (its column slot ``g`` included)."""
    KS = config.ksplit
    SCALAR = config.M == 1
    ROWS, COLS = (1, config.cols) if SCALAR else (row_tiles(config.M) * config.cols // 2, 4)
    store = lanes_finish(config, False) if SCALAR else batch_mma_finish(config)

    @cuda.jit(device=True, inline=True)
    def finish(acc, red, warp, lane, active, col0, N, bias, has_bias, out):
        if active:
            for i in range(ROWS):
                for r in range(COLS):
                    red[warp, COLS * i + r, lane] = acc[i, r]
        cuda.syncthreads()
        if active and warp % KS == 0:
            for i in range(ROWS):
                for r in range(COLS):
                    v = red[warp, COLS * i + r, lane]
                    for q in range(1, KS):
                        v += red[warp + q, COLS * i + r, lane]
                    acc[i, r] = v
            store(acc, col0, lane % 4, N, bias, has_bias, out, float32(1.0))
        cuda.syncthreads()      # the next round's fragments overwrite red
        for i in range(ROWS):
            for r in range(COLS):
                acc[i, r] = float32(0.0)

    return finish


def ksplit_walk(config, issue_step, fold_step):
    """The kernel body of a K-split configuration (``config.ksplit > 1``): ``walk(act, packed,
    scales, zero_points, bias, has_bias, out, red, stage, raw, sv, zv, acc, lane, s, p, N, K,
    nwords, nchunks, nb, nzb, row_bytes, steps, groups)``, with the default tiling's
    ``issue_step``/``fold_step`` (:mod:`.default`, chunk stripes ``4 * ksplit``). Warp part ``kp
    = warp % ksplit`` of a column group takes stripes ``kp * 4 + s``; the block walks
    block-uniform rounds of ``warps / ksplit`` groups, each ended by :func:`ksplit_finish`
    (every warp reaches its barriers, idle slots included). With ``pdl`` each warp waits for the
    previous grid after its first step's loads are issued (a warp with no group: at the end)."""
    KS, L, PDL = config.ksplit, config.lanes, config.pdl
    GPB, GROUP_COLS = config.groups_per_block, config.columns_per_warp
    finish = ksplit_finish(config)

    @cuda.jit(device=True, inline=True)
    def walk(act, packed, scales, zero_points, bias, has_bias, out, red, stage, raw, sv, zv, acc,
             lane, s, p, N, K, nwords, nchunks, nb, nzb, row_bytes, steps, groups):
        warp = cuda.threadIdx.x // 32
        sk = (warp % KS) * L + s
        r = cuda.blockIdx.x
        waited = not PDL
        while r < (groups + GPB - 1) // GPB:
            g = r * GPB + warp // KS
            if g < groups:
                for st in range(steps):
                    issue_step(packed, scales, zero_points, g, st, sk, p, N, nwords, nchunks,
                               nb, nzb, row_bytes, raw, sv, zv)
                    if not waited:
                        wait_for_previous_grid()
                        waited = True
                    fold_step(act, stage, st, sk, nwords, nchunks, K, raw, sv, zv, acc, False)
            finish(acc, red, warp, lane, g < groups, g * GROUP_COLS + p, N, bias, has_bias, out)
            r += cuda.gridDim.x
        if not waited:  # a warp with no column group still orders itself after the grid
            wait_for_previous_grid()

    return walk
