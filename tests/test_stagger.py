"""The issue-order probe (:mod:`int4gemv.kernels.stagger`): a warp's start delay changes when it
issues, never what it computes; each warp waits its rank times the delay; its configuration field
refuses what no kernel compiles."""

from dataclasses import replace

import numpy as np
import pytest
from default_kernel_check import SIMULATED, check, make, run
from numba import cuda

from int4gemv.kernels.default import DefaultConfig
from int4gemv.kernels.sm_clock import sm_clock
from int4gemv.kernels.stagger import MAX_STAGGER_CYCLES, sm_count, stagger_start


@pytest.mark.skipif(not SIMULATED, reason="the stand-in is the simulator's")
def test_the_simulator_has_one_sm():
    assert sm_count() == 1


#: 10**6 cycles a rank (1 ms on the simulator's clock, 0.5 ms at 2 GHz): longer than the
#: simulator's own time between two readings, so that a wait shorter than the rank's shows (the
#: probe's delays are 50-400 cycles; stagger_start itself takes any uint32)
DELAY = 1_000_000


def test_each_warp_starts_its_rank_times_the_delay_late():
    # 3 blocks of 2 warps: on the simulator's one SM the ranks are 0..5; on a GPU, where
    # %nsmid > 3, every block is the first of its SM (rank = its warp). Lane 0 of each warp
    # reads its SM's clock around the wait.
    @cuda.jit
    def kernel(out):
        t0 = sm_clock()
        stagger_start(DELAY, 2)
        t1 = sm_clock()
        if cuda.threadIdx.x % 32 == 0:
            w = cuda.blockIdx.x * 2 + cuda.threadIdx.x // 32
            out[w, 0] = t0
            out[w, 1] = t1

    out = cuda.to_device(np.zeros((6, 2), np.uint64))
    kernel[3, 64](out)
    t = out.copy_to_host().astype(np.int64)
    for w in range(6):
        rank = w if SIMULATED else w % 2
        assert t[w, 1] - t[w, 0] >= DELAY * rank, (w, rank, t[w])


def test_the_stagger_field_validates_itself():
    assert DefaultConfig("float16", 1, 32, False).stagger == 0
    for bad in (-1, MAX_STAGGER_CYCLES + 1):
        with pytest.raises(ValueError, match="stagger"):
            DefaultConfig("float16", 1, 32, False, stagger=bad)
    for bad in (True, 1.5):
        with pytest.raises(TypeError, match="stagger"):
            DefaultConfig("float16", 1, 32, False, stagger=bad)


@pytest.mark.parametrize("dtype, N, K, bs, zp, cols, lanes, unroll, blocks", [
    ("float16", 37, 256, 32, False, 4, 8, 1, 3),     # fp16, never staged: several blocks, N tail
    ("bfloat16", 40, 128, 16, True, 1, 4, 1, 5),     # bf16 with its staged row, zero points
    ("float16", 9, 2056, 64, True, 2, 32, 2, 2),     # several steps a group, a K tail
])
def test_a_staggered_kernel_computes_what_the_unstaggered_one_does(rng, dtype, N, K, bs, zp, cols,
                                                                   lanes, unroll, blocks):
    # every warp past the first of the grid waits (on the simulator's one SM its rank is its
    # place in the grid); the output is checked against float64 and equals stagger 0 bit for bit
    a, w, bias = make(rng, N, K, bs, zp, 1, dtype)
    rows16 = -(-K // bs) * bs // 2 % 16 == 0
    base = DefaultConfig(dtype, 1, bs, zp, cols=cols, lanes=lanes, unroll=unroll, warps=2,
                         blocks_per_sm=blocks, weight_vector=rows16)
    plain, _ = run(a, w, bias, dtype, config=base, multiprocessors=1)
    staggered, _ = run(a, w, bias, dtype, config=replace(base, stagger=40), multiprocessors=1)
    check(staggered, a, w, bias, dtype)
    assert np.array_equal(staggered, plain)
