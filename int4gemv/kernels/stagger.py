"""A warp's start delay by its rank in its SM: the issue-order probe of the M = 1 kernels.

On a grid where every warp folds one step (the decode shapes at M = 1), all of an SM's weight
loads go out at once, the memory system serves them in no particular order, and each warp's
last load, which its fold waits for (one scoreboard: bench/NOTES.md, session 16), lands near
the end of the stream: the SM's whole fold then follows the stream (session 15's probes). If the
warps of an SM issue one after another, at about the rate the SM's share of the bandwidth drains
them, the early warps' bytes land early and their folds overlap the later warps' loads.

:func:`stagger_start` sleeps ``rank * ns`` nanoseconds, ``rank = (block // SMs) * warps + warp``:
the block's place among the blocks of its SM, if blocks are dispatched round-robin over the SMs
(an assumption about the hardware's block scheduler that only changes how well the delays
spread, never a result). On hardware :func:`sm_count` is ``%nsmid`` (PTX: the SM identifiers'
upper bound, which may exceed the number of SMs) and the sleep is ``nanosleep.u32`` (sm_70+;
PTX lets the hardware sleep anywhere in ``[0, 2 ns]``). On Numba's simulator, which has one
"SM" and no clock to spread over, :func:`sm_count` is 1 and the sleep does nothing (both change
only when a warp starts, never what it computes).

Measured (H100, session 29): ``nanosleep`` sleeps about 0.5 µs whatever it is asked for, so
every staggered warp started at least that late and each probe row lost 0.4-0.55 µs; the
25-200 ns spacing this probe was built for needs a finer clock (bench/NOTES.md, session 29).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..device import simulated

__all__ = ["sm_count", "sleep_ns", "stagger_start", "MAX_STAGGER_NS"]

#: The largest delay per rank a configuration may ask for (64 warps an SM: 128 µs at most,
#: under ``nanosleep``'s 1 ms bound).
MAX_STAGGER_NS = 2000

if simulated():

    def sm_count():
        """``%nsmid`` of the simulator: one SM."""
        return np.uint32(1)

    def sleep_ns(ns):
        """``nanosleep``: nothing to wait for on the simulator; ``ns`` must fit the PTX operand
        (uint32, at most 1 ms) as on the GPU."""
        if not 0 <= int(ns) <= 1_000_000:
            raise ValueError(f"nanosleep of {int(ns)} ns: the PTX operand is 0 .. 1000000")

else:
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    @intrinsic
    def sm_count(typingctx):
        """``%nsmid``: the upper bound of the SM identifiers (at least the number of SMs)."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(32), []), "mov.u32 $0, %nsmid;", "=r")
            return builder.call(asm, [])
        return types.uint32(), codegen

    @cuda.jit(device=True, inline=True)
    def sleep_ns(ns):
        """``nanosleep.u32 ns`` (sm_70+)."""
        cuda.nanosleep(np.uint32(ns))


@cuda.jit(device=True, inline=True)
def stagger_start(ns, warps):
    """Sleep ``rank * ns`` ns, ``rank = (blockIdx.x // sm_count()) * warps + warp``; ``ns``
    <= :data:`MAX_STAGGER_NS` (a compile-time constant of the caller: 0 compiles to nothing)."""
    if ns > 0:
        rank = (np.uint32(cuda.blockIdx.x) // sm_count()) * np.uint32(warps) \
            + np.uint32(cuda.threadIdx.x) // np.uint32(32)
        if rank > 0:
            sleep_ns(min(rank * np.uint32(ns), np.uint32(1_000_000)))
