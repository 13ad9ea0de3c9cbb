"""Self-validating words: how a chain kernel can learn that its input is complete without waiting
for the whole previous grid (issue 21's second lever, as an option of the conventional chain).

With ``DecodeChain(handoff="words")`` every vector a step writes (each layer's ``qkv``, ``h``,
``gu`` and next ``x``) lives in one arena of its own, written once a step, and one ordinary kernel
(:func:`fill_kernel`) sets the arena to :data:`SENTINEL` halves at the start of the step. The
GEMVs are programmatic launches that never execute ``griddepcontrol.wait``: once its first
weights are in flight, every thread of a block re-reads (``ld.volatile.global``, 16 bytes) its
share of the block's activations until no half of them is the sentinel, and a block barrier
follows (:func:`await_words`). No fence, counter or whole-grid wait is on the path from a
producer's last store to its consumers' first fold.

Why it is correct:

* the sentinel ``0xFFFF`` is a NaN that no kernel stores (the GPU converts every NaN to the
  canonical ``0x7FFF``), and each half is written by one 2-byte store, so a half read as
  anything else is its final value;
* a consumer's later reads of vectors it does not poll (the residual it adds as ``bias``) are
  complete too: the vector it polled was written by blocks that had each polled that residual
  (or an input computed after it) before writing;
* the kernels read the activations again after the poll through the read-only path
  (``ld.global.nc``), which PTX reserves for data no one writes while the kernel runs. What
  that rule guards against is a stale line in an SM's L1; none can exist here, since every
  reader of a vector polls it first with reads that bypass L1, so no line of a vector is
  cached before the vector is complete (an assumption about the hardware that the GPU race test,
  1000 replays against the waiting chain, checks);
* no vector is written twice in a step, and the next step's fill runs after this step's last
  kernel has ended (an ordinary launch), so no poll can see a value of another step; the
  step's first GEMV is an ordinary launch too, so the fill's sentinels are visible before any
  kernel that polls can start (a programmatic launch after the fill, with no
  ``griddepcontrol.wait``, would have no such guarantee);
* a programmatic launch starts only after every block of the previous grid has started, so a
  block that polls never holds an SM that a producer still needs to begin.

A poll gives up after :data:`SPIN_LIMIT` reads (the output is then wrong, which the chain's
checks catch, rather than a hang). On Numba's simulator launches run in order, so every poll
finds its input at once.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, uint32

from .intrinsics import SIMULATED
from .vector_loads import load16_volatile

__all__ = ["SENTINEL", "SPIN_LIMIT", "has_sentinel", "await_words", "fill_kernel"]

#: Polls after which a waiting block gives up (seconds on a GPU; on the simulator, whose blocks
#: run one after another, a few hundred).
SPIN_LIMIT = 200 if SIMULATED else 1 << 22
#: The half every vector of the arena holds until its producer writes it (a NaN no kernel stores).
SENTINEL = np.uint16(0xFFFF)
_S16, _LOW = np.uint32(16), np.uint32(0xFFFF)


@cuda.jit(device=True, inline=True)
def has_sentinel(v):
    """Whether any of the 8 halves of the four uint32 words ``v`` (a 16-byte load) is :data:`SENTINEL`."""
    found = False
    for e in range(4):
        found = found or (v[e] & _LOW) == _LOW or (v[e] >> _S16) == _LOW
    return found


@cuda.jit(device=True, inline=True)
def await_words(array, words16, per16):
    """Return once the first ``words16`` 16-byte words of ``array`` (1-D, 16-byte aligned;
    ``per16`` of its elements make 16 bytes) hold no sentinel, to every thread of the block:
    each thread polls its words ``threadIdx, threadIdx + blockDim, ...``, then a block barrier.
    Every thread of the block must call it."""
    q, step, end = uint32(cuda.threadIdx.x), uint32(cuda.blockDim.x), uint32(words16)
    while q < end:     # uint32 counters: a 64-bit range would divide (a call that waits for every load)
        spins = uint32(0)
        while has_sentinel(load16_volatile(array, q * uint32(per16))) and spins < SPIN_LIMIT:
            spins += uint32(1)
        q += step
    cuda.syncthreads()


@cuda.jit
def fill_kernel(arena):
    """Every uint32 of ``arena`` (the uint32 view of the step's vectors) to two sentinels."""
    for i in range(cuda.grid(1), arena.shape[0], cuda.gridsize(1)):
        arena[i] = uint32(0xFFFFFFFF)
