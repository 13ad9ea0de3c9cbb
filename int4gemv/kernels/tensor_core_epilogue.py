"""The tensor-core kernel's epilogue: the split-K sum of a column group's partial sums and the
output store (+ bias), in a fixed order (no atomics: the result does not depend on timing).

Accumulator slot ``j = (c * row_tiles + mt) * 4 + r`` of a lane ``(g, t)`` is ``acc[c, mt, r]``:
``mma`` D fragment ``r`` of tile ``c`` and row tile ``mt`` (d0, d1: column g, rows 2t, 2t + 1;
d2, d3: column g + 8), see :mod:`.tensor_core_step`.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from . import bf16
from .intrinsics import bf16_bits
from .tensor_core_config import TILE_COLS

__all__ = ["split_k_epilogue"]

_U = np.uint64
_U2, _U8, _UTILE = _U(2), _U(8), _U(TILE_COLS)


@functools.lru_cache(maxsize=None)
def split_k_epilogue(f16: bool, row_tiles: int, tiles: int, ksplit: int):
    """The device function ``reduce_and_store(red, acc, warp, lane, kpart, stores, col0, g, t,
    N, M, bias, has_bias, out)`` of a kernel with ``tiles`` column tiles, ``row_tiles`` 8-row
    tiles and ``ksplit`` warps per column group (``red``: float32 shared ``[warps, slots, 32]``
    when ``ksplit > 1``); ``f16`` selects fp16 (else bf16 bits) for ``bias`` and ``out``."""
    F16, MT, C, KS = bool(f16), int(row_tiles), int(tiles), int(ksplit)
    SLOTS_PER_WARP = C * MT * 4

    @cuda.jit(device=True, inline=True)
    def store_slot(y, j, col0, g, t, N, M, bias, has_bias, out):
        """Write accumulator slot ``j`` (``acc[c, mt, r]``, ``j = (c * MT + mt) * 4 + r``) of the
        group (+ bias): d0, d1 are column g, d2, d3 column g + 8."""
        c, mt, r = j // (4 * MT), (j // 4) % MT, j % 4
        n = col0 + _UTILE * _U(c) + g + _U8 * _U(r // 2)
        m = _U8 * _U(mt) + _U2 * t + _U(r & 1)
        if n < N and m < M:
            if has_bias:
                y += float32(bias[n]) if F16 else bf16.low_value(np.uint32(bias[n]))
            if F16:
                out[m * N + n] = y
            else:
                out[m * N + n] = bf16_bits(y)

    @cuda.jit(device=True, inline=True)
    def reduce_and_store(red, acc, warp, lane, kpart, stores, col0, g, t, N, M, bias, has_bias,
                         out):
        """Add the ``KS`` warps' partial sums of a column group and write them (where
        ``stores``). Split-K: every warp publishes its sums in shared memory; slot ``j`` is then
        summed in ``kpart`` order (a fixed order: the result does not depend on timing) by warp
        ``kpart == j % KS`` of the group, which writes it — the ``4 x row tiles x tiles`` sums
        spread over the group's warps instead of one warp doing all. Block-uniform."""
        if KS == 1:
            if stores:
                for j in range(SLOTS_PER_WARP):
                    store_slot(acc[j // (4 * MT), (j // 4) % MT, j % 4], j, col0, g, t, N, M,
                               bias, has_bias, out)
            return
        for c in range(C):
            for mt in range(MT):
                for r in range(4):
                    red[warp, (c * MT + mt) * 4 + r, lane] = acc[c, mt, r]
        cuda.syncthreads()
        first = warp - kpart                    # the group's kpart-0 warp
        for j in range(SLOTS_PER_WARP):
            if stores and _U(j % KS) == kpart:  # warp-uniform
                y = red[first, j, lane]
                for q in range(1, KS):
                    y += red[first + _U(q), j, lane]
                store_slot(y, j, col0, g, t, N, M, bias, has_bias, out)
        cuda.syncthreads()                      # before the next round overwrites red

    return reduce_and_store
