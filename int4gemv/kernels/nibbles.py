"""Turning packed nibbles into float32 without an integer-to-float conversion.

A nibble ``q`` placed in bits 16..19 of ``0x3F800000`` (the float 1.0) reads as the float
``1 + q/128`` exactly. One shift and one AND-OR per nibble (none for the nibble already in
bits 16..19), then one FMA with the activation, instead of shift, mask, I2F, subtract, FMA.

For a group of elements with activation sum ``S = sum(a)``,
``sum(a * (q - zp)) = 128 * (sum(a * (1 + q/128)) - (1 + zp/128) * S)``, so the zero point and
the ``1`` offset fold out once per word through the activation sum, and the factor 128 folds
into the scale. The offset is 1 against a signal of at most 15/128, so float32 keeps about 17
significant bits of the signal part: far below fp16 output rounding.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import int_as_float

__all__ = ["dot8", "ONE_BITS", "NIBBLE_MASK", "NIBBLE_SCALE", "offset_for_zero_point"]

ONE_BITS = np.uint32(0x3F800000)   # float32 1.0
NIBBLE_MASK = np.uint32(0x000F0000)  # bits 16..19
NIBBLE_SCALE = 128.0               # 2 ** (23 - 16)


def offset_for_zero_point(zp):
    """The per-group constant ``1 + zp/128`` that folds the zero point out."""
    return 1.0 + zp / NIBBLE_SCALE


@cuda.jit(device=True, inline=True)
def _f(bits):
    return int_as_float(np.int32(bits | ONE_BITS))


@cuda.jit(device=True, inline=True)
def dot8(w, a0, a1, a2, a3, a4, a5, a6, a7):
    """``sum(a_i * (1 + q_i/128))`` for the 8 nibbles ``q_i`` of uint32 word ``w`` (low first)."""
    w = np.uint32(w)
    s = a0 * _f((w << np.uint32(16)) & NIBBLE_MASK)
    s += a1 * _f((w << np.uint32(12)) & NIBBLE_MASK)
    s += a2 * _f((w << np.uint32(8)) & NIBBLE_MASK)
    s += a3 * _f((w << np.uint32(4)) & NIBBLE_MASK)
    s += a4 * _f(w & NIBBLE_MASK)
    s += a5 * _f((w >> np.uint32(4)) & NIBBLE_MASK)
    s += a6 * _f((w >> np.uint32(8)) & NIBBLE_MASK)
    s += a7 * _f((w >> np.uint32(12)) & NIBBLE_MASK)
    return s
