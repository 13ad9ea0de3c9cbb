"""Single-warp specialization: one warp per block, ``cols`` columns per step, K unrolled.

For fp16 activations, block size 32, batch 1 and K a multiple of 32 (see
:func:`int4gemv.dispatch.single_warp_eligibility`). Lane ``l`` owns uint64 words
``l, l + 32, ..., l + 32*(unroll-1)`` of every column in a K chunk (16 nibbles each, half a
quantization group), so its 16 activations per word and their sum are loaded and converted once
and reused from registers for every column. Warps are persistent: block ``b`` takes column groups
``b, b + gridDim, ...`` of ``cols`` columns each.

Where the activations live (``activations``, chosen by :func:`activation_mode`):

* ``"shared"`` (``K <= SHARED_K_MAX``): the warp stages all K activations as float32, and one sum
  per uint64 word, in dynamic shared memory once; each column group then reads a lane's 16
  activations per word from shared memory (reused for all ``cols`` columns). Registers stay free
  for the load pipeline.
* ``"registers"`` (``K <= 512 * unroll``): the lane's activations stay in registers for the
  warp's lifetime (68 registers at unroll 4; fewer warps fit).
* ``"streaming"`` (any K): K is walked in chunks of ``512 * unroll`` and the chunk's activations
  are reloaded from global memory for each column group.

Per column group a lane issues all ``cols * unroll`` 8-byte weight loads (coalesced) and their
scales before using any (in resident mode, one group ahead: the next group's loads are in flight
while the current one is folded), folds each uint64 with two :func:`~int4gemv.kernels.nibbles.dot8`, and a
warp-shuffle reduction per column finishes; lane 0 writes the outputs (+ bias).

Index arithmetic is unsigned (no negative-index wraparound code) and loads are branch-free: an
out-of-range word or column is clamped to a valid address and its scale is zeroed, so it adds 0.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, uint64

from .intrinsics import warp_sum
from .nibbles import NIBBLE_SCALE, dot8

__all__ = ["single_warp_kernel", "geometry", "activation_mode", "shared_bytes", "TUNINGS",
           "DEFAULT_TUNING", "BLOCKS_PER_SM", "SHARED_K_MAX", "MODES"]

#: (cols, unroll) pairs the dispatcher accepts; each is compiled on first use.
TUNINGS = tuple((c, u) for c in (1, 2, 4, 8) for u in (1, 2, 4, 8) if c * u <= 32)
#: Default (cols, unroll), chosen by measurement on the H200: the smallest sum of graph-replay
#: times over one Qwen3-VL-2B decode step's projections (bench/NOTES.md). ``auto`` tunes per shape.
DEFAULT_TUNING = (4, 2)
#: Persistent grid: at most this many one-warp blocks per multiprocessor.
BLOCKS_PER_SM = 32


#: Largest K whose activations (+ word sums) are staged in shared memory: 8192 * 4.25 B = 34 KB,
#: under the 48 KB a launch may ask for without opting in.
SHARED_K_MAX = 8192
MODES = ("shared", "registers", "streaming")
#: The preferred mode where it applies. "registers" measured faster than "shared" on every
#: workload shape on the H200 (bench/NOTES.md); tests and benchmarks may set it.
PREFERRED = "registers"


def activation_mode(K: int, unroll: int, preferred: str | None = None) -> str:
    """Where the activations live for this K (see the module docstring)."""
    preferred = PREFERRED if preferred is None else preferred
    if preferred == "shared" and K <= SHARED_K_MAX:
        return "shared"
    if preferred in ("shared", "registers") and K <= 512 * unroll:
        return "registers"
    return "streaming"


def shared_bytes(K: int, mode: str) -> int:
    """Dynamic shared memory per block: K float32 activations and K/16 word sums."""
    return 4 * (K + K // 16) if mode == "shared" else 0


def geometry(N: int, cols: int, multiprocessors: int):
    """``(grid, block)``: one-warp blocks, at most ``BLOCKS_PER_SM`` per SM."""
    groups = -(-N // cols)
    return (max(1, min(groups, BLOCKS_PER_SM * multiprocessors)), 1, 1), (32, 1, 1)


@functools.lru_cache(maxsize=None)
def single_warp_kernel(cols: int, unroll: int, mode: str, zero_points: bool = True):
    """The kernel for one ``(cols, unroll)`` tuning, activation mode and zero-point presence
    (a compile-time choice: without zero points the offset is the constant ``1 + 8/128``),
    compiled on first launch. Its ``has_zp`` argument must equal ``zero_points``."""
    if (cols, unroll) not in TUNINGS:
        raise ValueError(f"(cols, unroll) must be one of {TUNINGS}; got {(cols, unroll)}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    resident = mode == "registers"
    shared = mode == "shared"
    ZP = bool(zero_points)
    NO_ZP_OFFSET = float32(1.0 + 8.0 / NIBBLE_SCALE)
    C, U = cols, unroll
    CHUNK = 32 * U  # uint64 words of one column per K chunk
    ZERO, ONE, TWO, FOUR = uint64(0), uint64(1), uint64(2), uint64(4)

    @cuda.jit(device=True, inline=True)
    def load_activations(a, base, lane, nw, xa, asum):
        for u in range(U):
            j = min(base + lane + uint64(32 * u), nw - ONE)
            s = float32(0.0)
            for e in range(16):
                v = float32(a[(j << FOUR) + uint64(e)])
                xa[u, e] = v
                s += v
            asum[u] = s

    @cuda.jit(device=True, inline=True)
    def load_group(words, scales, zero_points, n_first, base, lane, N, nw, ng, nz, wv, sv, ov):
        """Issue the weight, scale (and zero-point) loads of C columns x U words."""
        full = base + uint64(CHUNK) <= nw  # warp-uniform: no word of this chunk is past K
        for c in range(C):
            n_c = min(n_first + uint64(c), N - ONE)
            if full:  # one row offset per column; the U words are immediate offsets from it
                w_row = n_c * nw + base + lane
                s_row = n_c * ng + ((base + lane) >> ONE)
                for u in range(U):
                    wv[c, u] = words[w_row + uint64(32 * u)]
                    sv[c, u] = float32(scales[s_row + uint64(16 * u)])
            else:  # the ragged last chunk: clamp the address, zero the scale
                for u in range(U):
                    j_raw = base + lane + uint64(32 * u)
                    j = min(j_raw, nw - ONE)
                    wv[c, u] = words[n_c * nw + j]
                    s = float32(scales[n_c * ng + (j >> ONE)])
                    sv[c, u] = s if j_raw < nw else float32(0.0)
            if ZP:
                for u in range(U):
                    j = min(base + lane + uint64(32 * u), nw - ONE)
                    byte = uint64(zero_points[n_c * nz + (j >> TWO)])
                    zp = float32((byte >> (((j >> ONE) & ONE) << TWO)) & uint64(15))
                    ov[c, u] = float32(1.0) + zp * float32(1.0 / NIBBLE_SCALE)

    @cuda.jit(device=True, inline=True)
    def fold_group(wv, sv, ov, xa, asum, acc):
        """acc[c] += sum over this lane's words of scale * (dot - offset * activation sum)."""
        for c in range(C):
            for u in range(U):
                w = wv[c, u]
                lo = np.uint32(w & uint64(0xFFFFFFFF))
                hi = np.uint32(w >> uint64(32))
                x = dot8(lo, xa[u, 0], xa[u, 1], xa[u, 2], xa[u, 3],
                         xa[u, 4], xa[u, 5], xa[u, 6], xa[u, 7])
                x += dot8(hi, xa[u, 8], xa[u, 9], xa[u, 10], xa[u, 11],
                          xa[u, 12], xa[u, 13], xa[u, 14], xa[u, 15])
                off = ov[c, u] if ZP else NO_ZP_OFFSET
                acc[c] += sv[c, u] * (x - off * asum[u])

    @cuda.jit(device=True, inline=True)
    def fold_group_shared(wv, sv, ov, s_a, K, base, lane, nw, xa, acc):
        """fold_group with a lane's activations read from shared memory, one word at a time."""
        for u in range(U):
            j = min(base + lane + uint64(32 * u), nw - ONE)
            b = j << FOUR
            for e in range(16):
                xa[0, e] = s_a[b + uint64(e)]
            word_sum = s_a[uint64(K) + j]
            for c in range(C):
                w = wv[c, u]
                lo = np.uint32(w & uint64(0xFFFFFFFF))
                hi = np.uint32(w >> uint64(32))
                x = dot8(lo, xa[0, 0], xa[0, 1], xa[0, 2], xa[0, 3],
                         xa[0, 4], xa[0, 5], xa[0, 6], xa[0, 7])
                x += dot8(hi, xa[0, 8], xa[0, 9], xa[0, 10], xa[0, 11],
                          xa[0, 12], xa[0, 13], xa[0, 14], xa[0, 15])
                off = ov[c, u] if ZP else NO_ZP_OFFSET
                acc[c] += sv[c, u] * (x - off * word_sum)

    @cuda.jit(device=True, inline=True)
    def take_next(nxt_w, nxt_s, nxt_o, wv, sv, ov, acc):
        """Make the prefetched group current and clear the accumulators."""
        for c in range(C):
            acc[c] = float32(0.0)
            for u in range(U):
                wv[c, u] = nxt_w[c, u]
                sv[c, u] = nxt_s[c, u]
                if ZP:
                    ov[c, u] = nxt_o[c, u]

    @cuda.jit(device=True, inline=True)
    def write_group(acc, n_first, lane, N, bias, has_bias, out):
        """Reduce each column over the warp; lane 0 writes them (+ bias)."""
        for c in range(C):
            total = warp_sum(acc[c]) * float32(NIBBLE_SCALE)
            n = n_first + uint64(c)
            if lane == ZERO and n < N:
                if has_bias:
                    total += float32(bias[n])
                out[n] = total

    @cuda.jit
    def kernel(a, words, scales, zero_points, has_zp, bias, has_bias, out, K):
        """a: fp16 [K]; words: uint64 [N * K/16]; scales: fp16 [N * K/32];
        zero_points: uint8 [N * ceil(K/64)]; bias: fp16 [N]; out: fp16 [N]."""
        lane = uint64(cuda.threadIdx.x)
        N = uint64(out.shape[0])
        nw = uint64(K) >> FOUR       # uint64 words per column
        ng = nw >> ONE               # quantization groups per column
        nz = (ng + ONE) >> ONE       # zero-point bytes per column
        groups = (N + uint64(C - 1)) // uint64(C)
        stride = uint64(cuda.gridDim.x)
        acc = cuda.local.array(C, float32)
        wv = cuda.local.array((C, U), uint64)
        sv = cuda.local.array((C, U), float32)
        ov = cuda.local.array((C, U), float32)
        xa = cuda.local.array((U, 16), float32)
        asum = cuda.local.array(U, float32)
        g = uint64(cuda.blockIdx.x)
        if shared or resident:
            nxt_w = cuda.local.array((C, U), uint64)
            nxt_s = cuda.local.array((C, U), float32)
            nxt_o = cuda.local.array((C, U), float32)
        if shared:
            # Stage all activations (float32) and one sum per uint64 word, once per warp.
            s_a = cuda.shared.array(0, float32)
            for i in range(lane, uint64(K), uint64(32)):
                s_a[i] = float32(a[i])
            cuda.syncthreads()
            for j in range(lane, nw, uint64(32)):
                t = float32(0.0)
                for e in range(16):
                    t += s_a[(j << FOUR) + uint64(e)]
                s_a[uint64(K) + j] = t
            cuda.syncthreads()
            load_group(words, scales, zero_points, min(g, groups - ONE) * uint64(C), ZERO,
                       lane, N, nw, ng, nz, nxt_w, nxt_s, nxt_o)
            while g < groups:
                take_next(nxt_w, nxt_s, nxt_o, wv, sv, ov, acc)
                g_next = g + stride
                load_group(words, scales, zero_points, min(g_next, groups - ONE) * uint64(C),
                           ZERO, lane, N, nw, ng, nz, nxt_w, nxt_s, nxt_o)
                for base in range(ZERO, nw, uint64(CHUNK)):
                    if base > ZERO:  # K > 512 * unroll: the next chunk's words, not pipelined
                        load_group(words, scales, zero_points, g * uint64(C), base, lane,
                                   N, nw, ng, nz, wv, sv, ov)
                    fold_group_shared(wv, sv, ov, s_a, K, base, lane, nw, xa, acc)
                write_group(acc, g * uint64(C), lane, N, bias, has_bias, out)
                g = g_next
        elif resident:
            # Activations once; then a two-stage pipeline: the next group's loads are in
            # flight while this group is folded.
            load_activations(a, ZERO, lane, nw, xa, asum)
            load_group(words, scales, zero_points, min(g, groups - ONE) * uint64(C), ZERO,
                       lane, N, nw, ng, nz, nxt_w, nxt_s, nxt_o)
            while g < groups:
                take_next(nxt_w, nxt_s, nxt_o, wv, sv, ov, acc)
                g_next = g + stride
                load_group(words, scales, zero_points, min(g_next, groups - ONE) * uint64(C),
                           ZERO, lane, N, nw, ng, nz, nxt_w, nxt_s, nxt_o)
                fold_group(wv, sv, ov, xa, asum, acc)
                write_group(acc, g * uint64(C), lane, N, bias, has_bias, out)
                g = g_next
        else:
            while g < groups:
                n_first = g * uint64(C)
                for c in range(C):
                    acc[c] = float32(0.0)
                for base in range(ZERO, nw, uint64(CHUNK)):
                    load_activations(a, base, lane, nw, xa, asum)
                    load_group(words, scales, zero_points, n_first, base, lane, N, nw,
                               ng, nz, wv, sv, ov)
                    fold_group(wv, sv, ov, xa, asum, acc)
                write_group(acc, n_first, lane, N, bias, has_bias, out)
                g += stride

    return kernel
