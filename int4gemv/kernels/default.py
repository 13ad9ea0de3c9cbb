"""Default tiling: multi-warp blocks, 16-byte weight loads, every problem the package supports.

Block sizes 16/32/64/128, with or without zero points and bias, any N, K a multiple of 8, batch
M from 1 to 16 in ONE launch that reads each weight byte once, fp16 or bf16 activations and
scales (the output in the same dtype). One compiled kernel per :class:`~.default_config.DefaultConfig` (:mod:`.default_config`
holds the configuration, its per-problem choice and the launch geometry).

Work decomposition. K is cut into 32-element *chunks* (16 bytes of nibbles, 4 uint32 words).
A warp takes a *column group* of ``P * cols`` columns, ``P = 32 / lanes``: ``lanes`` consecutive
lanes share a column and lane ``s`` of them takes the column's chunks ``s, s + lanes, ...``
(``lanes < 32`` when K is short, so several columns run side by side in one warp)::

    warp w, column group g (cols = C, lanes = L, P = 32 / L, unroll = U)
      lane = p * L + s         p: which of the P column slots, s: which chunk stripe
      columns of lane        : g * P * C + p + c * P            for c < C
      chunks of lane, step t : s + (t * U + u) * L              for u < U
                               (16 bytes each: one ld.global.nc.v4 per column and chunk)
      K:  | chunk 0 | chunk 1 | ... | chunk L-1 | chunk L | ... |
            lane s=0  lane s=1        lane s=L-1  lane s=0  (next u or step)
    grid: blocks_per_sm blocks per SM (launch bounds), warp w takes groups w, w + warps, ...
    (``ksplit`` > 1, on tensor cores: ``ksplit`` warps share a group, warp part kp taking
    stripes kp * L + s of L * ksplit: :func:`.default_mma_batch.ksplit_walk`)

A *step* is ``unroll`` chunks of each of the lane's ``cols`` columns: all its 16-byte weight loads
(with their scales and zero points) are issued before any is used. Folding unpacks each loaded
word once and applies it to every activation row (M accumulators per column); the activations
are read with 16-byte loads (L1 hits: every warp reads the same ones). After a column group's
last step a shuffle reduction over the column's lanes finishes and one lane per column writes
its M outputs (+ bias). With ``pipeline`` (M = 1) a second register buffer holds the next
step's loads (crossing into the next column group) while this step is folded; without it a
warp issues, then folds (the previous session measured a second buffer slower when registers
spilled; bench/NOTES.md).

Arithmetic, M > 1 (:mod:`.default_batch`): byte ``b`` of a word becomes the exact fp16 pair
``(q[2b] - zp, q[2b+1] - zp)`` with one PRMT, one LOP3 and one HFMA2 (:mod:`.nibble_pairs`);
these pairs line up with activations as they lie in memory, so each row costs one
``fma.rn.f16x2`` per pair (fp16), or float32 FFMA (bf16). M = 1 (:mod:`.default_m1`): the
re-paired dequant (no PRMT) and the activations re-paired once per chunk for all columns, about
2.6 instructions per element (fp16, SASS); with ``config.mma`` (:mod:`.default_mma`) the
products and group sums on tensor cores. fp16 sums 8 products per half in fp16, then float32;
bf16 at M > 1 multiplies and accumulates in float32, at M = 1 it takes the fp16 arithmetic on
the row scaled by a power of two (converted once per block into shared memory, in grids of
several column groups per warp; else float32). Scales multiply the float32 partial sums once
per 16 (bs 16) or 32 elements.

Tails. A word (8 elements) past K gets zero activations (never loaded), so the padding nibbles
of a last partial block add exactly 0; chunk indices past the column are clamped to a valid
address; columns past N are clamped for loads and never stored.
"""

from __future__ import annotations

import functools
import numpy as np
from numba import cuda, float32

from . import bf16
from .default_batch import batch_fold
from .default_config import (COLS, DTYPES, LANES, MAX_M, STAGE_MAX_K, UNROLLS, DefaultConfig,
                             choice_reasons, choose_config, geometry, stage_min_groups)
