"""Experimental persistent chain kernel: one launch runs every GEMV phase of a decode step.

**Schedule (static).** Warp ``gw = block * warps + warp`` of a grid of ``G`` warps takes the
column groups ``gw, gw + G, ...`` of every phase, in phase order. A group is ``P * cols`` columns,
``P = 32 / lanes`` column slots of ``lanes`` lanes (``cols`` per phase, at most :data:`MAX_COLS`):
lane ``s`` of slot ``q`` takes the columns ``g * P * cols + q + c * P`` and their 32-element chunks
``s, s + lanes, ...``, ``unroll`` chunks (per phase) a step. A warp's *items* are its groups'
steps in order; each item is ``cols x unroll <= SLOTS`` 16-byte weight copies a lane and their
scales. **Items fly in a ring:** a lane's copies go through ``cp.async`` into its own words of a
per-warp ring of :data:`RING` item slots in dynamic shared memory (:func:`shared_bytes`: the
stage, the weight rings, the scale rings; past 48 KB the launch raises the kernel's limit), one
commit group an item; before it
folds item ``i`` a lane issues item ``i + RING - 1`` and waits with ``cp.async.wait_group RING -
1``, so ``RING - 1`` items stay in flight while one folds (a phase's first ``RING - 1`` items are
issued before its barrier). Loads into registers could not do this: ptxas gives every weight load
one scoreboard, so waiting for one item waited for all (bench/NOTES.md, session 23). The
arithmetic is the default tiling's M = 1 fold (:func:`~int4gemv.kernels.half2.dot8` on re-paired
fp16 activations, 8 products a half in fp16, then float32 with the group's scale), summed per slot
and per column at the group's end. The constants and the shared-memory layout named here live in
:mod:`.persistent_layout`.

**Phase boundaries are grid barriers** (:mod:`.grid_barrier`). When a block's warps have stored a
phase's outputs, the block counts itself in the phase's counter ``done[p]`` (``arrive``), then each warp
issues the copies of its first ``RING - 1`` items of the next phase (the weights never depend on an earlier
phase: they fly while the barrier waits; issued after the fence, which would wait for them), then
the block waits until all ``gridDim.x`` blocks have counted (``wait_all``). The grid must be resident
at once: it is launched cooperatively (the driver refuses a grid that cannot be). After the barrier
the block stages the phase's activation row in shared memory (:func:`~int4gemv.kernels.
vector_loads.load16_l2`: other blocks wrote it in this launch), re-paired as the default tiling's
stage (:data:`CHUNK_STRIDE`), with ``silu(g)·u`` rounded to fp16 for a ``silu`` phase (gate/up's
outputs ``g`` at ``act``, ``u`` at ``act + K``); the bias (the residual) is read from L2 too.

**Launches.** ``kernel(packed, scale_bytes, acts, phases, done, first, last, stamps)`` runs phases
``first .. last - 1`` with a barrier between two of them; every block counts every phase it ends
in ``done[p]`` (so a launch per phase, which the simulator's tests use to run several blocks,
counts as one launch of all), and a barrier it gave up on in ``done[-1]``. A ``timed`` kernel's
thread 0 of block ``b`` writes ``%globaltimer`` to ``stamps[p, b, k]`` (uint64 ``[phases, blocks,
3]``; blocks past its second axis write nothing) at :data:`PHASE_START`, :data:`STAGED` and
:data:`ARRIVED`; an untimed one never reads ``stamps``. Symmetric weights (zero point
8), block sizes 32, 64, 128, K a multiple of 32 and at most :data:`MAX_K`; fp16. Phases are rows
of an int64 table (:data:`PHASE_FIELDS`). ``scale_bytes`` is the fp16 scales' bytes (uint8), an
even number of scales (a scale is copied as the 4-byte word that holds it).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, int64, uint32

from ..kernels.async_copy import ASYNC_WAITS, async_commit, cp_async4, cp_async16, load16_shared
from ..kernels.default_m1 import CHUNK_STRIDE
from ..kernels.half2 import NO_ZP_HIGH, NO_ZP_LOW, dot8, pair_words
from ..kernels.intrinsics import SIMULATED, half2_sum, pack_half2, shfl_xor
from ..kernels.nibble_pairs import half_high, half_low
from ..kernels.global_timer import global_timer
from ..kernels.vector_loads import load16_l2
from .grid_barrier import arrive, wait_all
from .persistent_layout import (ARRIVED, MAX_COLS, PHASE_START, RING, RING_WORDS, SLOTS, STAGE_PASS, STAGED,
                                WARP_CHOICES, blocks_per_sm, stage_words)
from .silu_mul import silu_times

__all__ = ["chain_kernel", "reset_kernel"]

_Z = uint32(0)
_WAIT_RING = ASYNC_WAITS[RING - 1]


if SIMULATED:
    def _load_l2(array, i):
        return array[i]
else:
    @cuda.jit(device=True, inline=True)
    def _load_l2(array, i):
        """One element from L2 (``ld.global.cg``): written by another block of the launch."""
        return cuda.ldcg(array, i)


@cuda.jit
def reset_kernel(done):
    """Zero the phase counters (before each chain launch)."""
    i = cuda.grid(1)
    if i < done.shape[0]:
        done[i] = 0


@cuda.jit(device=True, inline=True)
def _silu_word(g, u):
    return pack_half2(silu_times(half_low(g), half_low(u)), silu_times(half_high(g), half_high(u)))


@cuda.jit(device=True, inline=True)
def _silu_words(g, u):
    """``silu(g)·u`` of 8 fp16 values (4 words each) as 4 fp16 words, rounded once."""
    return (_silu_word(g[0], u[0]), _silu_word(g[1], u[1]), _silu_word(g[2], u[2]),
            _silu_word(g[3], u[3]))


@cuda.jit(device=True, inline=True)
def _words(stage, b):
    """The 4 staged words from ``b``, a multiple of 4 (one ``LDS.128``)."""
    return stage[b], stage[b + uint32(1)], stage[b + uint32(2)], stage[b + uint32(3)]


@cuda.jit(device=True, inline=True)
def _half_dot(w0, w1, x0, x1):
    """``sum a_i q_i - 8 a_i`` over 16 elements, words ``w0, w1`` against the re-paired words
    ``x0, x1``: each half of the half2 sums 8 products in fp16, then float32."""
    t = dot8(w0, x0[0], x0[1], x0[2], x0[3], NO_ZP_LOW, NO_ZP_HIGH, _Z)
    return half2_sum(dot8(w1, x1[0], x1[1], x1[2], x1[3], NO_ZP_LOW, NO_ZP_HIGH, t))


@functools.lru_cache(maxsize=None, typed=True)   # typed: lanes=True is refused, not lanes=1
def chain_kernel(lanes: int = 32, warps: int = 4, timed: bool = False):
    """The persistent chain kernel with ``lanes`` lanes per column (1, 2, 4, 8, 16 or 32) and
    ``warps`` warps a block (one of :data:`WARP_CHOICES`; :func:`blocks_per_sm` blocks per
    SM); ``timed``: it writes phase stamps (the module docstring)."""
    if isinstance(lanes, bool) or lanes not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"lanes must be a power of two from 1 to 32; got {lanes!r}")
    if isinstance(warps, bool) or warps not in WARP_CHOICES:
        raise ValueError(f"warps must be one of {WARP_CHOICES}; got {warps!r}")
    if not isinstance(timed, bool):
        raise TypeError(f"timed must be a bool; got {type(timed).__name__}")
    L, P, LOG_L, WARPS, TIMED = lanes, 32 // lanes, lanes.bit_length() - 1, warps, timed
    C, S, THREADS = MAX_COLS, SLOTS, 32 * warps
    bounds = {} if SIMULATED else {"launch_bounds": (THREADS, blocks_per_sm(warps))}
    ALIGN = None if SIMULATED else 16            # group reads as LDS.128
    STAGE = stage_words()                        # the staged row's words
    RING_AT = STAGE                              # the block's weight rings' first word
    SCALE_AT = STAGE + WARPS * RING * RING_WORDS  # and its scale rings' (shared_bytes' layout)

    @cuda.jit(device=True, inline=True)
    def fields(phases, p):
        """Phase ``p``'s row of the table (:data:`PHASE_FIELDS`), read once per phase."""
        return (phases[p, 0], phases[p, 1], phases[p, 2], phases[p, 3], phases[p, 4], phases[p, 5],
                phases[p, 6], phases[p, 7], phases[p, 8], phases[p, 9], phases[p, 10], phases[p, 11],
                phases[p, 12])

    @cuda.jit(device=True, inline=True)
    def groups_of(f):
        return (f[3] + P * f[11] - 1) // (P * f[11])

    @cuda.jit(device=True, inline=True)
    def items_of(f, gw, G):
        """``(steps, n, items)``: the steps of a group of phase ``f``, warp ``gw``'s items ``n``
        (its groups ``gw, gw + G, ...`` times their steps, in the order it runs them) and the
        ``items`` of the grid's busiest warp (every warp runs that many: block-uniform shuffles)."""
        groups, per_step = groups_of(f), L << f[12]
        steps = (f[2] // 32 + per_step - 1) // per_step
        return (steps, ((groups - gw + G - 1) // G if gw < groups else 0) * steps,
                (groups + G - 1) // G * steps)

    @cuda.jit(device=True, inline=True)
    def locate(i, steps):
        """Item ``i``'s group round and step, ``(i // steps, i % steps)``, in 32-bit unsigned
        arithmetic: a 64-bit division is a call, before which the compiler waits for every load
        in flight (SASS); returned as int64 (uint32 against int64 would compare in float64)."""
        ui, us = uint32(i), uint32(steps)
        return int64(ui // us), int64(ui % us)

    @cuda.jit(device=True, inline=True)
    def slot_of(f, g, st, s, q, k):
        """Slot ``k`` of step ``st`` of group ``g``: ``(n, j, valid)``, its column and chunk
        clamped into the weight (an invalid slot copies nothing but needs an address)."""
        K32, N, cols, us = f[2] // 32, f[3], f[11], f[12]
        c, j = k >> us, s + ((st << us) + (k & ((1 << us) - 1))) * L
        return (min(g * P * cols + q + c * P, N - 1), min(j, K32 - 1), c < cols and j < K32)

    @cuda.jit(device=True, inline=True)
    def scale_index(f, n, j):
        """The index of column ``n``'s scale for chunk ``j`` in the phase's scales."""
        return f[1] + n * f[5] + (j >> f[6])

    @cuda.jit(device=True, inline=True)
    def issue(packed, scale_bytes, f, i, steps, gw, G, s, q, smem, at):
        """Item ``i``'s weight and scale copies into ring slot ``at`` (group ``gw + (i // steps)
        G``, step ``i % steps``); the caller commits them as one group."""
        r, st = locate(i, steps)
        g = gw + r * G
        for k in range(S):
            n, j, valid = slot_of(f, g, st, s, q, k)
            e = scale_index(f, n, j)
            cp_async16(smem, RING_AT + at + uint32(128 * k), packed, f[0] + n * f[4] + 16 * j, valid)
            cp_async4(smem, SCALE_AT + (at >> uint32(2)) + uint32(32 * k), scale_bytes, 4 * (e >> 1), valid)

    @cuda.jit(device=True, inline=True)
    def fold(smem, f, g, st, s, q, at, acc):
        """Step ``st``'s products into the slots' sums ``acc[k]`` (its copies landed in ring slot
        ``at``; activations from the stage, the first words of ``smem``)."""
        for k in range(S):
            n, j, valid = slot_of(f, g, st, s, q, k)
            if valid:
                w = load16_shared(smem, RING_AT + at + uint32(128 * k))
                sw = smem[SCALE_AT + (at >> uint32(2)) + uint32(32 * k)]
                e = scale_index(f, n, j)
                b = uint32(CHUNK_STRIDE) * uint32(j)     # unsigned: no negative-index wrap
                x0, x1 = _words(smem, b), _words(smem, b + uint32(4))
                x2, x3 = _words(smem, b + uint32(8)), _words(smem, b + uint32(12))
                acc[k] += (half_high(sw) if e & 1 else half_low(sw)) * (
                    _half_dot(w[0], w[1], x0, x1) + _half_dot(w[2], w[3], x2, x3))

    @cuda.jit(device=True, inline=True)
    def finish(acts, f, g, s, q, acc):
        """Sum each column's slots over its lanes; the column slot's first lane stores it (+ the
        bias). Warp-uniform (every lane shuffles)."""
        N, bias, out, cols, us = f[3], f[9], f[10], f[11], f[12]
        for c in range(C):
            if c < cols:
                v = float32(0.0)
                for k in range(S):
                    if k >> us == c:
                        v += acc[k]
                for r in range(LOG_L):
                    v += shfl_xor(v, uint32(L >> (r + 1)))
                n = g * P * cols + q + c * P
                if s == 0 and n < N:
                    if bias >= 0:
                        v += float32(_load_l2(acts, bias + n))
                    acts[out + n] = v
        for k in range(S):
            acc[k] = float32(0.0)

    @cuda.jit(device=True, inline=True)
    def slot_at(base, i):
        """The first ring word of item ``i``'s slot (``i % RING``) in the warp's ring."""
        return base + uint32(RING_WORDS) * (uint32(i) % uint32(RING))

    @cuda.jit(device=True, inline=True)
    def step(packed, scale_bytes, smem, acts, f, i, n, steps, gw, G, s, q, base, acc):
        """Item ``i``: issue item ``i + RING - 1`` into the slot item ``i - 1`` left, wait until
        item ``i``'s group has landed (the ``RING - 1`` newer may fly), fold it (none past the
        warp's ``n``), and end the group after its last step (past the warp's groups: shuffles,
        stores nothing)."""
        ahead = i + RING - 1
        if ahead < n:
            issue(packed, scale_bytes, f, ahead, steps, gw, G, s, q, smem, slot_at(base, ahead))
        async_commit()
        _WAIT_RING()
        r, st = locate(i, steps)
        g = gw + r * G
        if i < n:
            fold(smem, f, g, st, s, q, slot_at(base, i), acc)
        if st == steps - 1:
            finish(acts, f, g, s, q, acc)

    @cuda.jit(device=True, inline=True)
    def begin(packed, scale_bytes, phases, p, gw, G, s, q, smem, base):
        """Phase ``p``'s fields and :func:`items_of`, its first ``RING - 1`` items issued (a group
        each, empty past the warp's items)."""
        f = fields(phases, p)
        steps, n, items = items_of(f, gw, G)
        for i in range(RING - 1):
            if i < n:
                issue(packed, scale_bytes, f, i, steps, gw, G, s, q, smem, slot_at(base, i))
            async_commit()
        return f, steps, n, items

    @cuda.jit(device=True, inline=True)
    def put(stage, i, x):
        """Staged piece ``i`` (8 activations, 4 fp16 words ``x``), re-paired."""
        w = pair_words(x[0], x[1], x[2], x[3])
        b = uint32(CHUNK_STRIDE) * uint32(i // 4) + uint32(4 * (i % 4))
        for e in range(4):
            stage[b + uint32(e)] = w[e]

    @cuda.jit(device=True, inline=True)
    def stage_row(acts, stage, f):
        """The block stages the phase's activations, re-paired (``silu(g)·u`` for silu). A thread
        loads :data:`STAGE_PASS` pieces (and their ``u``) before it uses any: each L2 load is a
        compiler barrier, so one at a time every piece would cost a round trip, and the silu
        row of a 4-warp block is 6 pieces a thread."""
        K, base, silu = f[2], f[7], f[8]
        pieces = K // 8
        xs = cuda.local.array((STAGE_PASS, 4), uint32)
        us = cuda.local.array((STAGE_PASS, 4), uint32)
        for i in range(cuda.threadIdx.x, pieces, STAGE_PASS * THREADS):
            for t in range(STAGE_PASS):
                j = min(i + t * THREADS, pieces - 1)    # past the row: a repeated read, never staged
                x = load16_l2(acts, base + 8 * j)
                for e in range(4):
                    xs[t, e] = x[e]
                if silu:
                    u = load16_l2(acts, base + K + 8 * j)
                    for e in range(4):
                        us[t, e] = u[e]
            for t in range(STAGE_PASS):
                x = (xs[t, 0], xs[t, 1], xs[t, 2], xs[t, 3])
                if silu:
                    x = _silu_words(x, (us[t, 0], us[t, 1], us[t, 2], us[t, 3]))
                if i + t * THREADS < pieces:
                    put(stage, i + t * THREADS, x)
        cuda.syncthreads()

    @cuda.jit(device=True, inline=True)
    def stamp(stamps, p, k):
        """With ``timed``: thread 0 of block ``b`` writes the clock to ``stamps[p, b, k]``."""
        if TIMED and cuda.threadIdx.x == 0 and cuda.blockIdx.x < stamps.shape[1]:
            stamps[p, cuda.blockIdx.x, k] = global_timer()

    @cuda.jit(**bounds)
    def kernel(packed, scale_bytes, acts, phases, done, first, last, stamps):
        warp, lane = cuda.threadIdx.x // 32, cuda.threadIdx.x % 32
        s, q = lane % L, lane // L
        gw = cuda.blockIdx.x * WARPS + warp
        G = cuda.gridDim.x * WARPS
        acc = cuda.local.array(S, float32)
        smem = cuda.shared.array(0, uint32, alignment=ALIGN)   # dynamic: the stage, the rings (shared_bytes)
        base = uint32(warp * RING * RING_WORDS + 4 * lane)    # this lane's words of its warp's ring
        for k in range(S):
            acc[k] = float32(0.0)
        p = first
        f, steps, n, items = begin(packed, scale_bytes, phases, p, gw, G, s, q, smem, base)
        while p < last:
            stamp(stamps, p, PHASE_START)
            stage_row(acts, smem, f)
            stamp(stamps, p, STAGED)
            for i in range(items):
                step(packed, scale_bytes, smem, acts, f, i, n, steps, gw, G, s, q, base, acc)
            arrive(done, p)
            stamp(stamps, p, ARRIVED)
            p += 1
            if p < last:   # the next phase's first items fly while the grid waits
                f, steps, n, items = begin(packed, scale_bytes, phases, p, gw, G, s, q, smem, base)
                wait_all(done, p - 1)

    return kernel
