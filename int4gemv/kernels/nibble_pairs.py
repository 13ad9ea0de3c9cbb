"""INT4 nibbles to exact fp16 pairs in natural order: ``(q[2b] - zp, q[2b+1] - zp)``.

Byte ``b`` of a packed uint32 word holds elements ``2b`` (low nibble) and ``2b + 1``. One byte
permute (``prmt.b32``) copies that byte into both halves, one LOP3 keeps the low nibble of the
low half and the high nibble of the high half and ORs in fp16 1024: the half2 is
``(1024 + q0, 1024 + 16 q1)`` exactly (fp16 has a unit step between 1024 and 2048). One
``fma.rn.f16x2`` with ``(1, 1/16)`` and ``(-(1024 + zp), -(64 + zp))`` gives ``(q0 - zp, q1 - zp)``,
exact. So 8 elements cost 4 PRMT, 4 LOP3 and 4 HFMA2, once per loaded word, and the pairs line
up with activations as they lie in memory (a uint32 of two consecutive fp16): every activation
row multiplies them with one HFMA2 per pair and no re-pairing.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import SIMULATED, half2_fma

__all__ = ["byte_perm", "dequant_pair", "zero_point_offset", "half_low", "half_high",
           "NO_ZP_OFFSET"]

_MASK = np.uint32(0x00F0000F)
_MAGIC = np.uint32(0x64006400)          # half2 (1024, 1024)
_SCALE = np.uint32(0x2C003C00)          # half2 (1, 1/16)
#: ``zero_point_offset(8)``: the offsets of a weight without zero points.
NO_ZP_OFFSET = np.uint32(0xD480E408)

if SIMULATED:

    def byte_perm(x, y, selector):
        """``prmt.b32``: result byte ``i`` is byte ``(selector >> 4i) & 7`` of ``y:x``."""
        source = (int(y) << 32) | int(x)
        out = 0
        for i in range(4):
            b = (int(selector) >> (4 * i)) & 7
            out |= ((source >> (8 * b)) & 0xFF) << (8 * i)
        return np.uint32(out)

    def _half(x, i):
        return np.float32(np.array([x], dtype=np.uint32).view(np.float16)[i])

    def half_low(x):
        """float32 of the low half of half2 bits ``x``."""
        return _half(x, 0)

    def half_high(x):
        """float32 of the high half of half2 bits ``x``."""
        return _half(x, 1)

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    _I32 = ir.IntType(32)

    @intrinsic
    def byte_perm(typingctx, x, y, selector):
        """``prmt.b32``: result byte ``i`` is byte ``(selector >> 4i) & 7`` of ``y:x``."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32] * 3), "prmt.b32 $0, $1, $2, $3;",
                               "=r,r,r,r")
            return builder.call(asm, [context.cast(builder, v, t, types.uint32)
                                      for v, t in zip(args, signature.args)])
        return types.uint32(x, y, selector), codegen

    def _half_to_float(which):
        text = ("{.reg .f16 l, h; mov.b32 {l, h}, $1; cvt.f32.f16 $0, %s;}" % which)

        def convert(typingctx, x):
            def codegen(context, builder, signature, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.FloatType(), [_I32]), text, "=f,r")
                return builder.call(asm, [context.cast(builder, args[0], signature.args[0],
                                                       types.uint32)])
            return types.float32(x), codegen
        return intrinsic(convert)

    half_low = _half_to_float("l")
    half_low.__doc__ = "float32 of the low half of half2 bits ``x``."
    half_high = _half_to_float("h")
    half_high.__doc__ = "float32 of the high half of half2 bits ``x``."


@cuda.jit(device=True, inline=True)
def zero_point_offset(zp):
    """``(-(1024 + zp), -(64 + zp))`` as half2 bits for nibble zero point ``zp`` (uint32)."""
    return (np.uint32(0xE400) + zp) | ((np.uint32(0xD400) + (zp << np.uint32(4))) << np.uint32(16))


@cuda.jit(device=True, inline=True)
def dequant_pair(w, b, offset):
    """half2 ``(q[2b] - zp, q[2b+1] - zp)`` of byte ``b`` (a constant 0..3) of uint32 ``w``."""
    v = (byte_perm(w, np.uint32(0), np.uint32(0x1111 * b)) & _MASK) | _MAGIC
    return half2_fma(v, _SCALE, offset)
