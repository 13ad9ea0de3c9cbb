"""The default tiling's column-group end on CUDA cores: each column's partial sums reduced over
its lanes with shuffles, then the column's first lane writes its M outputs (+ bias). The
tensor-core folds end with :func:`.default_mma_batch.batch_mma_finish` instead (the ``mma``
already sums a column's lanes)."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from . import bf16
from .intrinsics import bf16_bits, shfl_xor

__all__ = ["lanes_finish", "output_access"]


def output_access(dtype):
    """``(bias_at, store)`` for outputs of ``dtype``: ``bias_at(bias, has_bias, n)`` is column
    ``n``'s bias as float32 (0 without one; bias float16, or uint16 bf16 bits);
    ``store(out, i, y)`` writes float32 ``y`` to ``out[i]`` (float16, or bf16 bits)."""
    F16 = dtype == "float16"

    @cuda.jit(device=True, inline=True)
    def bias_at(bias, has_bias, n):
        if not has_bias:
            return float32(0.0)
        return float32(bias[np.uint64(n)]) if F16 else bf16.low_value(np.uint32(bias[np.uint64(n)]))

    @cuda.jit(device=True, inline=True)
    def store(out, i, y):
        if F16:
            out[np.uint64(i)] = y
        else:
            out[np.uint64(i)] = bf16_bits(y)

    return bias_at, store


def lanes_finish(config, range_check):
    """``finish(acc, col0, s, N, bias, has_bias, out, unscale)`` of ``config`` (a
    :class:`~.default_config.DefaultConfig`): ``acc[m, c]`` (``m < M``, ``c < cols``) are this
    lane's sums of its columns ``col0 + c * (32 / lanes)``; ``s`` is the lane's chunk stripe
    (stripe 0 stores). With ``range_check`` (bf16 at M = 1) the sums are multiplied by
    ``unscale``, undoing the staged row's scale. Every lane of the warp calls it together (the
    shuffles); it leaves ``acc`` zeroed."""
    M, C, L = config.M, config.cols, config.lanes
    P, LOG_L = 32 // L, L.bit_length() - 1
    bias_at, store = output_access(config.dtype)

    @cuda.jit(device=True, inline=True)
    def finish(acc, col0, s, N, bias, has_bias, out, unscale):
        for m in range(M):
            for c in range(C):
                v = acc[m, c]
                for r in range(LOG_L):
                    v += shfl_xor(v, np.uint32(L >> (r + 1)))
                acc[m, c] = v
        if s == 0:
            for c in range(C):
                n = col0 + c * P
                if n < N:
                    b = bias_at(bias, has_bias, n)
                    for m in range(M):
                        store(out, m * N + n, (acc[m, c] * unscale if range_check else acc[m, c]) + b)
        for m in range(M):
            for c in range(C):
                acc[m, c] = float32(0.0)

    return finish
