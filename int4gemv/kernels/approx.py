"""Approximate float32 ``2**x`` and ``1/x`` in one instruction each, with simulator stand-ins.

On hardware these are ``ex2.approx.ftz.f32`` and ``rcp.approx.ftz.f32`` (one MUFU each). Numba's
``math.exp`` and ``/`` compile to the correctly rounded forms instead: about ten instructions
for the exponential and eight more for the division, with a branch to a slow path (ptxas 13.0,
``silu_mul_kernel``; bench/NOTES.md, session 33). Both approximations flush subnormal inputs and
results to zero (``.ftz``). Their error bounds, as the tests hold them: ``ex2.approx`` a relative
error of at most ``2**-21`` (2 ulp) for normal results, ``rcp.approx`` at most 1 ulp. The simulator's stand-ins
compute in float64 and round once to float32, inside those bounds; flushing and special values
are as on the hardware (``2**-inf = 0``, ``2**inf = inf``, ``1/±0 = ±inf``, ``1/±inf = ±0``;
NaN gives NaN).

For values rounded to fp16 afterwards, as in the decode chain's ``silu(g)·u``, either error is
below a thousandth of an fp16 ulp.
"""

from __future__ import annotations

import numpy as np

from ..device import simulated

__all__ = ["exp2_approx", "rcp_approx"]

_TINY = float(np.finfo(np.float32).tiny)   # the smallest normal float32

if simulated():
    def _flushed(x):
        x = np.float64(np.float32(x))
        return np.copysign(0.0, x) if abs(x) < _TINY else x

    def exp2_approx(x):
        """``ex2.approx.ftz.f32``: ``2**x`` in float32 (a subnormal ``x`` counts as 0; a
        subnormal result is 0)."""
        with np.errstate(over="ignore"):
            r = np.float32(np.exp2(_flushed(x)))
        return np.float32(0.0) if abs(r) < _TINY else r

    def rcp_approx(x):
        """``rcp.approx.ftz.f32``: ``1/x`` in float32 (a subnormal ``x`` counts as a signed 0;
        a subnormal result is a signed 0)."""
        x = _flushed(x)
        with np.errstate(divide="ignore", over="ignore"):
            r = np.float32(np.copysign(np.inf, x) if x == 0 else 1.0 / x)
        return np.float32(np.copysign(0.0, r)) if abs(r) < _TINY else r

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    def _unary(ptx: str, doc: str):
        """An intrinsic ``fn(x) -> float32`` of one float32 PTX instruction ``ptx $0, $1;``."""
        @intrinsic
        def fn(typingctx, x):
            def codegen(context, builder, signature, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.FloatType(), [ir.FloatType()]),
                                   f"{ptx} $0, $1;", "=f,f")
                return builder.call(asm, [context.cast(builder, args[0], signature.args[0],
                                                       types.float32)])
            return types.float32(x), codegen
        fn.__doc__ = doc
        return fn

    exp2_approx = _unary("ex2.approx.ftz.f32", "``ex2.approx.ftz.f32``: ``2**x`` in float32.")
    rcp_approx = _unary("rcp.approx.ftz.f32", "``rcp.approx.ftz.f32``: ``1/x`` in float32.")
