"""Single-warp specialization: one warp per block, ``cols`` columns per step, K unrolled.

For fp16 activations, block size 32, batch 1 and K a multiple of 32 (see
:func:`int4gemv.dispatch.single_warp_eligibility`). Lane ``l`` owns uint64 words
``l, l + 32, ..., l + 32*(unroll-1)`` of every column in a K chunk (16 nibbles each, half a
quantization group), so its 16 activations per word and their sum are loaded and converted once
and reused from registers for every column. Warps are persistent: block ``b`` takes column groups
``b, b + gridDim, ...`` of ``cols`` columns each.

* *resident* (``K <= 512 * unroll``): the whole activation vector lives in registers for the
  warp's lifetime; each column group costs only its weight and scale loads.
* *streaming* (larger K): K is walked in chunks of ``512 * unroll`` and the chunk's activations
  are reloaded for each column group.

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

__all__ = ["single_warp_kernel", "geometry", "is_resident", "TUNINGS", "DEFAULT_TUNING",
           "BLOCKS_PER_SM"]

#: (cols, unroll) pairs the dispatcher accepts; each is compiled on first use.
TUNINGS = tuple((c, u) for c in (1, 2, 4, 8) for u in (1, 2, 4, 8) if c * u <= 32)
#: Default (cols, unroll), chosen by measurement on the H200 (bench/NOTES.md).
DEFAULT_TUNING = (2, 4)
#: Persistent grid: at most this many one-warp blocks per multiprocessor.
BLOCKS_PER_SM = 32


def is_resident(K: int, unroll: int) -> bool:
    """Whether the whole activation vector fits the registers of one lane's words."""
    return K <= 512 * unroll


def geometry(N: int, cols: int, multiprocessors: int):
    """``(grid, block, shared_bytes)``: one-warp blocks, at most ``BLOCKS_PER_SM`` per SM."""
    groups = -(-N // cols)
    return (max(1, min(groups, BLOCKS_PER_SM * multiprocessors)), 1, 1), (32, 1, 1), 0


@functools.lru_cache(maxsize=None)
def single_warp_kernel(cols: int, unroll: int, resident: bool):
    """The kernel for one ``(cols, unroll)`` tuning and mode, compiled lazily on first launch."""
    if (cols, unroll) not in TUNINGS:
        raise ValueError(f"(cols, unroll) must be one of {TUNINGS}; got {(cols, unroll)}")
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
    def load_group(words, scales, zero_points, has_zp, n_first, base, lane, N, nw, ng, nz,
                   wv, sv, ov):
        """Issue the weight, scale (and zero-point) loads of C columns x U words."""
        for c in range(C):
            n_c = min(n_first + uint64(c), N - ONE)
            for u in range(U):
                j_raw = base + lane + uint64(32 * u)
                j = min(j_raw, nw - ONE)
                wv[c, u] = words[n_c * nw + j]
                s = float32(scales[n_c * ng + (j >> ONE)])
                sv[c, u] = s if j_raw < nw else float32(0.0)
                zp = float32(8.0)
                if has_zp:
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
                acc[c] += sv[c, u] * (x - ov[c, u] * asum[u])

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
        if resident:
            # Activations once; then a two-stage pipeline: the next group's loads are in
            # flight while this group is folded.
            nxt_w = cuda.local.array((C, U), uint64)
            nxt_s = cuda.local.array((C, U), float32)
            nxt_o = cuda.local.array((C, U), float32)
            load_activations(a, ZERO, lane, nw, xa, asum)
            load_group(words, scales, zero_points, has_zp, min(g, groups - ONE) * uint64(C), ZERO,
                       lane, N, nw, ng, nz, nxt_w, nxt_s, nxt_o)
            while g < groups:
                for c in range(C):
                    acc[c] = float32(0.0)
                    for u in range(U):
                        wv[c, u] = nxt_w[c, u]
                        sv[c, u] = nxt_s[c, u]
                        ov[c, u] = nxt_o[c, u]
                g_next = g + stride
                load_group(words, scales, zero_points, has_zp,
                           min(g_next, groups - ONE) * uint64(C), ZERO, lane, N, nw, ng, nz,
                           nxt_w, nxt_s, nxt_o)
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
                    load_group(words, scales, zero_points, has_zp, n_first, base, lane, N, nw,
                               ng, nz, wv, sv, ov)
                    fold_group(wv, sv, ov, xa, asum, acc)
                write_group(acc, n_first, lane, N, bias, has_bias, out)
                g += stride

    return kernel
