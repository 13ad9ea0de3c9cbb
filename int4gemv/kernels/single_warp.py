"""Single-warp specialization: one warp per block, ``cols`` columns per step, K unrolled.

For fp16 activations, block size 32, batch 1 and K a multiple of 32 (see
:func:`int4gemv.dispatch.single_warp_eligibility`). Lane ``l`` owns uint64 words
``l, l + 32, ..., l + 32*(unroll-1)`` of every column in a K chunk (16 nibbles each, half a
quantization group), so its activations per word are loaded and paired once and reused for every
column. Warps are persistent: block ``b`` takes column groups ``b, b + gridDim, ...`` of ``cols``
columns each.

The arithmetic is half2 (:mod:`.half2`): about 1.6 instructions per element, products summed in
fp16 over one word's 16 elements, then in float32.

Where the activations live (``activations``, chosen by :func:`activation_mode`):

* ``"registers"`` (``K <= 512 * unroll``): the lane's activation pairs stay in registers for the
  warp's lifetime (8 per word), and the next column group's weight loads are issued before the
  current group is folded (a two-stage pipeline).
* ``"streaming"`` (any K): K is walked in chunks of ``512 * unroll``; the chunk's activations are
  reloaded (from L1/L2) for each column group.

Per column group a lane issues all ``cols * unroll`` 8-byte weight loads (coalesced) and their
scales (and zero points) before using any, folds each word with :func:`~.half2.dot16`, and a
transposing warp-shuffle reduction finishes; one lane per column writes it (+ bias).

Index arithmetic is unsigned (no negative-index wraparound code) and loads are branch-free: an
out-of-range word or column is clamped to a valid address and its scale is zeroed, so it adds 0.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, uint64

from .butterfly import column_sums, writer_mask
from .half2 import (NO_ZP_HIGH, NO_ZP_LOW, dot16, pair_activations, pair_activations_wide,
                    zero_point_constants)
from .intrinsics import SIMULATED, allow_next_grid, half2_sum, prefetch_l2, wait_for_previous_grid

__all__ = ["single_warp_kernel", "geometry", "activation_mode", "TUNINGS", "DEFAULT_TUNING",
           "BLOCKS_PER_SM", "MODES", "MIN_BLOCKS", "min_blocks", "PREFETCH_LIMIT_BYTES"]

#: (cols, unroll) pairs the dispatcher accepts; each is compiled on first use.
TUNINGS = tuple((c, u) for c in (1, 2, 4, 8, 16) for u in (1, 2, 4, 8) if c * u <= 32)
#: Default (cols, unroll), chosen by measurement on the H200: the smallest sum of graph-replay
#: times over one Qwen3-VL-2B decode step's projections (bench/NOTES.md). ``auto`` tunes per shape.
DEFAULT_TUNING = (4, 4)
#: Persistent grid: at most this many one-warp blocks per multiprocessor.
BLOCKS_PER_SM = 32

MODES = ("registers", "streaming")

#: Launch bounds: ``(cols, unroll, mode) -> blocks per SM`` the compiler must fit (it caps the
#: registers at 65536 / (32 * blocks)); absent = no bound. Measured on the H200 (bench/NOTES.md).
MIN_BLOCKS: dict = {(16, 1, "streaming"): 16, (16, 2, "streaming"): 16}

#: ``prefetch`` kernels prefetch their weights into L2 only when the packed weights are at most
#: this large (the H200's L2 is 60 MB: the running kernel's and the next one's weights fit).
PREFETCH_LIMIT_BYTES = 32 << 20


def min_blocks(cols: int, unroll: int, mode: str) -> int:
    """The launch bound of a tuning (0: none), from :data:`MIN_BLOCKS`."""
    return MIN_BLOCKS.get((cols, unroll, mode), 0)


def activation_mode(K: int, unroll: int) -> str:
    """Where the activations live for this K (see the module docstring)."""
    return "registers" if K <= 512 * unroll else "streaming"


def geometry(N: int, cols: int, multiprocessors: int):
    """``(grid, block)``: one-warp blocks, at most ``BLOCKS_PER_SM`` per SM."""
    groups = -(-N // cols)
    return (max(1, min(groups, BLOCKS_PER_SM * multiprocessors)), 1, 1), (32, 1, 1)


@functools.lru_cache(maxsize=None)
def single_warp_kernel(cols: int, unroll: int, mode: str, zero_points: bool = True,
                       blocks_per_sm: int = 0, wide: bool = True, pdl: bool = False,
                       prefetch: bool = False):
    """The kernel for one ``(cols, unroll)`` tuning, activation mode and zero-point presence
    (a compile-time choice: without zero points the offsets are those of zp = 8), compiled on
    first launch, with launch bounds ``(32, blocks_per_sm)`` when that is not 0 (ignored on the
    simulator). Its ``has_zp`` argument must equal ``zero_points``; its activations argument
    is the fp16 vector's uint64 view when ``wide`` (8-byte aligned data: 4 loads per 16
    activations), else its uint16 view (16 loads).

    ``pdl`` (sm_90+): compiled for a programmatic dependent launch. The kernel lets the next
    such launch start at once, issues its first column group's weight loads, and only then waits
    for the previous grid to complete, before it reads the activations or bias or writes ``out``.

    ``prefetch`` (with ``pdl`` only): before that wait, lane ``l`` of each warp also prefetches
    the warp's ``l``-th column group (weights and scales, not zero points) into L2 with one bulk
    prefetch each, when the weights are at most :data:`PREFETCH_LIMIT_BYTES`; and the next launch
    is allowed to start only after the wait, so exactly one kernel prefetches ahead of the one
    that runs.
    """
    if prefetch and not pdl:
        raise ValueError("prefetch needs pdl=True (it runs while the previous kernel drains)")
    if (cols, unroll) not in TUNINGS:
        raise ValueError(f"(cols, unroll) must be one of {TUNINGS}; got {(cols, unroll)}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    resident = mode == "registers"
    ZP, WIDE, PDL, PREFETCH = bool(zero_points), bool(wide), bool(pdl), bool(prefetch)
    PREFETCH_WORDS = PREFETCH_LIMIT_BYTES // 8
    C, U = cols, unroll
    CHUNK = 32 * U  # uint64 words of one column per K chunk
    # Index arithmetic is 32-bit unsigned (a weight has < 2**32 uint64 words, see
    # single_warp_eligibility) and widened once per row: rows are addressed as row + immediate.
    U0, U1, U2, U4 = np.uint32(0), np.uint32(1), np.uint32(2), np.uint32(4)

    @cuda.jit(device=True, inline=True)
    def load_activations(act, base, lane, nw, pairs):
        for u in range(U):
            j = min(base + lane + np.uint32(32 * u), nw - U1)
            if WIDE:
                pair_activations_wide(act, uint64(j), pairs, u)
            else:
                pair_activations(act, uint64(j) << uint64(4), pairs, u)

    @cuda.jit(device=True, inline=True)
    def load_group(words, scales, zero_points, n_first, base, lane, N, nw, nz, wv, sv, zv):
        """Issue the weight, scale (and zero-point) loads of C columns x U words."""
        full = base + np.uint32(CHUNK) <= nw  # warp-uniform: no word of this chunk is past K
        for c in range(C):
            n_c = min(n_first + np.uint32(c), N - U1)
            row = n_c * nw + base + lane  # this lane's first word of the chunk; even - lane
            if full:
                w_row = uint64(row)
                s_row = uint64(row >> U1)
                for u in range(U):
                    wv[c, u] = words[w_row + uint64(32 * u)]
                    sv[c, u] = float32(scales[s_row + uint64(16 * u)])
            else:  # the ragged last chunk: clamp the address, zero the scale
                for u in range(U):
                    j_raw = base + lane + np.uint32(32 * u)
                    j = n_c * nw + min(j_raw, nw - U1)
                    wv[c, u] = words[uint64(j)]
                    s = float32(scales[uint64(j >> U1)])
                    sv[c, u] = s if j_raw < nw else float32(0.0)
            if ZP:
                for u in range(U):
                    j = min(base + lane + np.uint32(32 * u), nw - U1)
                    byte = np.uint32(zero_points[uint64(n_c * nz + (j >> U2))])
                    zv[c, u] = (byte >> (((j >> U1) & U1) << U2)) & np.uint32(15)

    @cuda.jit(device=True, inline=True)
    def fold_group(wv, sv, zv, pairs, acc):
        """acc[c] = sum over this lane's words of scale * dot16(word)."""
        for c in range(C):
            for u in range(U):
                if ZP:
                    low, high = zero_point_constants(zv[c, u])
                else:
                    low, high = NO_ZP_LOW, NO_ZP_HIGH
                acc[c] += sv[c, u] * half2_sum(dot16(wv[c, u], pairs, u, low, high))

    @cuda.jit(device=True, inline=True)
    def prefetch_groups(words, scales, g, stride, groups, lane, N, nw):
        """Lane ``l`` prefetches the warp's ``l``-th column group into L2 (small weights only)."""
        if uint64(N) * uint64(nw) <= uint64(PREFETCH_WORDS):
            g_lane = g + lane * stride
            if g_lane < groups:
                n_first = g_lane * np.uint32(C)
                n_cols = min(np.uint32(C), N - n_first)
                prefetch_l2(words, uint64(n_first) * uint64(nw), n_cols * nw)
                prefetch_l2(scales, uint64(n_first) * uint64(nw >> U1), n_cols * (nw >> U1))

    WRITERS = writer_mask(C)           # lanes with these bits clear write a column
    reduce_columns = column_sums(C)

    @cuda.jit(device=True, inline=True)
    def write_group(acc, n_first, lane, N, bias, has_bias, out):
        """Reduce the C columns over the warp (:mod:`.butterfly`), lane ``l`` ending with column
        ``column(l)``; one lane per column writes it (+ bias); clear acc."""
        total, column = reduce_columns(acc, lane)
        for c in range(C):
            acc[c] = float32(0.0)
        n = n_first + column
        if (lane & WRITERS) == U0 and n < N:
            if has_bias:
                total += float32(bias[uint64(n)])
            out[uint64(n)] = total

    bounds = {} if SIMULATED or not blocks_per_sm else {"launch_bounds": (32, blocks_per_sm)}

    @cuda.jit(**bounds)
    def kernel(act, words, scales, zero_points, has_zp, bias, has_bias, out, K):
        """act: fp16 [K] as uint64 (wide) or uint16; words: uint64 [N * K/16]; scales: fp16 [N * K/32];
        zero_points: uint8 [N * ceil(K/64)]; bias: fp16 [N]; out: fp16 [N]."""
        lane = np.uint32(cuda.threadIdx.x)
        N = np.uint32(out.shape[0])
        nw = np.uint32(K) >> U4            # uint64 words per column
        nz = ((nw >> U1) + U1) >> U1       # zero-point bytes per column
        groups = (N + np.uint32(C - 1)) // np.uint32(C)
        stride = np.uint32(cuda.gridDim.x)
        last = groups - U1
        acc = cuda.local.array(C, float32)
        for c in range(C):
            acc[c] = float32(0.0)
        wv = cuda.local.array((C, U), uint64)
        sv = cuda.local.array((C, U), float32)
        zv = cuda.local.array((C, U), np.uint32)
        pairs = cuda.local.array((U, 8), np.uint32)
        g = np.uint32(cuda.blockIdx.x)
        if PREFETCH:
            prefetch_groups(words, scales, g, stride, groups, lane, N, nw)
        elif PDL:
            allow_next_grid()
        if resident:
            # Activations once; then a two-stage pipeline over two register buffers, A and B
            # (the loop body is written out for both so that no buffer is ever copied): the
            # next group's loads are in flight while this group is folded.
            wv2 = cuda.local.array((C, U), uint64)
            sv2 = cuda.local.array((C, U), float32)
            zv2 = cuda.local.array((C, U), np.uint32)
            load_group(words, scales, zero_points, min(g, last) * np.uint32(C), U0,
                       lane, N, nw, nz, wv, sv, zv)
            if PDL:
                wait_for_previous_grid()
            if PREFETCH:
                allow_next_grid()
            load_activations(act, U0, lane, nw, pairs)
            while g < groups:
                g_next = g + stride
                load_group(words, scales, zero_points, min(g_next, last) * np.uint32(C), U0,
                           lane, N, nw, nz, wv2, sv2, zv2)
                fold_group(wv, sv, zv, pairs, acc)
                write_group(acc, g * np.uint32(C), lane, N, bias, has_bias, out)
                if g_next >= groups:
                    break
                g = g_next + stride
                load_group(words, scales, zero_points, min(g, last) * np.uint32(C), U0,
                           lane, N, nw, nz, wv, sv, zv)
                fold_group(wv2, sv2, zv2, pairs, acc)
                write_group(acc, g_next * np.uint32(C), lane, N, bias, has_bias, out)
        else:
            prefetched = PDL
            if PDL:  # the first chunk's weights are in flight while the previous grid ends
                load_group(words, scales, zero_points, g * np.uint32(C), U0, lane, N, nw, nz,
                           wv, sv, zv)
                wait_for_previous_grid()
                if PREFETCH:
                    allow_next_grid()
            while g < groups:
                n_first = g * np.uint32(C)
                for base in range(U0, nw, np.uint32(CHUNK)):
                    if not prefetched:
                        load_group(words, scales, zero_points, n_first, base, lane, N, nw, nz,
                                   wv, sv, zv)
                    prefetched = False
                    load_activations(act, base, lane, nw, pairs)
                    fold_group(wv, sv, zv, pairs, acc)
                write_group(acc, n_first, lane, N, bias, has_bias, out)
                g += stride

    return kernel
