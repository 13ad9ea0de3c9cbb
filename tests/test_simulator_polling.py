"""The tests' yielding block manager for the simulator (tests/simulator_polling.py)."""

import numpy as np
from numba import cuda

from int4gemv.device import simulated

SIMULATED = simulated()


def test_it_is_installed_on_the_simulator_for_the_pinned_numba_cuda():
    # A numba-cuda upgrade leaves the original loop in place (correct, ~1.4x slower CI): this
    # says so, so that the copy in simulator_polling.py is checked against the new version.
    # On a GPU the simulator is not used and stays as Numba ships it.
    from importlib.metadata import version

    from numba.cuda.simulator.kernel import BlockManager
    from simulator_polling import PATCHED_VERSIONS, _run

    assert version("numba-cuda") in PATCHED_VERSIONS, "check simulator_polling._run against it"
    assert (BlockManager.run is _run) == SIMULATED


@cuda.jit
def _rotate_through_shared(x, out):
    buf = cuda.shared.array(64, np.float32)
    i = cuda.threadIdx.x
    for step in range(3):  # each round reads what another thread wrote before the barrier
        buf[i] = x[i] + step
        cuda.syncthreads()
        x[i] = buf[(i + 1) % 64]
        cuda.syncthreads()
    out[i] = x[i]


def test_barriers_still_order_every_thread_of_a_block():
    # on the simulator: the patched manager's barriers; on a GPU the same kernel, as a reference
    x = np.arange(64, dtype=np.float32)
    d_x, d_out = cuda.to_device(x), cuda.to_device(np.full(64, np.nan, np.float32))
    _rotate_through_shared[1, 64](d_x, d_out)
    want = x.copy()
    for step in range(3):
        want = np.roll(want + step, -1)
    np.testing.assert_array_equal(d_out.copy_to_host(), want)
