"""INT4 nibbles to exact bf16 pairs in natural order ``(q[2b] - zp, q[2b+1] - zp)``, and
``fma.rn.bf16x2``, with simulator stand-ins.

The bf16 twin of :mod:`.nibble_pairs`. bf16 has a unit step between 128 and 256, so
``0x4300 | q`` is ``128 + q`` exactly. Its mantissa has 7 bits, so the high nibble of a byte
cannot stay where it is (bits 4..7 would reach the exponent); instead one ``prmt.b32`` takes byte
``b`` of the word ``w`` into the low half and byte ``b`` of ``w >> 4`` into the high half, so both
nibbles land in bits 0..3 of their half. One LOP3 (``& 0x000F000F | 0x43004300``) gives
``(128 + q[2b], 128 + q[2b+1])`` and one ``fma.rn.bf16x2`` with ``(1, 1)`` and
``(-(128 + zp), -(128 + zp))`` gives ``(q[2b] - zp, q[2b+1] - zp)``, exact (integers of magnitude
<= 15). Per 8 elements: 1 shift, 4 PRMT, 4 LOP3, 4 FMA.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import SIMULATED
from .nibble_pairs import byte_perm

__all__ = ["bf16x2_fma", "dequant_pair_bf16", "zero_point_offset_bf16", "NO_ZP_OFFSET_BF16",
           "ONE_BF16X2", "NEG_ZERO_BF16X2"]

_MASK = np.uint32(0x000F000F)
_MAGIC = np.uint32(0x43004300)          # bf16x2 (128, 128)
#: bf16x2 (1, 1).
ONE_BF16X2 = np.uint32(0x3F803F80)
#: bf16x2 (-0, -0): the addend of a plain product through ``fma`` (``x * s + -0 == x * s``).
NEG_ZERO_BF16X2 = np.uint32(0x80008000)
#: ``zero_point_offset_bf16(8)``: the offsets of a weight without zero points.
NO_ZP_OFFSET_BF16 = np.uint32(0xC308C308)
_PAIR = np.uint32(0x00010001)

if SIMULATED:
    import ml_dtypes

    def _halves(bits):
        return np.array([bits], dtype=np.uint32).view(ml_dtypes.bfloat16).astype(np.float64)

    def bf16x2_fma(a, b, c):
        """``fma.rn.bf16x2``: ``a * b + c`` per half, rounded once to bf16 (from float64)."""
        r = (_halves(a) * _halves(b) + _halves(c)).astype(ml_dtypes.bfloat16)
        return np.uint32(r.view(np.uint32)[0])

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    _I32 = ir.IntType(32)

    @intrinsic
    def bf16x2_fma(typingctx, a, b, c):
        """``fma.rn.bf16x2``: ``a * b + c`` per half, one rounding (bf16x2 as uint32 bits)."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32] * 3),
                               "fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r")
            return builder.call(asm, [context.cast(builder, v, t, types.uint32)
                                      for v, t in zip(args, signature.args)])
        return types.uint32(types.uint32, types.uint32, types.uint32), codegen


@cuda.jit(device=True, inline=True)
def zero_point_offset_bf16(zp):
    """bf16x2 ``(-(128 + zp), -(128 + zp))`` for nibble zero point ``zp`` (uint32)."""
    return (np.uint32(0xC300) + zp) * _PAIR


@cuda.jit(device=True, inline=True)
def dequant_pair_bf16(w, w_shifted, b, offset):
    """bf16x2 ``(q[2b] - zp, q[2b+1] - zp)`` of byte ``b`` (a constant 0..3) of uint32 ``w``;
    ``w_shifted`` is ``w >> 4`` (computed once per word)."""
    v = (byte_perm(w, w_shifted, np.uint32(0x4400 + 0x1111 * b)) & _MASK) | _MAGIC
    return bf16x2_fma(v, ONE_BF16X2, offset)
