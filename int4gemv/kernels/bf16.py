"""bf16 bit conversions and the float32 nibble product of the default tiling's bf16 path.

bf16 values travel as their uint16 bits (Numba has no bf16 type). A uint32 holding two bf16,
``(x0 in bits 0..15, x1 in bits 16..31)``, gives its float32 values with one instruction each:
``x << 16`` and ``x & 0xFFFF0000``. :func:`to_bf16_bits` rounds a float32 to bf16 bits
(round to nearest, ties to even; NaN stays NaN).

Nibbles to float32 without an integer conversion: with ``v = w << 12`` a word's element 0 sits
in bits 12..15 and element 1 in bits 16..19, and ``(v & 0xF000) | 0x45000000`` reads as the float
``2048 + q0`` exactly, ``(v & 0xF0000) | 0x43000000`` as ``128 + q1``; ``w << 4``, ``w >> 4`` and
``w >> 12`` do the same for elements 2..7. So 8 elements cost 4 shifts and 8 LOP3, and their
products one FFMA each: :func:`dot8` returns ``sum(a_i * (offset_i + q_i))`` with offsets 2048
(even ``i``) and 128 (odd ``i``); the caller subtracts ``2048 * sum(a_even) + 128 * sum(a_odd)``
and ``zp * sum(a)`` once per quantization group. The offsets cost about 11 bits of the float32
accumulator: a relative error near 2**-13 of ``sum |a|``, far below bf16 output rounding (2**-9).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import int_as_float
from .vector_loads import float_bits

__all__ = ["low_value", "high_value", "to_bf16_bits", "dot8", "EVEN_OFFSET", "ODD_OFFSET"]

EVEN_OFFSET = 2048.0
ODD_OFFSET = 128.0
_EVEN_MASK, _ODD_MASK = np.uint32(0x0000F000), np.uint32(0x000F0000)
_EVEN_BASE, _ODD_BASE = np.uint32(0x45000000), np.uint32(0x43000000)
_HIGH = np.uint32(0xFFFF0000)


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
    u = float_bits(x)
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):  # NaN: keep it a (quiet) NaN
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    u = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(u >> np.uint32(16))


@cuda.jit(device=True, inline=True)
def _pair(v, a_even, a_odd, acc):
    acc += a_even * int_as_float(np.int32((v & _EVEN_MASK) | _EVEN_BASE))
    acc += a_odd * int_as_float(np.int32((v & _ODD_MASK) | _ODD_BASE))
    return acc


@cuda.jit(device=True, inline=True)
def dot8(w, a0, a1, a2, a3, a4, a5, a6, a7, acc):
    """``acc + sum(a_i * (offset_i + q_i))`` over the 8 nibbles of uint32 ``w`` (float32)."""
    acc = _pair(w << np.uint32(12), a0, a1, acc)
    acc = _pair(w << np.uint32(4), a2, a3, acc)
    acc = _pair(w >> np.uint32(4), a4, a5, acc)
    return _pair(w >> np.uint32(12), a6, a7, acc)
