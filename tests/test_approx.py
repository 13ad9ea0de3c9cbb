"""The one-instruction exponential and reciprocal (:mod:`int4gemv.kernels.approx`) against float64.

The same kernel runs on the simulator (the stand-ins) and on a GPU (``ex2.approx.ftz.f32``,
``rcp.approx.ftz.f32``): within PTX's error bounds for normal values, and flushing and special
values exactly as the instructions define them."""

import numpy as np
import pytest
from numba import cuda

from int4gemv.kernels.approx import exp2_approx, rcp_approx

TINY = np.finfo(np.float32).tiny


@cuda.jit
def _both(x, e, r):
    i = cuda.grid(1)
    if i < x.shape[0]:
        e[i] = exp2_approx(x[i])
        r[i] = rcp_approx(x[i])


def _run(x):
    x = np.asarray(x, np.float32)
    e, r = cuda.to_device(np.full(x.size, np.nan, np.float32)), cuda.to_device(np.full(x.size, np.nan, np.float32))
    _both[-(-x.size // 64), 64](cuda.to_device(x), e, r)
    return e.copy_to_host(), r.copy_to_host()


def test_normal_values_are_within_the_instructions_bounds(rng):
    x = np.concatenate([rng.uniform(-120, 120, 200), rng.standard_normal(200) * 4,
                        [-125.5, -1.0, -0.5, 0.25, 1.0, 3.0, 127.5]]).astype(np.float32)
    e, r = _run(x)
    want_e, want_r = np.exp2(x.astype(np.float64)), 1.0 / x.astype(np.float64)
    assert np.all(np.abs(e / want_e - 1) <= 2.0 ** -21)   # 2 ulp
    ulp = np.spacing(np.abs(want_r).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(r - want_r) <= ulp)


def test_special_values_and_flushing_are_the_instructions():
    sub = np.float32(TINY / 2)    # a subnormal input counts as 0 (unflushed, 1/sub = 1.7e38)
    x = np.array([0.0, -0.0, np.inf, -np.inf, -200.0, 200.0, sub, -sub, 2.0 ** 127, np.nan], np.float32)
    e, r = _run(x)
    np.testing.assert_array_equal(e[:9], [1, 1, np.inf, 0, 0, np.inf, 1, 1, np.inf])
    np.testing.assert_array_equal(r[[0, 1, 2, 3, 6, 7]], [np.inf, -np.inf, 0, 0, np.inf, -np.inf])
    np.testing.assert_allclose(r[4:6], [-1 / 200, 1 / 200], rtol=2.0 ** -23)   # 1 ulp
    assert np.signbit(r[3]) and not np.signbit(r[2])   # 1/-inf = -0
    assert r[8] == 0                                    # 2**-127 is subnormal: flushed
    assert np.isnan(e[9]) and np.isnan(r[9])


@pytest.mark.parametrize("g", [-200.0, -30.0, -1.0, 0.0, 0.5, 30.0, 200.0])
def test_the_chains_silu_is_float64_silu_far_inside_an_fp16_rounding(g):
    # exp(-|g|) as 2**(-|g| log2 e) with the product rounded to float32: at g = -30 the relative
    # error is ~2**-19.7, a 200th of fp16's half ulp (2**-12)
    from int4gemv.decode.silu_mul import silu_times

    @cuda.jit
    def kernel(out):
        out[0] = silu_times(np.float32(g), np.float32(1.5))

    out = cuda.to_device(np.full(1, np.nan, np.float32))
    kernel[1, 1](out)
    want = g / (1 + np.exp(-g)) * 1.5
    assert abs(out.copy_to_host()[0] - want) <= 2.0 ** -18 * abs(want) + 1e-30
