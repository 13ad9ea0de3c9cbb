"""A property-based API fuzz (hypothesis) over every public int4gemv function: random wrong types,
dtypes and shapes in every argument. Each call either succeeds with finite output or raises one
of the documented errors (``TypeError``/``ValueError``) — never another exception, a hang or a
NaN. Tiny shapes and few examples, so it runs in seconds on the simulator."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import cuda

import int4gemv as ig

N, K, BS = 4, 32, 32
DOCUMENTED = (TypeError, ValueError)
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

_W = ig.quantize(np.random.default_rng(0).standard_normal((N, K)).astype(np.float32), BS,
                 symmetric=False)
_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, ml_dtypes.bfloat16, bool]
_SHAPES = [(), (K,), (1, K), (2, K), (K - 8,), (K, 1), (N,), (1, N), (2, N), (N + 1,), (17, K),
           (0, K), (2, 2, K), (2 * K,)]


@st.composite
def host_arrays(draw):
    shape = draw(st.sampled_from(_SHAPES))
    dtype = draw(st.sampled_from(_DTYPES))
    values = np.random.default_rng(draw(st.integers(0, 99))).standard_normal(shape)
    x = values.astype(dtype)
    if draw(st.booleans()) and x.ndim and x.shape[-1] > 1:
        x = x[..., ::2]  # non-contiguous
    return x


anything = st.one_of(
    st.none(), st.integers(-3, 2**40), st.floats(allow_nan=True), st.text(max_size=4),
    st.booleans(), st.lists(st.floats(-1, 1), max_size=4), st.just(object()), host_arrays(),
    host_arrays().map(lambda x: cuda.to_device(np.ascontiguousarray(x)) if x.dtype != ml_dtypes.bfloat16 else x),
)
good_a = st.sampled_from([(K,), (1, K), (3, K)]).map(
    lambda s: np.random.default_rng(1).standard_normal(s).astype(np.float16))


def _finite(result):
    if isinstance(result, np.ndarray):
        return bool(np.all(np.isfinite(result.astype(np.float64))))
    if hasattr(result, "copy_to_host"):
        return bool(np.all(np.isfinite(result.copy_to_host().astype(np.float64))))
    return True


@FUZZ
@given(a=st.one_of(good_a, anything), bias=st.one_of(st.none(), anything),
       out=st.one_of(st.none(), anything), stream=st.one_of(st.none(), anything),
       tuning=st.one_of(st.none(), st.sampled_from(["default", "single_warp", "auto", "x"]), anything),
       pdl=st.one_of(st.just(False), anything))
def test_gemv_fuzz(a, bias, out, stream, tuning, pdl):
    try:
        result = ig.gemv(a, _W, bias=bias, out=out, stream=stream, tuning=tuning, pdl=pdl)
    except DOCUMENTED:
        return
    assert _finite(result), "a NaN output from finite input"


@FUZZ
@given(a=st.one_of(good_a, anything), bias=st.one_of(st.none(), anything),
       tuning=st.one_of(st.none(), anything), variant=st.one_of(st.none(), anything))
def test_explain_and_prepare_fuzz(a, bias, tuning, variant):
    for call in (lambda: ig.explain(a, _W, bias=bias, tuning=tuning, variant=variant),
                 lambda: ig.prepare(a, _W, out=cuda.device_array(N, np.float16), bias=bias,
                                    tuning=tuning, variant=variant)):
        try:
            call()
        except DOCUMENTED:
            pass


@FUZZ
@given(w=st.one_of(host_arrays(), anything), block_size=st.one_of(st.sampled_from([16, 32]), anything),
       symmetric=st.one_of(st.booleans(), anything), dtype=st.one_of(st.just("float16"), anything))
def test_quantize_fuzz(w, block_size, symmetric, dtype):
    try:
        q = ig.quantize(w, block_size, symmetric, dtype=dtype)
    except DOCUMENTED:
        return
    assert np.all(np.isfinite(q.dequantize()))


@FUZZ
@given(packed=st.one_of(host_arrays(), anything), scales=st.one_of(host_arrays(), anything),
       zero_points=st.one_of(st.none(), host_arrays(), anything),
       k=st.one_of(st.just(K), anything), n=st.one_of(st.just(N), anything),
       bs=st.one_of(st.just(BS), anything), device=st.booleans())
def test_weight_constructors_fuzz(packed, scales, zero_points, k, n, bs, device):
    make = ig.QuantizedWeight.from_device if device else ig.QuantizedWeight
    try:
        w = make(packed, scales, zero_points, K=k, N=n, block_size=bs)
    except DOCUMENTED:
        return
    assert np.all(np.isfinite(w.dequantize()))


@FUZZ
@given(a=st.one_of(good_a, anything), bias=st.one_of(st.none(), anything),
       fields=st.fixed_dictionaries({}, optional={
           "variant": anything, "cols": anything, "unroll": anything, "activations": anything,
           "pdl": anything, "prefetch": anything}))
def test_reference_and_tuning_fuzz(a, bias, fields):
    try:
        ig.Tuning(**fields)
    except DOCUMENTED:
        pass
    try:
        ig.reference_gemv(a, _W, bias)
    except DOCUMENTED:
        pass


def test_fuzz_reaches_the_kernels():
    """The fuzz is not all refusals: a plain call through the same entry point computes."""
    a = np.random.default_rng(2).standard_normal(K).astype(np.float16)
    assert _finite(ig.gemv(a, _W, tuning="single_warp"))
    with pytest.raises(TypeError):
        ig.gemv(a, _W, stream=object())
