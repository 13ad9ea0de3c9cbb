"""bf16 bit conversions for the default tiling's bf16 path.

bf16 values travel as their uint16 bits (Numba has no bf16 type). A uint32 holding two bf16,
``(x0 in bits 0..15, x1 in bits 16..31)``, gives its float32 values with one instruction each:
``x << 16`` and ``x & 0xFFFF0000``. :func:`to_bf16_bits` rounds a float32 to bf16 bits
(round to nearest, ties to even; NaN stays NaN).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import SIMULATED, int_as_float

__all__ = ["low_value", "high_value", "to_bf16_bits"]

_HIGH = np.uint32(0xFFFF0000)

if SIMULATED:

    def _float_bits(x):
        return np.array([x], dtype=np.float32).view(np.uint32)[0]

else:
    from numba.cuda.libdevice import float_as_int

    @cuda.jit(device=True, inline=True)
    def _float_bits(x):
        return np.uint32(float_as_int(x))


@cuda.jit(device=True, inline=True)
def low_value(x):
    """float32 value of the bf16 in bits 0..15 of uint32 ``x``."""
    return int_as_float(np.int32(x << np.uint32(16)))


@cuda.jit(device=True, inline=True)
def high_value(x):
    """float32 value of the bf16 in bits 16..31 of uint32 ``x``."""
    return int_as_float(np.int32(x & _HIGH))


@cuda.jit(device=True, inline=True)
def to_bf16_bits(x):
    """bf16 bits (uint16) of float32 ``x``, rounded to nearest, ties to even."""
    u = _float_bits(x)
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):  # NaN: keep it a (quiet) NaN
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    u = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(u >> np.uint32(16))
