"""Codegen helpers shared by the inline-PTX intrinsics (GPU only: the simulator's stand-ins are
plain Python).

- :func:`void_asm` makes an intrinsic of one operand-free PTX statement (side effects, a memory
  clobber: the compiler moves no memory access across it) that returns nothing; used by
  :mod:`.intrinsics` (``griddepcontrol``) and :mod:`.async_copy` (``cp.async`` groups).
- :func:`element_address` is the 64-bit address of element ``index`` of a 1-D array, the operand
  of the load, copy and prefetch intrinsics (:mod:`.vector_loads`, :mod:`.async_copy`).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

__all__ = ["void_asm", "element_address"]

_I64 = ir.IntType(64)


def void_asm(text: str, doc: str):
    """An intrinsic ``fn()`` that emits the PTX ``text``; ``doc`` becomes its docstring."""
    @intrinsic
    def fn(typingctx):
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()
        return types.void(), codegen
    fn.__doc__ = doc
    return fn


def element_address(context, builder, aryty, ary, idxty, idx):
    """Inside a codegen: the address (i64) of element ``idx`` (of type ``idxty``) of the 1-D
    array value ``ary`` (of type ``aryty``)."""
    ary = context.make_array(aryty)(context, builder, ary)
    idx = context.cast(builder, idx, idxty, types.int64)
    return builder.ptrtoint(builder.gep(ary.data, [idx]), _I64)
