"""Wide read-only global loads (16 and 8 bytes), with simulator stand-ins.

Numba has no vector types, so a kernel cannot ask for a 16-byte load of packed nibbles or
activations. :func:`load16` is ``ld.global.nc.v4.u32`` through inline PTX: the 16 bytes that
start at element ``index`` of any 1-D array, as a tuple of four uint32 (little-endian, the first
element's bytes in the low bits of the first word). :func:`load8` is the 8-byte form and
:func:`load4` the 4-byte one (a 1-tuple, so that code written for any width reads alike). The
address must be aligned to the load's width; the caller (the kernel configuration) guarantees
it. The data must not be written while the kernel runs (the ``.nc`` read-only path), except for
:func:`load16_l2` (``ld.global.cg``, cached in L2 only) and :func:`load_volatile`
(``ld.volatile.global``, read anew at each call: a flag other blocks write; :func:`load16_volatile`,
16 bytes) and
:func:`load_acquire` (``ld.acquire.gpu``: the same read, ordering the loads after it), which the compiler
never moves or merges: data other blocks of the same launch write.

On Numba's simulator the same functions read the array element by element and assemble the
words, so the kernels using them run unchanged (and slowly) on a CPU.

:func:`prefetch_l1` is ``prefetch.global.L1``: a hint that brings the cache line holding element
``index`` into L1, so that a later load of it hits there instead of waiting for L2. Nothing waits
for it and it changes no value; the simulator's stand-in reads the element, so an index outside
the array (a missing guard in the kernel) fails there as a load would.
"""

from __future__ import annotations

import numpy as np

from .intrinsics import SIMULATED

__all__ = ["load16", "load8", "load4", "load16_stream", "load16_l2", "load16_volatile", "load_volatile",
           "load_acquire", "prefetch_l1"]

if SIMULATED:

    def _words(array, index, nbytes):
        itemsize = array.dtype.itemsize
        count = nbytes // itemsize
        raw = np.array([array[int(index) + i] for i in range(count)], dtype=array.dtype)
        return tuple(np.uint32(w) for w in raw.view(np.uint32))

    def load16(array, index):
        """The 16 bytes from element ``index`` of ``array`` as four uint32 (16-byte aligned)."""
        return _words(array, index, 16)

    def load8(array, index):
        """The 8 bytes from element ``index`` of ``array`` as two uint32 (8-byte aligned)."""
        return _words(array, index, 8)

    def load16_stream(array, index):
        """:func:`load16` of data read once (the hardware form does not allocate in L1)."""
        return _words(array, index, 16)

    def load16_l2(array, index):
        """:func:`load16` of data written during the launch (the hardware form reads L2)."""
        return _words(array, index, 16)

    def load4(array, index):
        """The 4 bytes from element ``index`` of ``array`` as a 1-tuple of uint32 (4-byte aligned)."""
        return _words(array, index, 4)

    def load_volatile(array, index):
        """:func:`load4` of a flag other blocks write (the hardware form reads it anew each time)."""
        return _words(array, index, 4)

    def load16_volatile(array, index):
        """:func:`load16` of data other blocks write (the hardware form reads it anew each time)."""
        return _words(array, index, 16)

    def load_acquire(array, index):
        """:func:`load_volatile` that also orders every later access after it (one thread here)."""
        return _words(array, index, 4)

    def prefetch_l1(array, index):
        """No cache here: reads element ``index`` (an index outside the array raises)."""
        array[int(index)]

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    from .inline_ptx import element_address

    _I32, _I64 = ir.IntType(32), ir.IntType(64)

    def _vector_load(count, op="ld.global.nc", coherent=False):
        """``coherent``: a load the compiler must keep in place (volatile asm with a memory
        clobber), for data that other blocks write during the launch."""
        width = {4: ".v4", 2: ".v2", 1: ""}[count]
        regs = ", ".join(f"${i}" for i in range(count))
        regs = f"{{{regs}}}" if count > 1 else regs
        text = f"{op}{width}.u32 {regs}, [${count}];"
        constraints = ",".join(["=r"] * count + ["l"]) + (",~{memory}" if coherent else "")

        def load(typingctx, array, index):
            if not isinstance(array, types.Array) or array.ndim != 1:
                return None
            ret = types.UniTuple(types.uint32, count)

            def codegen(context, builder, signature, args):
                aryty, idxty = signature.args
                address = element_address(context, builder, aryty, args[0], idxty, args[1])
                returned = ir.LiteralStructType([_I32] * count) if count > 1 else _I32
                asm = ir.InlineAsm(ir.FunctionType(returned, [_I64]),
                                   text, constraints, side_effect=coherent)
                result = builder.call(asm, [address])
                values = ([builder.extract_value(result, i) for i in range(count)] if count > 1
                          else [result])
                return context.make_tuple(builder, ret, values)
            return ret(array, index), codegen
        return load

    load16 = intrinsic(_vector_load(4))
    load16.__doc__ = "``ld.global.nc.v4.u32``: 16 bytes from element ``index`` (16-byte aligned)."
    load8 = intrinsic(_vector_load(2))
    load8.__doc__ = "``ld.global.nc.v2.u32``: 8 bytes from element ``index`` (8-byte aligned)."
    load16_stream = intrinsic(_vector_load(4, "ld.global.nc.L1::no_allocate"))
    load16_stream.__doc__ = ("``ld.global.nc.L1::no_allocate.v4.u32``: :func:`load16` of data read "
                             "once, kept out of L1 (which then holds data that is reused).")
    load16_l2 = intrinsic(_vector_load(4, "ld.global.cg", coherent=True))
    load16_l2.__doc__ = ("``ld.global.cg.v4.u32``: 16 bytes from element ``index`` (16-byte aligned), "
                         "read from L2: data other blocks of the launch wrote before a barrier.")
    load4 = intrinsic(_vector_load(1))
    load4.__doc__ = "``ld.global.nc.u32``: 4 bytes from element ``index`` as a 1-tuple (4-byte aligned)."
    load_volatile = intrinsic(_vector_load(1, "ld.volatile.global", coherent=True))
    load_volatile.__doc__ = ("``ld.volatile.global.u32``: 4 bytes from element ``index`` as a 1-tuple, read "
                             "anew at each call (a flag other blocks write; polling it needs no atomic).")
    load16_volatile = intrinsic(_vector_load(4, "ld.volatile.global", coherent=True))
    load16_volatile.__doc__ = ("``ld.volatile.global.v4.u32``: 16 bytes from element ``index`` (16-byte "
                               "aligned), read anew at each call and never removed, even where only a "
                               "loop's exit depends on it (ptxas drops such ``ld.global.cg`` loops).")
    load_acquire = intrinsic(_vector_load(1, "ld.acquire.gpu.global", coherent=True))
    load_acquire.__doc__ = ("``ld.acquire.gpu.global.u32``: :func:`load_volatile` whose later loads see "
                            "what the writers released before the value read (it waits for no earlier load, "
                            "as a fence would).")

    @intrinsic
    def prefetch_l1(typingctx, array, index):
        """``prefetch.global.L1``: the line holding element ``index`` of a 1-D array into L1."""
        if not isinstance(array, types.Array) or array.ndim != 1:
            return None

        def codegen(context, builder, signature, args):
            aryty, idxty = signature.args
            address = element_address(context, builder, aryty, args[0], idxty, args[1])
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I64]),
                               "prefetch.global.L1 [$0];", "l", side_effect=True)
            builder.call(asm, [address])
            return context.get_dummy_value()
        return types.void(array, index), codegen
