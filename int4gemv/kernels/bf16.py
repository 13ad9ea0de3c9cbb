"""bf16 bit conversions for the default tiling's bf16 path.

bf16 values travel as their uint16 bits (Numba has no bf16 type). A uint32 holding two bf16,
``(x0 in bits 0..15, x1 in bits 16..31)``, gives its float32 values with one instruction each:
``x << 16`` and ``x & 0xFFFF0000``. :func:`to_bf16_bits` rounds a float32 to bf16 bits
(round to nearest, ties to even; NaN stays NaN).

The M = 1 loop of the default tiling runs bf16 through its fp16 arithmetic when a lane's
activations allow it: a bf16 value ``a`` with ``2**-14 <= |a| < 256`` (or ``a = 0``) is exactly an
fp16 value (8 significant bits against fp16's 11, inside fp16's normal exponents), and 8
products ``a * (q - zp)`` with ``|q - zp| <= 15`` then sum to at most 30720 < 65504 (fp16's
largest), so no half2 partial sum overflows. :func:`outside_half_range` tests that for two
values at once; :func:`half_pairs` converts 8 activations to the re-paired fp16 words.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import SIMULATED, int_as_float, pack_half2

__all__ = ["low_value", "high_value", "to_bf16_bits", "outside_half_range", "half_pairs"]

_HIGH = np.uint32(0xFFFF0000)
_ABS2 = np.uint32(0x7FFF7FFF)          # both halves' magnitude bits
_SIGN2 = np.uint32(0x80008000)         # bit 15 of each half: where the per-half tests land
# Added to a half's magnitude bits m <= 0x7FFF (no carry into the other half), each sets bit 15
# exactly when: m >= 1 (a != 0); m >= 0x3880 (|a| >= 2**-14, exponent 113); m >= 0x4380
# (|a| >= 256, exponent 135; infinities and NaN included).
_NONZERO2 = np.uint32(0x7FFF7FFF)
_AT_LEAST_MIN2 = np.uint32(0x47804780)
_AT_LEAST_MAX2 = np.uint32(0x3C803C80)

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


@cuda.jit(device=True, inline=True)
def outside_half_range(x):
    """Nonzero (bit 15 and/or 31) where a bf16 of uint32 ``x`` is outside the fp16 range of the
    M = 1 loop: ``|a| >= 256`` (NaN and infinities included) or ``0 < |a| < 2**-14``."""
    m = x & _ABS2
    nonzero = np.uint32(m + _NONZERO2)
    normal = np.uint32(m + _AT_LEAST_MIN2)
    large = np.uint32(m + _AT_LEAST_MAX2)
    return np.uint32(((nonzero & ~normal) | large) & _SIGN2)


@cuda.jit(device=True, inline=True)
def half_pairs(x0, x1, x2, x3):
    """The re-paired fp16 words ``(a0,a4), (a1,a5), (a2,a6), (a3,a7)`` of 8 bf16 activations held
    as 4 uint32 in memory order (``x0 = (a0, a1)`` ...), exact when every one is in the range
    :func:`outside_half_range` accepts: 8 shifts/masks and 4 ``cvt.rn.f16x2.f32``."""
    return (pack_half2(low_value(x0), low_value(x2)), pack_half2(high_value(x0), high_value(x2)),
            pack_half2(low_value(x1), low_value(x3)), pack_half2(high_value(x1), high_value(x3)))
