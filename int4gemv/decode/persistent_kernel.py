"""Experimental persistent chain kernel: one launch runs every GEMV phase of a decode step.

Blocks claim work items (``WARPS`` columns of one phase, one warp per column) in order from a
global counter, so item ``i`` is only ever claimed after items ``0 .. i-1``. Before an item
reads its activations, its block waits until the phase before it is complete (a per-phase
completion counter in global memory); since every item of that phase waited for its own
predecessor, all earlier phases are then complete too. A claimed item only waits on items
claimed earlier, which are held by running blocks, so the scheme cannot deadlock whether or not
all blocks are resident (and on the simulator, whose blocks run one after another, block 0 simply
finds every dependency done). The item's first weight words are loaded *before* the wait, so
weight streaming overlaps the previous phase's tail.

Phases are rows of an int64 table (see :data:`PHASE_FIELDS`); weights of all phases live in one
flat uint32 word buffer and one flat fp16 scale buffer, activations in one flat fp16 buffer.
A phase with ``silu = 1`` reads ``silu(a[k]) · a[K + k]`` as its activation (the gate/up output),
so silu·mul is fused into the down projection. Symmetric weights only (zero point 8).
Activations are read with ``ld.global.cg`` (L2, not L1): other SMs wrote them during this launch.
"""

from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, float32, int32, uint32

from ..kernels.intrinsics import warp_sum

__all__ = ["chain_kernel", "reset_kernel", "PHASE_FIELDS", "WARPS", "PRELOAD"]

#: Columns of one work item: one warp each.
WARPS = 4
#: Weight words per lane loaded before the dependency wait.
PRELOAD = 4
#: Columns of the phase table: word offset, scale offset, K, N, words per column, block size,
#: activation offset, silu flag, bias offset (-1: none), output offset, first item, items.
PHASE_FIELDS = ("words", "scales", "K", "N", "stride", "block_size", "act", "silu", "bias", "out",
                "first_item", "items")

if config.ENABLE_CUDASIM:
    def _load_cg(a, i):
        return a[i]
else:
    @cuda.jit(device=True, inline=True)
    def _load_cg(a, i):
        return cuda.ldcg(a, i)


@cuda.jit(device=True, inline=True)
def _activation(acts, base, k, K, silu):
    if silu:
        g = float32(_load_cg(acts, base + k))
        e = math.exp(-abs(g))
        sigmoid = float32(1.0) / (float32(1.0) + e) if g >= 0 else e / (float32(1.0) + e)
        return g * sigmoid * float32(_load_cg(acts, base + K + k))
    return float32(_load_cg(acts, base + k))


@cuda.jit
def reset_kernel(done, next_item):
    """Zero the completion counters and the item counter (before each chain launch)."""
    i = cuda.grid(1)
    if i < done.shape[0]:
        done[i] = 0
    if i == 0:
        next_item[0] = 0


@cuda.jit
def chain_kernel(words, scales, acts, phases, done, next_item, total_items, max_items):
    """Run items ``0 .. total_items-1`` of the phase table; ``max_items > 0`` caps the items one
    block takes (a test hook that spreads phases over several blocks on the simulator)."""
    claimed = cuda.shared.array(1, int32)
    warp = cuda.threadIdx.x // 32
    lane = cuda.threadIdx.x % 32
    preload = cuda.local.array(PRELOAD, uint32)
    taken = 0
    while max_items == 0 or taken < max_items:
        if cuda.threadIdx.x == 0:
            claimed[0] = cuda.atomic.add(next_item, 0, 1)
        cuda.syncthreads()
        item = claimed[0]
        cuda.syncthreads()
        if item >= total_items:
            return
        taken += 1
        p = 0
        while phases[p, 10] + phases[p, 11] <= item:
            p += 1
        K, N, stride, bs = phases[p, 2], phases[p, 3], phases[p, 4], phases[p, 5]
        n = (item - phases[p, 10]) * WARPS + warp
        col = min(n, N - 1)
        row = phases[p, 0] + col * stride
        kw = K // 8
        for i in range(PRELOAD):  # independent of the previous phase: issued before the wait
            j = lane + 32 * i
            preload[i] = words[row + min(j, kw - 1)]
        if p > 0 and cuda.threadIdx.x == 0:
            while cuda.atomic.add(done, p - 1, 0) < phases[p - 1, 11]:
                pass
            cuda.threadfence()
        cuda.syncthreads()
        base, silu = phases[p, 6], phases[p, 7]
        acc = float32(0.0)
        j = lane
        i = 0
        while j < kw:
            w = preload[i] if i < PRELOAD else words[row + j]
            k = 8 * j
            part = float32(0.0)
            for e in range(8):
                q = float32((w >> np.uint32(4 * e)) & np.uint32(15)) - float32(8.0)
                part += q * _activation(acts, base, k + e, K, silu)
            acc += part * float32(scales[phases[p, 1] + col * ((K + bs - 1) // bs) + k // bs])
            j += 32
            i += 1
        acc = warp_sum(acc)
        if lane == 0 and n < N:
            if phases[p, 8] >= 0:
                acc += float32(_load_cg(acts, phases[p, 8] + n))
            acts[phases[p, 9] + n] = acc
        cuda.threadfence()
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            cuda.atomic.add(done, p, 1)
