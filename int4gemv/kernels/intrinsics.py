"""Bit, half2 and warp primitives the kernels use, with faithful stand-ins for Numba's simulator.

On hardware these are libdevice / warp intrinsics and small inline-PTX functions: ``fma.rn.f16x2``,
``fma.rn.bf16x2``, ``lop3.b32``,
``cvt.rn.f16x2.f32``, ``cvt.rn.bf16.f32`` and a half2-to-float32 sum (Numba has no half2 arithmetic; a half2 value is
carried as the uint32 holding its bits, low half = element 0), the two ``griddepcontrol`` instructions of a
programmatic dependent launch and a bulk L2 prefetch (a no-op on the simulator). Numba's
simulator (``NUMBA_ENABLE_CUDASIM=1``) has no warp shuffles and its libdevice functions are empty,
so the same kernel source would not run there. The simulated versions below implement the
hardware semantics for a whole block that calls them uniformly (which every kernel here does):
``shfl_down`` reads lane ``lane + delta`` of the same warp and returns the caller's own value when
that lane is past the warp's end; ``shfl_xor`` reads lane ``lane ^ mask``.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import cuda

from ..device import simulated

__all__ = ["int_as_float", "float_as_int", "half2_fma", "bf16x2_fma", "half2_sum", "and_or", "pack_half2", "bf16_bits",
           "wait_for_previous_grid",
           "allow_next_grid", "prefetch_l2", "shfl_down", "shfl_xor", "warp_sum", "FULL_MASK",
           "SIMULATED"]

FULL_MASK = 0xFFFFFFFF
SIMULATED = simulated()

if SIMULATED:
    import ml_dtypes

    def int_as_float(x):
        """Reinterpret the bits of an int32 as a float32."""
        return np.array(x, dtype=np.int64).astype(np.uint32).view(np.float32)[()]

    def float_as_int(x):
        """Reinterpret the bits of a float32 as an int32."""
        return np.array(x, dtype=np.float32).view(np.int32)[()]

    def _halves(bits):
        return np.array([bits], dtype=np.uint32).view(np.float16).astype(np.float64)

    def _bf16_halves(bits):
        return np.array([bits], dtype=np.uint32).view(ml_dtypes.bfloat16).astype(np.float64)

    def half2_fma(a, b, c):
        """``a * b + c`` per half, rounded once to fp16 (from float64), as half2 bits."""
        r = (_halves(a) * _halves(b) + _halves(c)).astype(np.float16)
        return np.uint32(r.view(np.uint32)[0])

    def half2_sum(x):
        """``float32(low half) + float32(high half)``."""
        lo, hi = _halves(x).astype(np.float32)
        return np.float32(lo + hi)

    def bf16x2_fma(a, b, c):
        """``fma.rn.bf16x2``: ``a * b + c`` per half, rounded once to bf16 (from float64)."""
        r = (_bf16_halves(a) * _bf16_halves(b) + _bf16_halves(c)).astype(ml_dtypes.bfloat16)
        return np.uint32(r.view(np.uint32)[0])

    def and_or(x, mask, bits):
        """``(x & mask) | bits`` as one ``lop3.b32`` (uint32)."""
        return np.uint32((int(x) & int(mask)) | int(bits))

    def pack_half2(lo, hi):
        """``cvt.rn.f16x2.f32``: half2 bits of float32 ``lo`` (low half) and ``hi``, each rounded
        to nearest even (overflow gives infinity)."""
        with np.errstate(over="ignore"):
            r = np.array([lo, hi], np.float32).astype(np.float16)
        return np.uint32(r.view(np.uint32)[0])

    def bf16_bits(x):
        """``cvt.rn.bf16.f32``: the bf16 bits (uint16) of float32 ``x``, rounded to nearest even
        (overflow gives infinity, subnormals kept); a NaN gives the canonical NaN ``0x7FFF``.
        Bit arithmetic, so that its test against ml_dtypes' cast checks two derivations."""
        u = int(np.array(x, dtype=np.float32).view(np.uint32)[()])
        if u & 0x7FFFFFFF > 0x7F800000:
            return np.uint16(0x7FFF)
        return np.uint16(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)

    def wait_for_previous_grid():
        """No-op: the simulator runs launches one after another."""

    def allow_next_grid():
        """No-op: the simulator runs launches one after another."""

    def prefetch_l2(array, first, count):
        """No-op (the simulator has no cache), but the range must lie inside ``array`` as on the
        GPU, where a prefetch past the allocation may touch unmapped memory."""
        if not (0 <= first and 0 < count and first + count <= array.shape[0]):
            raise IndexError(f"prefetch_l2 of elements {first} .. {first + count} outside an array of "
                             f"{array.shape[0]}")

    def _shuffle(value, source):
        me = threading.current_thread()
        slots = me._manager.__dict__.setdefault("_int4gemv_shfl_slots", {})
        tid = me.thread_id
        slots[tid] = value
        me.syncthreads()  # every lane of the block has published its value
        result = slots[source(tid)]
        me.syncthreads()  # every lane has read before anyone publishes again
        return result

    def shfl_down(value, delta):
        """``shfl_down_sync(FULL_MASK, value, delta)`` for a block of simulator threads."""
        return _shuffle(value, lambda tid: tid + delta if (tid % 32) + delta < 32 else tid)

    def shfl_xor(value, lane_mask):
        """``shfl_xor_sync(FULL_MASK, value, lane_mask)`` for a block of simulator threads."""
        return _shuffle(value, lambda tid: tid ^ int(lane_mask))

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic
    from numba.cuda.libdevice import float_as_int, int_as_float  # noqa: F401

    from .inline_ptx import void_asm

    _I32 = ir.IntType(32)

    @intrinsic
    def half2_fma(typingctx, a, b, c):
        """``fma.rn.f16x2``: ``a * b + c`` per half, one rounding."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32] * 3),
                               "fma.rn.f16x2 $0, $1, $2, $3;", "=r,r,r,r")
            return builder.call(asm, [context.cast(builder, v, t, types.uint32)
                                      for v, t in zip(args, signature.args)])
        return types.uint32(types.uint32, types.uint32, types.uint32), codegen

    @intrinsic
    def bf16x2_fma(typingctx, a, b, c):
        """``fma.rn.bf16x2``: ``a * b + c`` per half, one rounding (bf16x2 as uint32 bits)."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32] * 3),
                               "fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r")
            return builder.call(asm, [context.cast(builder, v, t, types.uint32)
                                      for v, t in zip(args, signature.args)])
        return types.uint32(types.uint32, types.uint32, types.uint32), codegen

    @intrinsic
    def and_or(typingctx, x, mask, bits):
        """``(x & mask) | bits`` as one ``lop3.b32`` (LUT 0xEA). Written as two operations, the
        compiler emits an AND and an OR, each with its immediate (one LOP3 each)."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32] * 3),
                               "lop3.b32 $0, $1, $2, $3, 0xEA;", "=r,r,r,r")
            return builder.call(asm, [context.cast(builder, v, t, types.uint32)
                                      for v, t in zip(args, signature.args)])
        return types.uint32(x, mask, bits), codegen

    @intrinsic
    def pack_half2(typingctx, lo, hi):
        """``cvt.rn.f16x2.f32``: half2 bits of float32 ``lo`` (low half) and ``hi``, each rounded
        to nearest even (overflow gives infinity). The PTX operand order is (high, low)."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [ir.FloatType()] * 2),
                               "cvt.rn.f16x2.f32 $0, $2, $1;", "=r,f,f")
            return builder.call(asm, [context.cast(builder, v, t, types.float32)
                                      for v, t in zip(args, signature.args)])
        return types.uint32(lo, hi), codegen

    @intrinsic
    def bf16_bits(typingctx, x):
        """``cvt.rn.bf16.f32``: the bf16 bits (uint16) of float32 ``x``, rounded to nearest even;
        one instruction, where the rounding written out costs six and a NaN branch."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(16), [ir.FloatType()]),
                               "cvt.rn.bf16.f32 $0, $1;", "=h,f")
            return builder.call(asm, [context.cast(builder, args[0], signature.args[0], types.float32)])
        return types.uint16(x), codegen

    @intrinsic
    def half2_sum(typingctx, x):
        """``float32(low half) + float32(high half)`` of half2 bits."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.FloatType(), [_I32]),
                               "{.reg .f16 l, h; .reg .f32 fl, fh; mov.b32 {l, h}, $1; "
                               "cvt.f32.f16 fl, l; cvt.f32.f16 fh, h; add.f32 $0, fl, fh;}",
                               "=f,r")
            return builder.call(asm, args)
        return types.float32(types.uint32), codegen

    wait_for_previous_grid = void_asm(
        "griddepcontrol.wait;",
        "``griddepcontrol.wait`` (sm_90+): block until the grids this one depends on through a "
        "programmatic dependent launch have completed and their writes are visible.")
    allow_next_grid = void_asm(
        "griddepcontrol.launch_dependents;",
        "``griddepcontrol.launch_dependents`` (sm_90+): the next programmatic dependent launch "
        "may start now (it still waits for this grid's completion before reading its output).")

    _I64 = ir.IntType(64)

    @intrinsic
    def prefetch_l2(typingctx, array, first, count):
        """``cp.async.bulk.prefetch.L2.global`` (sm_90+) of elements ``first .. first + count``
        of a 1-D array, widened to whole 16-byte segments (the instruction's alignment; they
        stay inside the 256-byte-aligned granules the array's allocation occupies). A hint:
        nothing waits for it."""
        if not isinstance(array, types.Array) or array.ndim != 1:
            return None

        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            itemsize = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
            first_ = context.cast(builder, args[1], signature.args[1], types.uint64)
            count_ = context.cast(builder, args[2], signature.args[2], types.uint64)
            size = ir.Constant(_I64, itemsize)
            begin = builder.add(builder.ptrtoint(ary.data, _I64), builder.mul(first_, size))
            end = builder.add(begin, builder.mul(count_, size))
            begin = builder.and_(begin, ir.Constant(_I64, ~15 & (2**64 - 1)))
            end = builder.and_(builder.add(end, ir.Constant(_I64, 15)),
                               ir.Constant(_I64, ~15 & (2**64 - 1)))
            nbytes = builder.trunc(builder.sub(end, begin), _I32)
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I64, _I32]),
                               "cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r",
                               side_effect=True)
            builder.call(asm, [begin, nbytes])
            return context.get_dummy_value()
        return types.void(array, first, count), codegen

    @cuda.jit(device=True, inline=True)
    def shfl_down(value, delta):
        return cuda.shfl_down_sync(FULL_MASK, value, delta)

    @cuda.jit(device=True, inline=True)
    def shfl_xor(value, lane_mask):
        return cuda.shfl_xor_sync(FULL_MASK, value, lane_mask)


@cuda.jit(device=True, inline=True)
def warp_sum(value):
    """Sum ``value`` over the 32 lanes of a warp; lane 0 receives the total."""
    value += shfl_down(value, 16)
    value += shfl_down(value, 8)
    value += shfl_down(value, 4)
    value += shfl_down(value, 2)
    value += shfl_down(value, 1)
    return value
