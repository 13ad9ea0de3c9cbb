"""The transposing butterfly: a warp's per-lane partial sums of ``C`` columns, reduced over the
warp so that each column's total ends in the lanes of one group.

At step ``s`` (lane bit ``16 >> s``) each lane keeps half of its columns and sends the other half
to its partner, so ``C`` columns cost ``C - 1 + 5 - log2(C)`` shuffles instead of ``5 C``. After
the reduction lane ``l`` holds the total of column :func:`column_sums`'s ``column(l)``; the lanes
whose low ``5 - log2(C)`` bits are clear (``lane & writers == 0``) hold each column once.
Used by the single-warp kernel's column groups and the decode chain's split-K down projection.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from .intrinsics import shfl_xor

__all__ = ["column_sums", "writer_mask"]


def writer_mask(cols: int) -> np.uint32:
    """Lane bits that are clear in exactly one lane per column after :func:`column_sums`."""
    return np.uint32((32 >> (int(cols).bit_length() - 1)) - 1)


@functools.lru_cache(maxsize=None)
def column_sums(cols: int):
    """A device function ``reduce(acc, lane) -> (total, column)`` for ``cols`` columns (a power
    of two, 1..32): ``acc`` is the lane's ``float32[cols]`` partial sums (overwritten as scratch),
    ``lane`` its lane index as uint32; returns the lane's column total and that column's index."""
    C = int(cols)
    if C & (C - 1) or not 1 <= C <= 32:
        raise ValueError(f"cols must be a power of two in 1..32; got {cols}")
    S = C.bit_length() - 1
    U0 = np.uint32(0)

    @cuda.jit(device=True, inline=True)
    def reduce(acc, lane):
        for s in range(S):
            off = np.uint32(16 >> s)
            half = C >> (s + 1)
            upper = (lane & off) != U0
            for i in range(half):
                send = acc[i] if upper else acc[i + half]
                keep = acc[i + half] if upper else acc[i]
                acc[i] = keep + shfl_xor(send, off)
        total = acc[0]
        for r in range(5 - S):
            total += shfl_xor(total, np.uint32(16 >> (S + r)))
        column = U0
        for s in range(S):
            if lane & np.uint32(16 >> s):
                column += np.uint32(C >> (s + 1))
        return total, column

    return reduce