from .default_finish import lanes_finish
from .default_m1 import STAGE_SIZE, scalar_fold, stage_activations
from .default_mma import mma_fold
from .default_mma_batch import (batch_mma_constants, batch_mma_finish, batch_mma_fold,
                                ksplit_walk, reduction_shape, row_tiles)
from .handoff import await_words
from .intrinsics import SIMULATED, allow_next_grid, wait_for_previous_grid
from .nibble_pairs import NO_ZP_OFFSET, zero_point_offset
from .stagger import stagger_start
from .vector_loads import load8, load16, load16_stream

__all__ = ["DefaultConfig", "choice_reasons", "choose_config", "default_kernel", "geometry", "DTYPES", "MAX_M",
           "COLS", "LANES", "UNROLLS"]


@functools.lru_cache(maxsize=None)
def default_kernel(config: DefaultConfig):
    """The compiled kernel of ``config``. Arguments, in order:
    ``(act, packed, scales, zero_points, bias, has_bias, out, K, N)``: act uint16 ``[M*K]``
    (activation bits); packed uint8 ``[N * ceil(K/bs) * bs/2]``; scales ``[N * ceil(K/bs)]``
    (float16, or uint16 bf16 bits); zero_points uint8 ``[N * ceil(ceil(K/bs)/2)]`` (read only
    when ``config.zero_points``); bias ``[N]`` (float16 or bf16 bits, read only if has_bias);
    out ``[M*N]`` (float16 or bf16 bits). ``packed`` and (with ``act_vector``) ``act`` must be
    16-byte aligned (``weight_vector``: else 8-byte)."""
    if not isinstance(config, DefaultConfig):
        raise TypeError(f"config must be a DefaultConfig; got {type(config).__name__}")
    F16 = config.dtype == "float16"
    M, C, L, U = config.M, config.cols, config.lanes, config.unroll
    BS, ZP, WARPS = config.block_size, config.zero_points, config.warps
    ACT_VEC, W_VEC, PDL, WORDS = config.act_vector, config.weight_vector, config.pdl, config.words
    PIPELINE, STAGGER = config.pipeline, config.stagger
    KS = config.ksplit                   # warps sharing a column group (mma only)
    STRIPES = L * KS                     # chunk stripes of a column group
    RED = reduction_shape(config)        # the K split's shared sums (1, 1, 1 without it)
    P = 32 // L
    GROUP_COLS = P * C
    TWO_GROUPS = BS == 16                # a chunk holds two quantization groups
    CHUNKS_PER_GROUP = max(1, BS // 32)
    SCALAR = M == 1                      # the M = 1 loop: re-paired dequant (.default_m1, .default_mma)
    BATCH_MMA = config.mma and not SCALAR    # M > 1 on tensor cores (.default_mma_batch)
    RANGE_CHECK = SCALAR and not F16     # bf16 M = 1: fp16 arithmetic where the row allows it
    STAGED = RANGE_CHECK or (config.mma and SCALAR)   # M = 1 folds that read the row from a shared stage
                                         # where the grid allows (default_config.stages_row)
    STAGE = STAGE_SIZE if STAGED and KS == 1 else 1   # the re-paired activations, a word per warp,
                                         # a zero slot (a K split never stages: .default_mma)
    STAGE_ALIGN = None if SIMULATED else 16   # group reads as LDS.128 (the simulator takes no alignment)
    MIN_GROUPS = stage_min_groups(config)     # per warp of the grid, for the stage to pay
    SV = np.uint32 if BATCH_MMA else float32  # scales: x2 bits for the A pairs, else float32
    ACC = (row_tiles(M) * C // 2, 4) if BATCH_MMA else (M, C)   # D fragments, else sums per row, column
    Z = np.uint32(0)

    @cuda.jit(device=True, inline=True)
    def load_nibbles(packed, offset, second_half):
        """The chunk's 16 bytes (the second 8 only where ``second_half``: not past the row)."""
        if W_VEC and BATCH_MMA:   # read once: kept out of L1, which holds the rows every warp re-reads
            return load16_stream(packed, np.uint64(offset))
        if W_VEC:
            return load16(packed, offset)
        lo = load8(packed, offset)
        hi = load8(packed, offset + 8) if second_half else (Z, Z)
        return (lo[0], lo[1], hi[0], hi[1])

    @cuda.jit(device=True, inline=True)
    def load_act(act, offset, valid):
        """8 activations (4 uint32) from element ``offset``; zeros where not ``valid``."""
        if not valid:
            return (Z, Z, Z, Z)
        if ACT_VEC:
            return load16(act, offset)
        return (np.uint32(act[offset]) | (np.uint32(act[offset + 1]) << np.uint32(16)),
                np.uint32(act[offset + 2]) | (np.uint32(act[offset + 3]) << np.uint32(16)),
                np.uint32(act[offset + 4]) | (np.uint32(act[offset + 5]) << np.uint32(16)),
                np.uint32(act[offset + 6]) | (np.uint32(act[offset + 7]) << np.uint32(16)))

    @cuda.jit(device=True, inline=True)
    def to_float(x):
        return float32(x) if F16 else bf16.low_value(np.uint32(x))

    @cuda.jit(device=True, inline=True)
    def issue(packed, scales, zero_points, col0, j0, N, nwords, nchunks, nb, nzb, row_bytes,
              raw, sv, zv, full):
        """Issue every weight, scale and zero-point load of one step (``cols x unroll``
        chunks) before any of them is used. ``full``: no chunk of the step reaches past K
        (warp-uniform; the clamps and guards fold away)."""
        for c in range(C):
            n = min(col0 + c * P, N - 1)
            for u in range(U):
                j = j0 + u * STRIPES if full else min(j0 + u * STRIPES, nchunks - 1)
                x = load_nibbles(packed, n * row_bytes + 16 * j, full or 4 * j + 2 < nwords)
                for i in range(4):
                    raw[c, u, i] = x[i]
                for h in range(2 if TWO_GROUPS else 1):
                    g = (2 * j + h if full else min(2 * j + h, nb - 1)) if TWO_GROUPS \
                        else j // CHUNKS_PER_GROUP
                    # unsigned indices: no negative-index wrap (SHF + LOP3 + IADD3 per load)
                    q = Z
                    if ZP:
                        byte = np.uint32(zero_points[np.uint64(n * nzb + (g >> 1))])
                        q = (byte >> np.uint32((g & 1) << 2)) & np.uint32(15)
                    if BATCH_MMA:
                        sv[c, u, h], zv[c, u, h] = mma_constants(scales[np.uint64(n * nb + g)], q)
                    else:
                        sv[c, u, h] = to_float(scales[np.uint64(n * nb + g)])
                        zv[c, u, h] = (q if SCALAR else zero_point_offset(q)) if ZP else NO_ZP_OFFSET

    fold = batch_mma_fold(config, load_act) if BATCH_MMA else batch_fold(config, load_act)
    mma_constants = batch_mma_constants(config)
    fold_m1 = mma_fold(config, load_act) if config.mma and SCALAR else scalar_fold(config, load_act)
    stage_fill = stage_activations(config, load_act)

    finish = batch_mma_finish(config) if BATCH_MMA else lanes_finish(config, RANGE_CHECK)
    bounds = {} if SIMULATED else {"launch_bounds": (32 * WARPS, config.blocks_per_sm)}
    H = 2 if TWO_GROUPS else 1

    @cuda.jit(device=True, inline=True)
    def issue_step(packed, scales, zero_points, g, st, s, p, N, nwords, nchunks, nb, nzb,
                   row_bytes, raw, sv, zv):
        """``issue`` for step ``st`` of column group ``g`` (the full-step form when it can)."""
        col0, j0 = g * GROUP_COLS + p, s + st * STRIPES * U
        if 4 * (st + 1) * STRIPES * U <= nwords:     # warp-uniform: no chunk of the step is past K
            issue(packed, scales, zero_points, col0, j0, N, nwords, nchunks, nb, nzb, row_bytes,
                  raw, sv, zv, True)
        else:
            issue(packed, scales, zero_points, col0, j0, N, nwords, nchunks, nb, nzb, row_bytes,
                  raw, sv, zv, False)

    @cuda.jit(device=True, inline=True)
    def fold_step(act, stage, st, s, nwords, nchunks, K, raw, sv, zv, acc, staged):
        """``fold`` (``fold_m1`` at M = 1, on the staged row where ``staged``) of step ``st``
        (the full-step form when it can)."""
        j0 = s + st * STRIPES * U
        full = 4 * (st + 1) * STRIPES * U <= nwords
        if SCALAR and full:
            fold_m1(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, True, staged)
        elif SCALAR:
            fold_m1(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, False, staged)
        elif full:
            fold(act, j0, nwords, nchunks, K, raw, sv, zv, acc, True)
        else:
            fold(act, j0, nwords, nchunks, K, raw, sv, zv, acc, False)

    @cuda.jit(device=True, inline=True)
    def walk(act, packed, scales, zero_points, bias, has_bias, out, g, stride, groups, steps, s, p,
             N, K, nwords, nchunks, nb, nzb, row_bytes, raw, sv, zv, acc, stage, staged, unscale):
        """The warp's column groups from ``g`` (its first step already issued, so that the
        row is staged while it flies): each step's loads, then its fold. ``staged`` is passed as
        a constant, so each form of the loop holds one fold."""
        first = g
        while g < groups:
            for st in range(steps):
                if st > 0 or g != first:
                    issue_step(packed, scales, zero_points, g, st, s, p, N, nwords, nchunks, nb,
                               nzb, row_bytes, raw, sv, zv)
                fold_step(act, stage, st, s, nwords, nchunks, K, raw, sv, zv, acc, staged)
            finish(acc, g * GROUP_COLS + p, s, N, bias, has_bias, out, unscale)
            g += stride

    @cuda.jit(device=True, inline=True)
    def walk_pipelined(act, packed, scales, zero_points, bias, has_bias, out, g, stride, groups,
                       steps, s, p, N, K, nwords, nchunks, nb, nzb, row_bytes, raw, sv, zv, acc,
                       stage, staged, unscale):
        """``walk`` with two buffers, A (raw, sv, zv; its first step already issued) and B: the
        next step's loads (crossing into the warp's next column group) are in flight while this
        step is folded. The loop body is written out for both buffers so that no buffer is
        ever copied (a shared step function returning the next position fails Numba's
        inliner: "Calling a closure with *args is unsupported")."""
        raw_b = cuda.local.array((C, U, 4), np.uint32)
        sv_b = cuda.local.array((C, U, H), SV)
        zv_b = cuda.local.array((C, U, H), np.uint32)
        ga, sa = g, 0
        while ga < groups:
            gb, sb = (ga, sa + 1) if sa + 1 < steps else (ga + stride, 0)
            if gb < groups:
                issue_step(packed, scales, zero_points, gb, sb, s, p, N, nwords, nchunks, nb,
                           nzb, row_bytes, raw_b, sv_b, zv_b)
            fold_step(act, stage, sa, s, nwords, nchunks, K, raw, sv, zv, acc, staged)
            if sa + 1 == steps:
                finish(acc, ga * GROUP_COLS + p, s, N, bias, has_bias, out, unscale)
            if gb >= groups:
                break
            ga, sa = (gb, sb + 1) if sb + 1 < steps else (gb + stride, 0)
            if ga < groups:
                issue_step(packed, scales, zero_points, ga, sa, s, p, N, nwords, nchunks, nb,
                           nzb, row_bytes, raw, sv, zv)
            fold_step(act, stage, sb, s, nwords, nchunks, K, raw_b, sv_b, zv_b, acc, staged)
            if sb + 1 == steps:
                finish(acc, gb * GROUP_COLS + p, s, N, bias, has_bias, out, unscale)

    walker = walk_pipelined if PIPELINE else walk
    walk_k = ksplit_walk(config, issue_step, fold_step)

    @cuda.jit(**bounds)
    def kernel(act, packed, scales, zero_points, bias, has_bias, out, K, N):
        lane = cuda.threadIdx.x % 32
        s = lane % L
        p = lane // L
        nwords = K // 8                      # valid uint32 words per column
        nchunks = (nwords + 3) // 4
        nb = (K + BS - 1) // BS              # quantization groups per column
        nzb = (nb + 1) // 2
        row_bytes = nb * (BS // 2)
        steps = (nchunks + STRIPES * U - 1) // (STRIPES * U)
        groups = (N + GROUP_COLS - 1) // GROUP_COLS
        g = cuda.blockIdx.x * WARPS + cuda.threadIdx.x // 32
        stride = cuda.gridDim.x * WARPS
        raw = cuda.local.array((C, U, 4), np.uint32)
        sv = cuda.local.array((C, U, H), SV)
        zv = cuda.local.array((C, U, H), np.uint32)
        acc = cuda.local.array(ACC, float32)
        stage = cuda.shared.array(STAGE, np.uint32, alignment=STAGE_ALIGN)
        red = cuda.shared.array(RED, float32)
        for m in range(ACC[0]):
            for c in range(ACC[1]):
                acc[m, c] = float32(0.0)
        if PDL:
            allow_next_grid()
        if STAGGER:   # a probe (.stagger): the SM's warps issue one after another
            stagger_start(STAGGER, WARPS)
        if KS > 1:   # mma with the K split (.default_mma_batch.ksplit_walk)
            walk_k(act, packed, scales, zero_points, bias, has_bias, out, red, stage, raw, sv, zv,
                   acc, lane, s, p, N, K, nwords, nchunks, nb, nzb, row_bytes, steps, groups)
            return
        if not (STAGED or PIPELINE or WORDS):
            # Nothing to stage: each step's loads, then its fold; the first weights are in
            # flight while the previous grid ends
            waited = not PDL
            while g < groups:
                for st in range(steps):
                    issue_step(packed, scales, zero_points, g, st, s, p, N, nwords, nchunks, nb,
                               nzb, row_bytes, raw, sv, zv)
                    if not waited:
                        wait_for_previous_grid()
                        waited = True
                    fold_step(act, stage, st, s, nwords, nchunks, K, raw, sv, zv, acc, False)
                finish(acc, g * GROUP_COLS + p, s, N, bias, has_bias, out, float32(1.0))
                g += stride
            if not waited:  # a warp with no column group still orders itself after the grid
                wait_for_previous_grid()
            return
        if g < groups:
            issue_step(packed, scales, zero_points, g, 0, s, p, N, nwords, nchunks, nb, nzb,
                       row_bytes, raw, sv, zv)
        if WORDS:  # the first weights are in flight while the activations are awaited
            await_words(act, K // 8, 8)
        elif PDL:  # the first weights are in flight while the previous grid ends
            wait_for_previous_grid()
        # bf16 and the mma fold at M = 1, grid-uniform, while the first weights are in flight:
        # the activations staged as re-paired fp16 words (bf16: tested and scaled per block;
        # every thread of the block gets here)
        staged = False
        unscale = float32(1.0)
        if STAGED and groups >= MIN_GROUPS * stride and K <= STAGE_MAX_K:
            staged, unscale = stage_fill(act, stage, nwords, nchunks)
        if STAGED and staged:   # (folded away where nothing is staged: one loop compiled)
            walker(act, packed, scales, zero_points, bias, has_bias, out, g, stride, groups, steps,
                   s, p, N, K, nwords, nchunks, nb, nzb, row_bytes, raw, sv, zv, acc, stage, True,
                   unscale)
        else:
            walker(act, packed, scales, zero_points, bias, has_bias, out, g, stride, groups, steps,
                   s, p, N, K, nwords, nchunks, nb, nzb, row_bytes, raw, sv, zv, acc, stage, False,
                   unscale)

    return kernel
