"""The M = 1 cp.async weight ring (``DefaultConfig.stages``, :mod:`int4gemv.kernels.default_async`)
and its intrinsics (:mod:`int4gemv.kernels.async_copy`).

The intrinsics run in one kernel on the simulator (the stand-ins: copies land only when a
``wait_group`` retires their group) and on a GPU (the PTX): the same expectations in both places.
The kernel tests force the ring through ``DefaultConfig`` at tiny shapes: every block size, with
and without zero points and bias, K and N tails, rows not 16-byte aligned (8-byte copies with a
zero-filled second half), several steps per group, several groups per warp, several warps, PDL,
fp16 and bf16 (both folds); float64 reference, poisoned outputs, every element (test_default_kernel).
"""

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv.kernels.async_copy import ASYNC_WAITS, async_commit, cp_async8, cp_async16, load16_shared
from int4gemv.kernels.default import DefaultConfig, choose_config
from int4gemv.kernels.default_config import BF16_STAGE_BYTES, SHARED_LIMIT
from int4gemv.kernels.default_m1 import STAGE_WORDS
from int4gemv.kernels.intrinsics import SIMULATED

sys.path.insert(0, str(Path(__file__).parent))
from test_default_kernel import DTYPES, check, make, run  # noqa: E402

@cuda.jit
def _copies(src, out):
    """One thread: three groups into a 12-word shared buffer, read at each wait."""
    ring = cuda.shared.array(16, np.uint32)
    if cuda.threadIdx.x == 0:
        for i in range(16):
            ring[i] = np.uint32(0xDEADBEEF)
        cp_async16(ring, 0, src, 16, True)          # group 0: bytes 16..31
        async_commit()
        cp_async8(ring, 4, src, 8, True)            # group 1: bytes 8..15, then zeros
        cp_async8(ring, 6, src, 40, False)
        async_commit()
        cp_async16(ring, 8, src, 0, False)          # group 2: zero-filled
        async_commit()
        ASYNC_WAITS[2]()                            # group 0 landed
        x = load16_shared(ring, 0)
        for i in range(4):
            out[i] = x[i]
        ASYNC_WAITS[0]()                            # all landed
        for k in range(3):
            x = load16_shared(ring, 4 * k + 4)
            for i in range(4):
                out[4 + 4 * k + i] = x[i]


def test_cp_async_copies_zero_fills_and_waits():
    src = np.arange(48, dtype=np.uint8) + 1
    out = cuda.to_device(np.zeros(16, np.uint32))
    _copies[1, 1](cuda.to_device(src), out)
    got = out.copy_to_host()
    w = src.view(np.uint32)
    assert list(got[:4]) == list(w[4:8])
    assert list(got[4:8]) == [w[2], w[3], 0, 0]
    assert list(got[8:12]) == [0, 0, 0, 0]
    assert list(got[12:16]) == [0xDEADBEEF] * 4      # never written


@cuda.jit
def _early(src, out):
    ring = cuda.shared.array(4, np.uint32)
    ring[0] = np.uint32(7)
    cp_async16(ring, 0, src, 0, True)
    async_commit()
    cp_async16(ring, 0, src, 16, True)   # not committed: never lands
    ASYNC_WAITS[1]()                     # one group may stay pending: nothing need land
    out[0] = ring[0]
    ASYNC_WAITS[0]()
    out[1] = ring[0]


@pytest.mark.skipif(not SIMULATED, reason="the stand-in's order (hardware may land copies earlier)")
def test_simulated_copies_land_only_when_waited_for():
    # The stand-in defers every copy to the wait that retires it (the latest the hardware may):
    # a slot read before its wait reads stale data, so the ring's kernel tests catch it.
    src = np.arange(32, dtype=np.uint8)
    out = cuda.to_device(np.zeros(2, np.uint32))
    _early[1, 1](cuda.to_device(src), out)
    assert list(out.copy_to_host()) == [7, src[:4].view(np.uint32)[0]]


def test_stage_bytes_constant_matches_the_stage():
    assert BF16_STAGE_BYTES == 4 * STAGE_WORDS


