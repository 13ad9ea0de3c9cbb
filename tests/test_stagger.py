"""The issue-order probe (:mod:`int4gemv.kernels.stagger`): a warp's start delay changes when it
issues, never what it computes; its stand-ins and its configuration field refuse what the GPU
would."""

from dataclasses import replace

import numpy as np
import pytest
from default_kernel_check import SIMULATED, check, make, run

from int4gemv.kernels.default import DefaultConfig
from int4gemv.kernels.stagger import MAX_STAGGER_NS, sleep_ns, sm_count


@pytest.mark.skipif(not SIMULATED, reason="the stand-ins are the simulator's")
def test_the_stand_ins_have_one_sm_and_the_ptx_operand_range():
    assert sm_count() == 1
    for ns in (0, 1, 1_000_000):
        assert sleep_ns(ns) is None
    for ns in (-1, 1_000_001):
        with pytest.raises(ValueError, match="nanosleep"):
            sleep_ns(ns)


def test_the_stagger_field_validates_itself():
    assert DefaultConfig("float16", 1, 32, False).stagger == 0
    for bad in (-1, MAX_STAGGER_NS + 1):
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
    # every warp past the first of the grid sleeps (on the simulator's one SM its rank is its
    # place in the grid); the output is checked against float64 and equals stagger 0 bit for bit
    a, w, bias = make(rng, N, K, bs, zp, 1, dtype)
    rows16 = -(-K // bs) * bs // 2 % 16 == 0
    base = DefaultConfig(dtype, 1, bs, zp, cols=cols, lanes=lanes, unroll=unroll, warps=2,
                         blocks_per_sm=blocks, weight_vector=rows16)
    plain, _ = run(a, w, bias, dtype, config=base, multiprocessors=1)
    staggered, _ = run(a, w, bias, dtype, config=replace(base, stagger=40), multiprocessors=1)
    check(staggered, a, w, bias, dtype)
    assert np.array_equal(staggered, plain)
