"""bf16 bit conversions for the default tiling's bf16 path.

bf16 values travel as their uint16 bits (Numba has no bf16 type). A uint32 holding two bf16,
``(x0 in bits 0..15, x1 in bits 16..31)``, gives its float32 values with one instruction each:
``x << 16`` and ``x & 0xFFFF0000``; a float32 becomes bf16 bits through
:func:`.intrinsics.bf16_bits` (``cvt.rn.bf16.f32``: round to nearest, ties to even).

The M = 1 loop of the default tiling runs bf16 through its fp16 arithmetic on a row scaled by a
power of two: with ``2**s`` chosen from the row's largest magnitude (:func:`row_scales`) so that
``2**s * max |a|`` lies in ``[128, 256)``, every scaled value converts to fp16 (:func:`half_pairs`)
exactly down to ``2**-17`` and with an absolute error below ``2**-25`` (that is, ``2**-32 * max |a|``
unscaled) under it, and 8 products ``a * (q - zp)`` with ``|q - zp| <= 15`` sum to at most
30720 < 65504 (fp16's largest), so no half2 partial sum overflows. The float32 results are
multiplied by ``2**-s`` (exact). Rows whose scale would exceed ``2**±``:data:`MAX_SHIFT`
(``max |a| < 2**-25`` or ``>= 2**40``, infinities and NaN included) fold in float32 instead.
:func:`magnitude_top` reads the largest magnitude of a word.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import int_as_float, pack_half2

__all__ = ["low_value", "high_value", "magnitude_top", "row_scales", "half_pairs",
           "MAX_SHIFT"]

_HIGH = np.uint32(0xFFFF0000)
_LOW = np.uint32(0x7FFF)                # a half's magnitude bits
#: The row scale ``2**s`` of the fp16 fold stays within ``2**-MAX_SHIFT .. 2**MAX_SHIFT``; rows
#: outside it fold in float32 (a larger shift could overflow or underflow the float32 sums).
MAX_SHIFT = 32
_CENTER = 134                          # the exponent field of [128, 256): 127 + 7


@cuda.jit(device=True, inline=True)
def low_value(x):
    """float32 value of the bf16 in bits 0..15 of uint32 ``x``."""
    return int_as_float(np.int32(x << np.uint32(16)))


@cuda.jit(device=True, inline=True)
def high_value(x):
    """float32 value of the bf16 in bits 16..31 of uint32 ``x``."""
    return int_as_float(np.int32(x & _HIGH))


@cuda.jit(device=True, inline=True)
def magnitude_top(x):
    """The larger magnitude bits (``|a|``'s bits, ``0 .. 0x7FFF``; larger bits, larger value,
    infinities and NaN largest) of the two bf16 of uint32 ``x``."""
    return max(x & _LOW, (x >> np.uint32(16)) & _LOW)


@cuda.jit(device=True, inline=True)
def row_scales(top):
    """``(ok, scale, unscale)`` for a row whose largest magnitude bits are ``top``: ``scale =
    2**s`` with ``scale * max |a|`` in ``[128, 256)`` and ``unscale = 2**-s`` (float32); ``ok``
    is False (and both 1) where ``|s| > MAX_SHIFT`` (infinities and NaN included). An all-zero
    row is ok with ``s = 0``."""
    e = np.int32(top >> np.uint32(7)) if top != np.uint32(0) else np.int32(_CENTER)
    ok = abs(e - np.int32(_CENTER)) <= np.int32(MAX_SHIFT)
    if not ok:
        e = np.int32(_CENTER)
    scale = int_as_float(np.int32((np.int32(2 * _CENTER - 7) - e) << np.int32(23)))
    unscale = int_as_float(np.int32((e - np.int32(7)) << np.int32(23)))
    return ok, scale, unscale


@cuda.jit(device=True, inline=True)
def half_pairs(x0, x1, x2, x3, scale):
    """The re-paired fp16 words ``(a0,a4), (a1,a5), (a2,a6), (a3,a7)`` of 8 bf16 activations held
    as 4 uint32 in memory order (``x0 = (a0, a1)`` ...), each times ``scale`` (a power of two:
    exact in float32), rounded to fp16 (nearest even): 8 shifts/masks, 8 FMUL and 4
    ``cvt.rn.f16x2.f32``."""
    return (pack_half2(low_value(x0) * scale, low_value(x2) * scale),
            pack_half2(high_value(x0) * scale, high_value(x2) * scale),
            pack_half2(low_value(x1) * scale, low_value(x3) * scale),
            pack_half2(high_value(x1) * scale, high_value(x3) * scale))
