"""A block manager for Numba's CUDA simulator that yields while it polls (tests only).

numba-cuda's simulator runs each thread of a block as a Python thread. Its
``BlockManager.run`` polls those threads in a loop that never blocks, so it keeps the GIL for
whole switch intervals (5 ms) while the block's threads wait to reach or leave a
``syncthreads``: every barrier (and every shuffle stand-in, two barriers) costs several
intervals. :func:`install` replaces ``run`` with the same loop plus ``time.sleep(0)`` per pass,
which hands the GIL over. The semantics are unchanged (the same checks, in the same order).
Measured on the 2-core CI machine: a one-warp single-warp launch 0.89 → 0.27 s, a
default-tiling launch 1.1 → 0.63 s; tensor-core launches (their ``mma`` stand-in waits on
its own barrier) unchanged. Only the numba-cuda versions whose loop this copies are patched.
"""

import time

import numpy as np

__all__ = ["install", "PATCHED_VERSIONS"]

#: numba-cuda versions whose ``BlockManager.run`` this module's loop is a copy of.
PATCHED_VERSIONS = ("0.30.4",)


def _run(self, grid_point, *args):
    """numba-cuda 0.30.4's ``BlockManager.run`` with ``time.sleep(0)`` in the polling loop."""
    from numba.cuda.simulator.kernel import BlockThread

    threads, livethreads, blockedthreads = set(), set(), set()
    for block_point in np.ndindex(*self._block_dim):

        def target():
            self._f(*args)

        t = BlockThread(target, self, grid_point, block_point, self._debug)
        t.start()
        threads.add(t)
        livethreads.add(t)
    while livethreads:
        time.sleep(0)  # the one change: let the block's threads run now
        for t in livethreads:
            if t.syncthreads_blocked:
                blockedthreads.add(t)
            elif t.exception:
                for t_other in threads:  # abort the others, as the original does
                    t_other.abort = True
                    t_other.syncthreads_blocked = False
                    t_other.syncthreads_event.set()
                raise t.exception[0].with_traceback(t.exception[1])
        if livethreads == blockedthreads:
            for t in blockedthreads:
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
            blockedthreads = set()
        livethreads = set([t for t in livethreads if t.is_alive()])
    for t in threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def install() -> bool:
    """Patch the simulator's block manager; ``False`` (nothing patched) on another version."""
    from importlib.metadata import version

    from numba.cuda.simulator import kernel

    if version("numba-cuda") not in PATCHED_VERSIONS:
        return False
    kernel.BlockManager.run = _run
    return True
