"""Two float32 values to half2 bits in one instruction: ``cvt.rn.f16x2.f32`` (sm_80+).

:func:`pack_half2` is the inverse of :func:`~int4gemv.kernels.nibble_pairs.half_low` /
:func:`~int4gemv.kernels.nibble_pairs.half_high`: a kernel that computes fp16 activations in
float32 (the decode chain's fused ``silu(g)·u``) hands them to the half2 dot products
(:mod:`.half2`) without a trip through memory. Each value is rounded to nearest even, as a
float32 store into an fp16 array rounds; overflow gives ±inf, NaN stays NaN (its bits are the
hardware's canonical NaN on a GPU, numpy's on the simulator: only NaN-ness is specified).
"""

from __future__ import annotations

import numpy as np

from .intrinsics import SIMULATED

__all__ = ["pack_half2"]

if SIMULATED:

    def pack_half2(low, high):
        """half2 bits (uint32) of ``(fp16(low), fp16(high))``, ``low`` in bits 0..15."""
        with np.errstate(over="ignore"):
            pair = np.array([low, high], dtype=np.float16)
        return np.uint32(pair.view(np.uint32)[0])

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    _I32 = ir.IntType(32)

    @intrinsic
    def pack_half2(typingctx, low, high):
        """half2 bits (uint32) of ``(fp16(low), fp16(high))``, ``low`` in bits 0..15: PTX puts
        its first source in the upper half, so ``high`` goes first."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [ir.FloatType()] * 2),
                               "cvt.rn.f16x2.f32 $0, $1, $2;", "=r,f,f")
            lo, hi = (context.cast(builder, v, t, types.float32) for v, t in zip(args, signature.args))
            return builder.call(asm, [hi, lo])
        return types.uint32(low, high), codegen
