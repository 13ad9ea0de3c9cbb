"""A grid-wide barrier between the phases of a cooperative (all-resident) launch.

Counters live in an int32 device array ``done``: phase ``p``'s at ``done[p]``, the count of waits
that gave up at ``done[-1]``. The barrier is split in two so that a block can issue loads that
depend on nothing between its halves:

* :func:`arrive` — every thread of the block has made its stores; thread 0 fences and adds 1 to
  ``done[p]``. Called before the block issues its next loads: the fence would wait for them.
* :func:`wait_all` — thread 0 polls ``done[p]`` with plain volatile reads until it reaches
  ``gridDim.x``, then one ``ld.acquire.gpu`` orders the block's later loads after the other
  blocks' stores; a block barrier releases the other threads. After :data:`SPIN_LIMIT` polls it
  gives up and counts that in ``done[-1]``: a grid that is not resident at once fails, where it
  would hang (the caller checks ``done[-1]``).

On Numba's simulator blocks run one after another, so a barrier over more than one block gives
up after :data:`SPIN_LIMIT` polls (a few hundred there).
"""

from __future__ import annotations

from numba import cuda, uint32

from ..kernels.handoff import SPIN_LIMIT
from ..kernels.vector_loads import load_acquire, load_volatile

__all__ = ["arrive", "wait_all", "SPIN_LIMIT"]


@cuda.jit(device=True, inline=True)
def arrive(done, p):
    """The block has ended phase ``p``: once every thread's stores are made, count it."""
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.threadfence()
        cuda.atomic.add(done, p, 1)


@cuda.jit(device=True, inline=True)
def wait_all(done, p):
    """Return once every block of the grid has ended phase ``p`` (or gave up: ``done[-1]``)."""
    if cuda.threadIdx.x == 0:
        spins = 0
        while load_volatile(done, p)[0] < uint32(cuda.gridDim.x):   # a read, not an atomic
            spins += 1
            if spins == SPIN_LIMIT:
                cuda.atomic.add(done, done.shape[0] - 1, 1)
                break
        load_acquire(done, p)
    cuda.syncthreads()
