"""Default tiling: one warp per output column, 8 columns (256 threads) per block.

Works for every supported shape: block sizes 16/32/64/128, zero points, bias, any N, any K that
is a multiple of 8, any batch M (``grid.y``). K is walked in tiles of ``TILE_K`` elements:

1. the block stages the tile's activations (float32), their sums per 8-element word, and the
   8 columns' scales (times 128) and zero-point offsets into shared memory;
2. each warp streams its column's uint32 words (8 nibbles, one word per lane per step, two
   words in flight per lane) and folds each word with :func:`~int4gemv.kernels.nibbles.dot8`;
3. a warp-shuffle reduction gives the column's sum; lane 0 adds the bias and writes fp16.

Columns past N are clamped for loads and never stored; words past K are never read.
"""

from __future__ import annotations

from numba import cuda, float32, uint64

from .intrinsics import warp_sum
from .nibbles import NIBBLE_SCALE, dot8

__all__ = ["default_kernel", "geometry", "COLS_PER_BLOCK", "THREADS", "TILE_K", "SHARED_BYTES"]

COLS_PER_BLOCK = 8                  # one warp per column
THREADS = 32 * COLS_PER_BLOCK       # 256
TILE_K = 1024                       # activations staged per tile (multiple of every block size)
TILE_WORDS = TILE_K // 8
TILE_GROUPS = TILE_K // 16          # most groups in a tile (block size 16)
SHARED_BYTES = 4 * (TILE_K + TILE_WORDS + 2 * COLS_PER_BLOCK * TILE_GROUPS)


def geometry(M: int, N: int):
    """``(grid, block, shared_bytes)`` for an ``[M, K] x [N, K]^T`` product."""
    return (-(-N // COLS_PER_BLOCK), M, 1), (THREADS, 1, 1), SHARED_BYTES


@cuda.jit
def default_kernel(a, words, flat_words, scales, zero_points, has_zp, bias, has_bias, out, K,
                   block_size):
    """``out[m, n] = sum_k a[m, k] * (q[n, k] - zp) * scale + bias[n]``.

    a: fp16 [M, K]; words: uint32 [N, ceil(K/bs)*bs/8] and flat_words, the same as 1-D; scales: fp16 [N, ceil(K/bs)];
    zero_points: uint8 [N, ceil(ceil(K/bs)/2)] (read only if has_zp); bias: fp16 [N] (read only
    if has_bias); out: fp16 [M, N].
    """
    s_a = cuda.shared.array(TILE_K, float32)
    s_asum = cuda.shared.array(TILE_WORDS, float32)
    s_scale = cuda.shared.array((COLS_PER_BLOCK, TILE_GROUPS), float32)
    s_offset = cuda.shared.array((COLS_PER_BLOCK, TILE_GROUPS), float32)

    tid = cuda.threadIdx.x
    warp = tid // 32
    lane = tid % 32
    m = cuda.blockIdx.y
    n_first = cuda.blockIdx.x * COLS_PER_BLOCK
    N = out.shape[1]
    n_load = min(n_first + warp, N - 1)
    words_per_group = block_size // 8
    acc = float32(0.0)

    for k0 in range(0, K, TILE_K):
        kt = min(TILE_K, K - k0)
        nwords = kt // 8
        g0 = k0 // block_size
        ngroups = (kt + block_size - 1) // block_size

        # Phase 1: stage activations, scales (x128) and zero-point offsets.
        for i in range(tid, kt, THREADS):
            s_a[i] = float32(a[m, k0 + i])
        for i in range(tid, COLS_PER_BLOCK * ngroups, THREADS):
            c = i // ngroups
            g = i - c * ngroups
            n_c = min(n_first + c, N - 1)
            zp = float32(8.0)
            if has_zp:
                byte = zero_points[n_c, (g0 + g) // 2]
                zp = float32((byte >> (4 * ((g0 + g) % 2))) & 15)
            s_scale[c, g] = float32(scales[n_c, g0 + g]) * float32(NIBBLE_SCALE)
            s_offset[c, g] = float32(1.0) + zp / float32(NIBBLE_SCALE)
        cuda.syncthreads()
        for j in range(tid, nwords, THREADS):
            b = 8 * j
            s_asum[j] = (s_a[b] + s_a[b + 1] + s_a[b + 2] + s_a[b + 3]
                         + s_a[b + 4] + s_a[b + 5] + s_a[b + 6] + s_a[b + 7])
        cuda.syncthreads()

        # Phase 2: this warp's column, one word per lane per step, two steps in flight.
        # Unsigned indices: no negative-index wraparound code on the hot path.
        row = uint64(n_load) * uint64(words.shape[1]) + uint64(k0 // 8)
        nw = uint64(nwords)
        wpg = uint64(words_per_group)
        for j in range(uint64(lane), nw, uint64(64)):
            j1 = j + uint64(32)
            w0 = flat_words[row + j]
            w1 = flat_words[row + min(j1, nw - uint64(1))]
            b = j << uint64(3)
            x = dot8(w0, s_a[b], s_a[b + uint64(1)], s_a[b + uint64(2)], s_a[b + uint64(3)],
                     s_a[b + uint64(4)], s_a[b + uint64(5)], s_a[b + uint64(6)], s_a[b + uint64(7)])
            g = j // wpg
            acc += s_scale[warp, g] * (x - s_offset[warp, g] * s_asum[j])
            if j1 < nw:
                b = j1 << uint64(3)
                x = dot8(w1, s_a[b], s_a[b + uint64(1)], s_a[b + uint64(2)], s_a[b + uint64(3)],
                         s_a[b + uint64(4)], s_a[b + uint64(5)], s_a[b + uint64(6)],
                         s_a[b + uint64(7)])
                g = j1 // wpg
                acc += s_scale[warp, g] * (x - s_offset[warp, g] * s_asum[j1])
        cuda.syncthreads()  # the next tile overwrites shared memory

    # Phase 3: reduce the warp's partial sums; lane 0 writes the column.
    acc = warp_sum(acc)
    n = n_first + warp
    if lane == 0 and n < N:
        if has_bias:
            acc += float32(bias[n])
        out[m, n] = acc
