"""``%globaltimer``: the GPU's chip-wide nanosecond clock, read from a kernel, with a simulator stand-in.

On hardware :func:`global_timer` is ``mov.u64 %r, %globaltimer;`` (PTX special register: a
64-bit count of nanoseconds shared by every SM, so stamps taken on different SMs compare; its
update granularity is the hardware's, measured by ``bench.decode_chain``). The read is marked
volatile (side effect), so the compiler neither hoists nor merges two reads. On Numba's simulator
(``NUMBA_ENABLE_CUDASIM=1``) it is the host's monotonic nanosecond clock: one clock for every
simulated thread, never decreasing, the same unit.
"""

from __future__ import annotations

import time

import numpy as np

from ..device import simulated

__all__ = ["global_timer"]

if simulated():

    def global_timer():
        """Nanoseconds of a clock shared by every thread (``time.monotonic_ns``), as uint64."""
        return np.uint64(time.monotonic_ns())

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    @intrinsic
    def global_timer(typingctx):
        """``%globaltimer``: nanoseconds of the chip-wide clock, as uint64."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %globaltimer;",
                               "=l", side_effect=True)
            return builder.call(asm, [])
        return types.uint64(), codegen
