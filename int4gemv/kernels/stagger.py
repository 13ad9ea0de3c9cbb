"""A warp's start delay by its rank in its SM: the issue-order probe of the M = 1 kernels.

On a grid where every warp folds one step (the decode shapes at M = 1), all of an SM's weight
loads go out at once, the memory system serves them in no particular order, and each warp's
last load, which its fold waits for (one scoreboard: bench/NOTES.md, session 16), lands near
the end of the stream: the SM's whole fold then follows the stream (session 15's probes). If the
warps of an SM issue one after another, at about the rate the SM's share of the bandwidth drains
them, the early warps' bytes land early and their folds overlap the later warps' loads.

:func:`stagger_start` holds a warp until ``rank * cycles`` SM clock cycles after it began,
``rank = (block // SMs) * warps + warp``: the block's place among the blocks of its SM, if blocks
are dispatched round-robin over the SMs (an assumption about the hardware's block scheduler that
only changes how well the delays spread, never a result). It spins on the SM's ``%clock64``
(:mod:`.sm_clock`; at 1.98 GHz, 100 cycles are 50 ns). Two coarser clocks were tried first and
set every delay alike (H100, bench/NOTES.md sessions 29-30): ``nanosleep`` slept about 0.5 µs
whatever it was asked for, and a spin on ``%globaltimer`` cost every staggered row the same
≈ 0.46 µs whether the last warp asked for 175 or 700 ns, as a clock stepping in about 1 µs
would. On hardware :func:`sm_count` is ``%nsmid`` (PTX: the SM
identifiers' upper bound, which may exceed the number of SMs). On Numba's simulator
:func:`sm_count` is 1 (one SM) and a cycle is a nanosecond of the host's clock: the delays are
real but tiny, and they change only when a warp starts, never what it computes.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..device import simulated
from .sm_clock import sm_clock

__all__ = ["sm_count", "stagger_start", "MAX_STAGGER_CYCLES"]

#: The largest delay per rank a configuration may ask for (64 warps an SM: 256 000 cycles at most).
MAX_STAGGER_CYCLES = 4000

if simulated():

    def sm_count():
        """``%nsmid`` of the simulator: one SM."""
        return np.uint32(1)

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
def stagger_start(cycles, warps):
    """Spin until ``rank * cycles`` SM cycles after the call, ``rank = (blockIdx.x // sm_count())
    * warps + warp``; ``cycles`` <= :data:`MAX_STAGGER_CYCLES` (a compile-time constant of the
    caller: 0 compiles to nothing)."""
    if cycles > 0:
        rank = (np.uint32(cuda.blockIdx.x) // sm_count()) * np.uint32(warps) \
            + np.uint32(cuda.threadIdx.x) // np.uint32(32)
        if rank > 0:
            until = sm_clock() + np.uint64(rank * np.uint32(cycles))
            while sm_clock() < until:
                pass
