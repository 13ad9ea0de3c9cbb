"""Single-warp specialization: one warp per block, ``cols`` columns per warp, K unrolled.

For fp16 activations, block size 32, batch 1 and K a multiple of 32 (see
:func:`int4gemv.dispatch.single_warp_eligibility`). Each lane owns the same ``unroll`` uint64
words (16 nibbles, half a quantization group) of every column the warp computes, so it loads and
converts their 16 activations and their sum once and reuses them from registers for all ``cols``
columns. Per K chunk of ``512 * unroll`` elements a lane:

1. issues every weight word (``cols * unroll`` 8-byte loads, coalesced: lane-consecutive words)
   and its scale before using any of them;
2. loads its ``16 * unroll`` activations as float32 and their per-word sums;
3. folds each word with :func:`~int4gemv.kernels.nibbles.dot8` (two per uint64) into a float32
   accumulator per column.

A warp-shuffle reduction per column finishes; lane 0 writes the ``cols`` outputs (+ bias).
Columns past N are clamped for loads and never stored; words past K are masked to zero.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, uint64

from .intrinsics import warp_sum
from .nibbles import NIBBLE_SCALE, dot8

__all__ = ["single_warp_kernel", "geometry", "TUNINGS", "DEFAULT_TUNING"]

#: (cols, unroll) pairs that are compiled on demand; the dispatcher accepts only these.
TUNINGS = tuple((c, u) for c in (1, 2, 4, 8) for u in (1, 2, 4, 8) if c * u <= 32)
#: Default (cols, unroll), chosen by measurement on the H200 (bench/NOTES.md).
DEFAULT_TUNING = (4, 4)


def geometry(N: int, cols: int):
    """``(grid, block, shared_bytes)``: one 32-thread block per ``cols`` columns."""
    return (-(-N // cols), 1, 1), (32, 1, 1), 0


@functools.lru_cache(maxsize=None)
def single_warp_kernel(cols: int, unroll: int):
    """The kernel for one ``(cols, unroll)`` tuning, compiled lazily on first launch."""
    if (cols, unroll) not in TUNINGS:
        raise ValueError(f"(cols, unroll) must be one of {TUNINGS}; got {(cols, unroll)}")
    C, U = cols, unroll
    CHUNK = 32 * U  # uint64 words of one column per K chunk

    @cuda.jit
    def kernel(a, words, scales, zero_points, has_zp, bias, has_bias, out, K):
        """a: fp16 [1, K]; words: uint64 [N, K/16]; scales: fp16 [N, K/32];
        zero_points: uint8 [N, ceil(K/64)]; bias: fp16 [N]; out: fp16 [1, N]."""
        lane = cuda.threadIdx.x
        n_first = cuda.blockIdx.x * C
        N = out.shape[1]
        nw = K // 16
        acc = cuda.local.array(C, float32)
        wv = cuda.local.array((C, U), uint64)
        sv = cuda.local.array((C, U), float32)
        ov = cuda.local.array((C, U), float32)
        xa = cuda.local.array((U, 16), float32)
        asum = cuda.local.array(U, float32)
        for c in range(C):
            acc[c] = float32(0.0)

        for base in range(0, nw, CHUNK):
            # 1. Issue all weight and scale loads of this chunk before any use.
            for c in range(C):
                n_c = min(n_first + c, N - 1)
                for u in range(U):
                    j = base + lane + 32 * u
                    if j < nw:
                        wv[c, u] = words[n_c, j]
                        sv[c, u] = float32(scales[n_c, j // 2])
                    else:
                        wv[c, u] = uint64(0)
                        sv[c, u] = float32(0.0)
                    zp = float32(8.0)
                    if has_zp and j < nw:
                        byte = zero_points[n_c, j // 4]
                        zp = float32((byte >> (4 * ((j // 2) % 2))) & 15)
                    ov[c, u] = float32(1.0) + zp / float32(NIBBLE_SCALE)
            # 2. This lane's activations (shared by all C columns) and their sums.
            for u in range(U):
                j = base + lane + 32 * u
                s = float32(0.0)
                for e in range(16):
                    v = float32(a[0, 16 * j + e]) if j < nw else float32(0.0)
                    xa[u, e] = v
                    s += v
                asum[u] = s
            # 3. Fold every word into its column's accumulator.
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

        # 4. Reduce each column over the warp; lane 0 writes them.
        for c in range(C):
            total = warp_sum(acc[c]) * float32(NIBBLE_SCALE)
            n = n_first + c
            if lane == 0 and n < N:
                if has_bias:
                    total += float32(bias[n])
                out[0, n] = total

    return kernel
