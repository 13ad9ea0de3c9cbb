"""``%clock64`` (:mod:`int4gemv.kernels.sm_clock`), the clock of the stagger's waits: a warp's
readings never go back and advance across work; the stand-in is the host's nanosecond clock."""

import time

import numpy as np
from numba import cuda

from int4gemv.device import simulated
from int4gemv.kernels.sm_clock import sm_clock


@cuda.jit
def _two_readings(out, spins):
    # lane 0 of each block: a reading, a loop of `spins` dependent steps, a reading
    if cuda.threadIdx.x == 0:
        t0 = sm_clock()
        x = np.uint64(1)
        for _ in range(spins):
            x = (x * np.uint64(3) + np.uint64(1)) % np.uint64(1000003)   # no wrap-around
        t1 = sm_clock()
        out[cuda.blockIdx.x, 0] = t0
        out[cuda.blockIdx.x, 1] = t1
        out[cuda.blockIdx.x, 2] = x


def test_a_warps_clock_advances_across_work_and_never_goes_back():
    out = cuda.to_device(np.zeros((3, 3), np.uint64))
    before = time.monotonic_ns()
    _two_readings[3, 32](out, 2000)
    t = out.copy_to_host()
    after = time.monotonic_ns()
    assert np.all(t[:, 0] > 0)
    assert np.all(t[:, 1] > t[:, 0])     # 2000 dependent multiply-adds take cycles
    if simulated():                      # the stand-in: monotonic_ns, the blocks in order
        assert np.all((before <= t[:, 0]) & (t[:, 1] <= after))
        assert np.all(np.diff(t[:, :2].ravel().astype(np.int64)) >= 0)
