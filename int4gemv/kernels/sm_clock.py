"""``%clock64``: the SM's own cycle counter, read from a kernel, with a simulator stand-in.

On hardware :func:`sm_clock` is ``mov.u64 %r, %clock64;`` (PTX special register: a 64-bit count
of the SM's clock cycles, advancing every cycle; counters of different SMs are not aligned, so
two readings compare only within one SM). It is the fine clock of a warp's own waits: a wait
on ``%globaltimer`` (:mod:`.global_timer`) cost every warp the same ≈ 0.46 µs whether it asked
for 25 or 700 ns (H100, bench/NOTES.md session 30), as a clock stepping in about 1 µs would.
The read is marked volatile (side effect), so the
compiler neither hoists nor merges two reads. On Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``)
it is the host's monotonic nanosecond clock, one "cycle" a nanosecond: never decreasing.
"""

from __future__ import annotations

import time

import numpy as np

from ..device import simulated

__all__ = ["sm_clock"]

if simulated():

    def sm_clock():
        """The simulator's cycle count: the host's ``time.monotonic_ns``, as uint64."""
        return np.uint64(time.monotonic_ns())

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    @intrinsic
    def sm_clock(typingctx):
        """``%clock64``: the SM's cycle counter, as uint64."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %clock64;",
                               "=l", side_effect=True)
            return builder.call(asm, [])
        return types.uint64(), codegen