def test_stages_is_an_m1_mode_that_fits_shared_memory():
    with pytest.raises(ValueError, match="stages"):
        DefaultConfig("float16", 2, 32, False, stages=2)
    with pytest.raises(ValueError, match="stages"):
        DefaultConfig("float16", 1, 32, False, stages=2, pipeline=True)
    with pytest.raises(ValueError, match="stages"):
        DefaultConfig("float16", 1, 32, False, stages=1)
    DefaultConfig("float16", 1, 32, False, cols=4, unroll=2, stages=3)      # 48 KB: fits
    with pytest.raises(ValueError, match="stages"):                        # + the bf16 stage
        DefaultConfig("bfloat16", 1, 32, False, cols=4, unroll=2, stages=3)
    assert DefaultConfig("float16", 1, 32, False, cols=4, unroll=2, stages=3).ring_bytes \
        == SHARED_LIMIT


def test_choose_config_does_not_pick_the_ring_yet():
    for zp in (False, True):
        assert choose_config(1, 151936, 2048, 32, "float16", zp).stages == 0


def _ring(dtype, N, K, bs, zp, cols, lanes, unroll, stages, warps=1, pdl=False):
    rows16 = -(-K // bs) * bs // 2 % 16 == 0       # else two 8-byte copies per chunk
    return DefaultConfig(dtype, 1, bs, zp, cols=cols, lanes=lanes, unroll=unroll, warps=warps,
                         blocks_per_sm=1, pdl=pdl, stages=stages, weight_vector=rows16)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("zp", [False, True])
def test_ring_every_format(rng, dtype, bs, zp):
    # K = 2 bs + 8: a partial last group, a last chunk of one word (rows not 16-byte aligned
    # at bs 16: 8-byte copies); lanes 2, unroll 2: several steps; N = 65 over 16-column
    # groups: 5 groups for one warp (bf16 takes the fp16 fold), an N tail; stages 3.
    K = 2 * bs + 8
    a, w, bias = make(rng, 65, K, bs, zp, 1, dtype)
    config = _ring(dtype, 65, K, bs, zp, 1, 2, 2, 3)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)


@pytest.mark.parametrize(("N", "K", "bs", "zp", "cols", "lanes", "unroll", "stages", "warps", "pdl"), [
    (9, 64, 32, True, 1, 2, 1, 2, 1, False),      # 9 groups of one step: the ring wraps often
    (10, 64, 32, False, 2, 2, 1, 4, 1, True),     # more stages than some warps' items, PDL
    (8, 2056, 16, True, 1, 32, 2, 3, 1, False),   # 65 chunks: 2 steps per group, the last partial
    (5, 200, 64, True, 2, 4, 2, 2, 1, False),     # K tail inside a chunk, N tail inside a group
    (5, 200, 64, False, 2, 2, 1, 3, 1, False),    # 4 steps per group
    (3, 64, 32, False, 4, 32, 2, 2, 4, False),    # 4 warps, 3 with no column group
    (40, 136, 128, True, 1, 8, 1, 2, 4, False),   # 4 warps walking 10 groups: the warp's ring
])
def test_ring_walks_every_step_of_every_group(rng, N, K, bs, zp, cols, lanes, unroll, stages,
                                              warps, pdl):
    for dtype in DTYPES:
        a, w, bias = make(rng, N, K, bs, zp, 1, dtype)
        config = _ring(dtype, N, K, bs, zp, cols, lanes, unroll, stages, warps, pdl)
        y, _ = run(a, w, bias if N % 2 else None, dtype, config=config, multiprocessors=1)
        check(y, a, w, bias if N % 2 else None, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "bs", "zp", "over"), [
    ("float16", 32, False, dict(stages=2)), ("bfloat16", 32, False, dict(stages=2)),
    ("float16", 32, False, dict(unroll=1, stages=4)), ("float16", 16, True, dict(stages=4)),
    ("bfloat16", 32, False, dict(cols=2, stages=3, blocks_per_sm=6)),
])
def test_ring_at_lm_head_on_the_gpu(rng, dtype, bs, zp, over):
    # lm_head 151936 x 2048 with the geometries bench/NOTES.md times, on the real PTX.
    N, K = 151936, 2048
    a, w, bias = make(rng, N, K, bs, zp, 1, dtype)
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    config = replace(choose_config(1, N, K, bs, dtype, zp, multiprocessors=sms), **over)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=sms)
    check(y, a, w, bias, dtype)
