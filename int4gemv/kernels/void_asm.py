"""One helper for the GPU intrinsics that are a single PTX statement with no operands.

:func:`void_asm` makes a Numba intrinsic that emits ``text`` as inline PTX (side effects, a
memory clobber: the compiler moves no memory access across it) and returns nothing. Used by
:mod:`.intrinsics` (``griddepcontrol``) and :mod:`.async_copy` (``cp.async`` groups); GPU only
(the simulator's stand-ins are plain Python).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

__all__ = ["void_asm"]


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
