"""The default tiling's M = 1 stream (``config.stages``): weights through a shared-memory ring.

The plain M = 1 loop issues a step of weight loads into registers, waits, then folds with nothing
in flight; a second register buffer spilled (bench/NOTES.md). Here each lane copies its step's
16-byte chunks with ``cp.async`` (:mod:`.async_copy`) into its own slots of a per-warp ring of
``S = stages`` steps, so ``S - 1`` steps' bytes are in flight, costing no registers, while one
step is read back (``ld.shared.v4``) and folded. The warp's work is one sequence of items (column
group ``g, g + stride, ...`` x step), crossing column groups; item ``q`` lives in ring slot
``q % S``::

    prologue: copy items 0 .. S-2, one commit each (empty commits keep the count uniform)
    item q:   copy item q + S - 1 into slot (q - 1) % S (read back, into registers, at q - 1);
              commit; load item q + 1's scales and zero points into registers (one step ahead);
              wait_group S - 1 (item q's group has landed); read slot q % S; fold; finish the
              column group after its last step

Ring layout (uint32 words): ``(((warp * S + slot) * C * U + c * U + u) * 32 + lane) * 4``: a warp's
32 lanes read 512 consecutive bytes per chunk (no bank conflicts). A lane reads only the words it
copied itself, so ``wait_group`` suffices (no barrier). Tails as in :mod:`.default`: chunk
indices past the column are clamped to a valid chunk (the fold zeroes their activations),
columns past N to column N - 1; rows not 16-byte aligned (``weight_vector`` False) copy two
8-byte halves, the second zero-filled where it would pass the row's end.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .async_copy import ASYNC_WAITS, async_commit, cp_async8, cp_async16, load16_shared

__all__ = ["weight_ring", "ring_words", "stream_loop"]


def ring_words(config):
    """The ring's size in uint32 words per block (at least 1: a static shared array)."""
    return max(1, config.ring_bytes // 4)


def weight_ring(config):
    """``(issue_weights, read_weights, wait_landed)`` of the ring of ``config``:
    ``issue_weights(packed, ring, slot, g, st, s, p, N, nwords, nchunks, row_bytes)`` copies step
    ``st`` of column group ``g`` into ``slot`` (of the calling warp and lane);
    ``read_weights(ring, slot, raw)`` fills ``raw[c, u, :]`` from it; ``wait_landed()`` waits
    until at most ``stages - 1`` committed groups are pending."""
    C, U, L, S = config.cols, config.unroll, config.lanes, max(1, config.stages)
    P = 32 // L
    GROUP_COLS = P * C
    W_VEC = config.weight_vector
    SLOT = np.uint32(C * U * 128)          # words per ring slot of one warp
    wait_landed = ASYNC_WAITS[S - 1]
    _U2, _U4, _U128 = np.uint32(2), np.uint32(4), np.uint32(128)

    @cuda.jit(device=True, inline=True)
    def base(slot):
        """Word index of the calling lane's chunk (0, 0) in ``slot``."""
        warp = np.uint32(cuda.threadIdx.x) >> np.uint32(5)
        lane = np.uint32(cuda.threadIdx.x) & np.uint32(31)
        return (warp * np.uint32(S) + np.uint32(slot)) * SLOT + lane * _U4

    @cuda.jit(device=True, inline=True)
    def copy_step(packed, ring, slot, col0, j0, N, nwords, nchunks, row_bytes, full):
        b = base(slot)
        for c in range(C):
            n = np.uint64(min(col0 + c * P, N - 1))
            for u in range(U):
                j = j0 + u * L if full else min(j0 + u * L, nchunks - 1)
                src = n * np.uint64(row_bytes) + np.uint64(16 * j)
                dst = b + np.uint32(c * U + u) * _U128
                if W_VEC:
                    cp_async16(ring, dst, packed, src, True)
                else:
                    second = full or 4 * j + 2 < nwords   # else past the row: zero-filled
                    cp_async8(ring, dst, packed, src, True)
                    cp_async8(ring, dst + _U2, packed, src + np.uint64(8) if second else src,
                              second)

    @cuda.jit(device=True, inline=True)
    def issue_weights(packed, ring, slot, g, st, s, p, N, nwords, nchunks, row_bytes):
        col0, j0 = g * GROUP_COLS + p, s + st * L * U
        if 4 * (st + 1) * L * U <= nwords:     # warp-uniform: no chunk of the step is past K
            copy_step(packed, ring, slot, col0, j0, N, nwords, nchunks, row_bytes, True)
        else:
            copy_step(packed, ring, slot, col0, j0, N, nwords, nchunks, row_bytes, False)

    @cuda.jit(device=True, inline=True)
    def read_weights(ring, slot, raw):
        b = base(slot)
        for c in range(C):
            for u in range(U):
                x = load16_shared(ring, b + np.uint32(c * U + u) * _U128)
                for i in range(4):
                    raw[c, u, i] = x[i]

    return issue_weights, read_weights, wait_landed


def stream_loop(config, issue_weights, read_weights, wait_landed, issue_scales, fold_step,
                finish, stage_fill, wait_for_previous_grid):
    """The M = 1 ring loop (module docstring) as one device function ``stream(...)`` of the
    kernel's state; every thread of the block calls it (``stage_fill`` is a barrier)."""
    S, PDL = config.stages, config.pdl
    C, U, L = config.cols, config.unroll, config.lanes
    GROUP_COLS = 32 // L * C
    RANGE_CHECK = config.dtype != "float16"
    H = 2 if config.block_size == 16 else 1

    @cuda.jit(device=True, inline=True)
    def advance(g, st, steps, stride):
        return (g, st + 1) if st + 1 < steps else (g + stride, 0)

    @cuda.jit(device=True, inline=True)
    def stream(act, packed, scales, zero_points, bias, has_bias, out, K, N, g, stride, groups,
               steps, s, p, nwords, nchunks, nb, nzb, row_bytes, ring, stage, staged, raw, sv,
               zv, sv_n, zv_n, acc):
        total = ((groups - g + stride - 1) // stride) * steps if g < groups else 0
        gi, si = g, 0                          # the next item to copy
        for i in range(S - 1):
            if i < total:
                issue_weights(packed, ring, i, gi, si, s, p, N, nwords, nchunks, row_bytes)
                gi, si = advance(gi, si, steps, stride)
            async_commit()
        if total > 0:
            issue_scales(packed, scales, zero_points, g, 0, s, p, N, nwords, nchunks, nb, nzb,
                         row_bytes, raw, sv, zv)
        if PDL:  # the first weights are in flight while the previous grid ends
            wait_for_previous_grid()
        half = not RANGE_CHECK
        if staged:
            half = stage_fill(act, stage, nwords, nchunks)
        gq, sq = g, 0                          # item q
        gs, ss = advance(g, 0, steps, stride)  # item q + 1 (its scales)
        slot = 0
        for q in range(total):
            if q + S - 1 < total:
                issue_weights(packed, ring, (slot + S - 1) % S, gi, si, s, p, N, nwords, nchunks,
                              row_bytes)
                gi, si = advance(gi, si, steps, stride)
            async_commit()
            if q + 1 < total:
                issue_scales(packed, scales, zero_points, gs, ss, s, p, N, nwords, nchunks, nb,
                             nzb, row_bytes, raw, sv_n, zv_n)
            wait_landed()
            read_weights(ring, slot, raw)
            fold_step(act, stage, sq, s, nwords, nchunks, K, raw, sv, zv, acc, half)
            if sq + 1 == steps:
                finish(acc, gq * GROUP_COLS + p, s, N, bias, has_bias, out)
            for c in range(C):
                for u in range(U):
                    for h in range(H):
                        sv[c, u, h] = sv_n[c, u, h]
                        zv[c, u, h] = zv_n[c, u, h]
            gq, sq = advance(gq, sq, steps, stride)
            gs, ss = advance(gs, ss, steps, stride)
            slot = slot + 1 if slot + 1 < S else 0

    return stream
