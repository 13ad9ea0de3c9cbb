"""Bit and warp primitives the kernels use, with faithful stand-ins for Numba's CUDA simulator.

On hardware these are libdevice / warp intrinsics. Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``)
has no warp shuffles and its libdevice functions are empty, so the same kernel source would not
run there. The simulated versions below implement the hardware semantics for a whole block that
calls them uniformly (which every kernel here does): ``shfl_down`` reads lane ``lane + delta`` of
the same warp and returns the caller's own value when that lane is past the warp's end.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import config, cuda

__all__ = ["int_as_float", "shfl_down", "warp_sum", "FULL_MASK", "SIMULATED"]

FULL_MASK = 0xFFFFFFFF
SIMULATED = bool(config.ENABLE_CUDASIM)

if SIMULATED:

    def int_as_float(x):
        """Reinterpret the bits of an int32 as a float32."""
        return np.array(x, dtype=np.int64).astype(np.uint32).view(np.float32)[()]

    def shfl_down(value, delta):
        """``shfl_down_sync(FULL_MASK, value, delta)`` for a block of simulator threads."""
        me = threading.current_thread()
        slots = me._manager.__dict__.setdefault("_int4gemv_shfl_slots", {})
        tid = me.thread_id
        slots[tid] = value
        me.syncthreads()  # every lane of the block has published its value
        src = tid + delta if (tid % 32) + delta < 32 else tid
        result = slots[src]
        me.syncthreads()  # every lane has read before anyone publishes again
        return result

else:
    from numba.cuda.libdevice import int_as_float  # noqa: F401

    @cuda.jit(device=True, inline=True)
    def shfl_down(value, delta):
        return cuda.shfl_down_sync(FULL_MASK, value, delta)


@cuda.jit(device=True, inline=True)
def warp_sum(value):
    """Sum ``value`` over the 32 lanes of a warp; lane 0 receives the total."""
    value += shfl_down(value, 16)
    value += shfl_down(value, 8)
    value += shfl_down(value, 4)
    value += shfl_down(value, 2)
    value += shfl_down(value, 1)
    return value
