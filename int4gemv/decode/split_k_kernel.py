"""The chain's down projection with K split across the warps of a block (issue 21).

A block has ``chunks × col_warps`` warps. Warp ``w`` owns K chunk ``s = w % chunks`` (uint64 words
``32 u s .. 32 u (s + 1)`` of every column, ``u`` = ``unroll``; lane ``l`` words
``l, l + 32, ...`` of it, as in :mod:`int4gemv.kernels.single_warp`) of ``cols`` columns:
sub-group ``p = w // chunks`` of the block's ``cols × col_warps`` columns. Block ``b`` takes
column groups ``b, b + gridDim, ...`` (persistent: any grid computes every column).

Why: the single-warp kernel walks a long K (down: 6144) one chunk at a time and only the first
chunk's loads are in flight before ``griddepcontrol.wait``; here every chunk of the block's first
column group is loaded *before* the wait, so the whole weight can stream while the previous
kernel drains, and after the wait only the activations remain (one L2 round trip).

The activations are staged once per block in shared memory as the half2 pairs
:func:`~int4gemv.kernels.half2.dot16` takes (``[8, words]``, conflict-free reads), from

* ``fused=False``: the fp16 vector ``act`` (its uint64 view);
* ``fused=True``: the gate/up output ``gu = [g | u]`` (uint64 view, ``2K`` fp16), each element
  ``silu(g)·u`` by :func:`~int4gemv.decode.silu_mul.silu_times` rounded to fp16 (the values the
  silu·mul kernel would store), so a merged layer needs no silu·mul launch.

Each warp folds its chunk into float32 partial sums, reduces them over its lanes (the
single-warp kernel's transposing butterfly) and writes them to shared memory; after a block
barrier thread ``t < cols × col_warps`` adds the ``chunks`` partials in chunk order (+ bias) and
writes the column. Arithmetic per word is the single-warp kernel's (half2, :mod:`.half2`).
Constraints (checked by :class:`~int4gemv.decode.split_k.SplitKLaunch`): fp16, block size 32,
K a multiple of 32, ``chunks = ceil(K / (512 unroll))``, at most 1024 threads, ``cols`` a power
of two.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, uint64

from ..kernels.half2 import (NO_ZP_HIGH, NO_ZP_LOW, dot16, pair_activations_wide,
                             zero_point_constants)
from ..kernels.butterfly import column_sums, writer_mask
from ..kernels.handoff import await_words
from ..kernels.intrinsics import allow_next_grid, half2_sum, pack_half2, wait_for_previous_grid
from ..kernels.nibble_pairs import half_high, half_low
from .silu_mul import silu_times

__all__ = ["split_k_kernel", "WORDS_PER_LANE_STEP"]

#: uint64 words (16 nibbles each) a warp covers per unroll step: one per lane.
WORDS_PER_LANE_STEP = 32


@functools.lru_cache(maxsize=None)
def split_k_kernel(cols: int, unroll: int, chunks: int, col_warps: int, fused: bool,
                   zero_points: bool = False, pdl: bool = False, words: bool = False):
    """The kernel ``(act, words, scales, zero_points, bias, has_bias, out, K)`` for one shape
    (see the module docstring), compiled on first launch. ``act``: uint64 view of the fp16
    activations (``K / 4`` words; ``fused``: of ``[g | u]``, ``K / 2``); ``words`` uint64
    ``[N * K/16]``, ``scales`` fp16 ``[N * K/32]``, ``zero_points`` uint8 (read only when
    ``zero_points``), ``bias``/``out`` fp16 ``[N]``. ``pdl``: a programmatic dependent launch
    (the next launch may start at entry; every weight load of the first group is issued before
    ``griddepcontrol.wait``, nothing this kernel reads from earlier launches before it);
    ``words`` (with ``pdl``): no wait for the previous grid, the block polls ``act`` instead
    (:func:`~int4gemv.kernels.handoff.await_words`; the chain's ``handoff="words"``)."""
    C, U, S, P = int(cols), int(unroll), int(chunks), int(col_warps)
    if C & (C - 1) or not 1 <= C <= 16 or U not in (1, 2, 4, 8) or S < 1 or P < 1:
        raise ValueError(f"cols must be a power of two <= 16, unroll one of 1, 2, 4, 8, chunks and "
                         f"col_warps positive; got {(cols, unroll, chunks, col_warps)}")
    CHUNK = WORDS_PER_LANE_STEP * U   # words of one column per chunk
    WORDS, THREADS, GROUP = S * CHUNK, 32 * S * P, C * P
    if THREADS > 1024:
        raise ValueError(f"chunks x col_warps x 32 = {THREADS} threads is more than a block's 1024")
    FUSED, ZP, PDL, POLL = bool(fused), bool(zero_points), bool(pdl), bool(words)
    if POLL and not PDL:
        raise ValueError("words needs pdl (a programmatic launch that polls instead of waiting)")
    ACT_PER_K = 2 if FUSED else 1        # act holds K fp16 values ([g | u] when fused: 2K)
    U0, U1, U2, U4 = np.uint32(0), np.uint32(1), np.uint32(2), np.uint32(4)
    LOW32 = np.uint64(0xFFFFFFFF)
    WRITERS = writer_mask(C)              # lanes with these bits clear hold a column's sum
    reduce_columns = column_sums(C)

    @cuda.jit(device=True, inline=True)
    def load_group(words, scales, zero_points, n_first, base, lane, N, nw, nz, wv, sv, zv):
        """Issue the C columns x U words of this lane (weights, scales, zero points)."""
        full = base + np.uint32(CHUNK) <= nw  # warp-uniform: no word of this chunk is past K
        for c in range(C):
            n_c = min(n_first + np.uint32(c), N - U1)
            for u in range(U):
                j_raw = base + lane + np.uint32(32 * u)
                j = n_c * nw + (j_raw if full else min(j_raw, nw - U1))
                wv[c, u] = words[uint64(j)]
                s = float32(scales[uint64(j >> U1)])
                sv[c, u] = s if full or j_raw < nw else float32(0.0)  # a word past K adds 0
                if ZP:
                    k = min(j_raw, nw - U1)
                    byte = np.uint32(zero_points[uint64(n_c * nz + (k >> U2))])
                    zv[c, u] = (byte >> (((k >> U1) & U1) << U2)) & np.uint32(15)

    @cuda.jit(device=True, inline=True)
    def stage_word(act, j, slot, staged, tmp, u_offset):
        """The 8 half2 activation pairs of word ``j`` into ``staged[:, slot]``."""
        if FUSED:
            for h in range(2):
                i = uint64(4) * uint64(j) + uint64(2 * h)
                gx, gy = act[i], act[i + uint64(1)]                        # g0..g3, g4..g7
                ux, uy = act[u_offset + i], act[u_offset + i + uint64(1)]  # u0..u3, u4..u7
                for k in range(2):  # the uint32 holding elements (2k, 2k + 1) of x, y
                    sh = uint64(32 * k)
                    gxk, gyk = np.uint32((gx >> sh) & LOW32), np.uint32((gy >> sh) & LOW32)
                    uxk, uyk = np.uint32((ux >> sh) & LOW32), np.uint32((uy >> sh) & LOW32)
                    staged[4 * h + 2 * k, slot] = pack_half2(silu_times(half_low(gxk), half_low(uxk)),
                                                             silu_times(half_low(gyk), half_low(uyk)))
                    staged[4 * h + 2 * k + 1, slot] = pack_half2(
                        silu_times(half_high(gxk), half_high(uxk)), silu_times(half_high(gyk), half_high(uyk)))
        else:
            pair_activations_wide(act, uint64(j), tmp, 0)
            for i in range(8):
                staged[i, slot] = tmp[0, i]

    @cuda.jit
    def kernel(act, words, scales, zero_points, bias, has_bias, out, K):
        tid = np.uint32(cuda.threadIdx.x)
        lane, warp = tid & np.uint32(31), tid >> np.uint32(5)
        chunk, sub = warp % np.uint32(S), warp // np.uint32(S)
        N = np.uint32(out.shape[0])
        nw = np.uint32(K) >> U4            # uint64 words per column
        nz = ((nw >> U1) + U1) >> U1       # zero-point bytes per column
        groups = (N + np.uint32(GROUP - 1)) // np.uint32(GROUP)
        stride = np.uint32(cuda.gridDim.x)
        base = chunk * np.uint32(CHUNK)
        staged = cuda.shared.array((8, WORDS), np.uint32)
        partial = cuda.shared.array((S, GROUP), float32)
        wv = cuda.local.array((C, U), uint64)
        sv = cuda.local.array((C, U), float32)
        zv = cuda.local.array((C, U), np.uint32)
        pairs = cuda.local.array((1, 8), np.uint32)
        tmp = cuda.local.array((1, 8), np.uint32)
        acc = cuda.local.array(C, float32)
        g = np.uint32(cuda.blockIdx.x)
        if PDL:
            allow_next_grid()
        if g < groups:  # every chunk of the first group in flight before the wait
            load_group(words, scales, zero_points, g * np.uint32(GROUP) + sub * np.uint32(C), base,
                       lane, N, nw, nz, wv, sv, zv)
        if POLL:   # every 16 bytes of act (K fp16; fused: 2K) free of the sentinel
            await_words(act, np.uint32(ACT_PER_K * K // 8), 2)
        elif PDL:
            wait_for_previous_grid()
        u_offset = uint64(4) * uint64(nw)  # fused: u starts K fp16 = K/4 uint64 words into gu
        for slot in range(tid, np.uint32(WORDS), np.uint32(THREADS)):
            stage_word(act, min(slot, nw - U1), slot, staged, tmp, u_offset)
        cuda.syncthreads()
        while g < groups:
            for c in range(C):
                acc[c] = float32(0.0)
            for u in range(U):  # one word's pairs live at a time (read from shared memory)
                for i in range(8):
                    pairs[0, i] = staged[i, base + lane + np.uint32(32 * u)]
                for c in range(C):
                    if ZP:
                        low, high = zero_point_constants(zv[c, u])
                    else:
                        low, high = NO_ZP_LOW, NO_ZP_HIGH
                    acc[c] += sv[c, u] * half2_sum(dot16(wv[c, u], pairs, 0, low, high))
            total, column = reduce_columns(acc, lane)  # the transposing butterfly
            if (lane & WRITERS) == U0:
                partial[chunk, sub * np.uint32(C) + column] = total
            cuda.syncthreads()
            n = g * np.uint32(GROUP) + tid
            if tid < np.uint32(GROUP) and n < N:
                y = float32(0.0)
                for s in range(S):
                    y += partial[s, tid]
                if has_bias:
                    y += float32(bias[uint64(n)])
                out[uint64(n)] = y
            g += stride
            if g < groups:
                load_group(words, scales, zero_points, g * np.uint32(GROUP) + sub * np.uint32(C), base,
                           lane, N, nw, nz, wv, sv, zv)
            cuda.syncthreads()  # every partial read before the next group writes them

    return kernel
