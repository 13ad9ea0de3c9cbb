"""A property-based API fuzz (hypothesis) over every public int4gemv function: random wrong types,
dtypes and shapes in every argument. Each call either raises one of the documented errors
(``TypeError``/``ValueError``) — never another exception or a hang — or succeeds, and then its
result is checked: ``gemv`` and a prepared launch against the float64 reference of the same
inputs, ``explain`` names a registered kernel for the call's shape, ``quantize`` dequantizes
within a step of its input, a weight holds the arrays it was given. Tiny shapes and few
examples, so it runs in seconds on the simulator."""

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
# Well-formed bias and out (host or device), so that some calls succeed and are checked.
good_bias = st.booleans().map(lambda d: (cuda.to_device if d else np.asarray)(
    np.random.default_rng(3).standard_normal(N).astype(np.float16)))
good_out = st.tuples(st.sampled_from([(N,), (1, N), (3, N)]), st.booleans()).map(
    lambda sd: cuda.to_device(np.zeros(sd[0], np.float16)) if sd[1] else np.zeros(sd[0], np.float16))


#: Per-output error bound relative to the size of the terms (tests/test_kernels.py): the
#: single-warp kernel's, the looser of the two (the fuzz draws either kernel).
TOL = 9 * 2.0 ** -11 + K / 16 * 2.0 ** -24


def _host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def _check_result(result, a, bias):
    """``result`` (numpy or device) against the float64 reference of ``a`` and ``bias``."""
    y = _host(result).astype(np.float64)
    a_h = _host(a)
    b_h = None if bias is None else _host(bias)
    ref = ig.reference_gemv(a_h, _W, b_h)
    assert y.shape == ref.shape, f"result shape {y.shape}, reference {ref.shape}"
    terms = np.abs(a_h.astype(np.float64)) @ np.abs(_W.dequantize(np.float64)).T
    if b_h is not None:
        terms = terms + np.abs(b_h.astype(np.float64))
    err = np.abs(y - ref) / terms
    assert np.all(np.isfinite(y)) and np.max(err) <= TOL, f"error {np.max(err):.2e} of the terms"


def _poisoned(out):
    """Fill a given numpy/device ``out`` with NaN first, so an unwritten output is seen."""
    if isinstance(out, np.ndarray) and out.flags.writeable and out.dtype == np.float16:
        out[...] = np.nan
    elif hasattr(out, "copy_to_device") and np.dtype(out.dtype) == np.float16 and out.size:
        try:
            out.copy_to_device(np.full(out.shape, np.nan, np.float16))
        except Exception:  # noqa: BLE001 - a non-contiguous device array keeps its values
            pass
    return out


@FUZZ
@given(a=st.one_of(good_a, good_a.map(cuda.to_device), anything),
       bias=st.one_of(st.none(), good_bias, anything),
       out=st.one_of(st.none(), good_out, anything), stream=st.one_of(st.none(), anything),
       tuning=st.one_of(st.none(), st.sampled_from(["default", "single_warp", "auto", "x"]), anything),
       pdl=st.one_of(st.just(False), anything))
def test_gemv_fuzz(a, bias, out, stream, tuning, pdl):
    try:
        result = ig.gemv(a, _W, bias=bias, out=_poisoned(out), stream=stream, tuning=tuning, pdl=pdl)
    except DOCUMENTED:
        return
    if out is not None:
        assert result is out
    _check_result(result, a, bias)


@FUZZ
@given(M=st.sampled_from([None, 1, 3]), device=st.booleans(), with_bias=st.booleans(),
       with_out=st.booleans(), stream=st.sampled_from([None, 0]),
       tuning=st.sampled_from([None, "default", "single_warp", "auto",
                               ig.Tuning("single_warp", cols=2, unroll=1),
                               ig.Tuning("default", cols=2, unroll=2)]))
def test_gemv_fuzz_well_formed_calls_compute_the_product(M, device, with_bias, with_out, stream,
                                                         tuning):
    """Every well-formed call succeeds, and its result is the float64 reference's."""
    rng = np.random.default_rng(M or 0)
    a = rng.standard_normal(K if M is None else (M, K)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float16) if with_bias else None
    out = np.full((N,) if M is None else (M, N), np.nan, np.float16) if with_out else None
    move = cuda.to_device if device else (lambda x: x)
    args = dict(bias=None if bias is None else move(bias), out=None if out is None else move(out),
                tuning=tuning)
    if device:
        args["stream"] = stream
    result = ig.gemv(move(a), _W, **args)
    if with_out:
        assert result is args["out"]
    _check_result(result, a, bias)


@FUZZ
@given(a=st.one_of(good_a, good_a.map(cuda.to_device), anything),
       bias=st.one_of(st.none(), good_bias, anything),
       tuning=st.one_of(st.none(), anything), variant=st.one_of(st.none(), anything))
def test_explain_and_prepare_fuzz(a, bias, tuning, variant):
    from int4gemv.registry import descriptor
    try:
        plan = ig.explain(a, _W, bias=bias, tuning=tuning, variant=variant)
    except DOCUMENTED:
        plan = None
    if plan is not None:
        M = 1 if np.ndim(_host(a)) == 1 else _host(a).shape[0]
        assert descriptor(plan.kernel).name == plan.kernel
        assert (plan.M, plan.N, plan.K, plan.problem.bias) == (M, N, K, bias is not None)
    try:
        out = cuda.to_device(np.full(N, np.nan, np.float16))
        run = ig.prepare(a, _W, out=out, bias=bias, tuning=tuning, variant=variant)
    except DOCUMENTED:
        return
    assert run() is out
    _check_result(out, a, bias)


@FUZZ
@given(w=st.one_of(host_arrays(), anything), block_size=st.one_of(st.sampled_from([16, 32]), anything),
       symmetric=st.one_of(st.booleans(), anything), dtype=st.one_of(st.just("float16"), anything))
def test_quantize_fuzz(w, block_size, symmetric, dtype):
    try:
        q = ig.quantize(w, block_size, symmetric, dtype=dtype)
    except DOCUMENTED:
        return
    x = np.asarray(w, np.float64)
    step = np.repeat(np.abs(q.scales.astype(np.float64)), q.block_size, axis=1)[:, :q.K]
    # within a step of the stored scale (half a step, or the clipped symmetric end), and the
    # fp16 rounding of the input
    assert q.dequantize(np.float64).shape == x.shape
    assert np.all(np.abs(q.dequantize(np.float64) - x) <= step + 1e-3 * np.abs(x))


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
    # It holds the arrays it was given (values, in its canonical shapes).
    assert np.array_equal(w.packed.reshape(-1), _host(packed).reshape(-1))
    assert np.array_equal(w.scales.astype(np.float64).reshape(-1),
                          _host(scales).astype(w.scales.dtype).astype(np.float64).reshape(-1))
    if zero_points is not None:
        assert np.array_equal(w.zero_points.reshape(-1), _host(zero_points).reshape(-1))


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
    """The fuzz is not all refusals: a plain call through the same entry point computes, and
    the check it applies sees a wrong result."""
    a = np.random.default_rng(2).standard_normal(K).astype(np.float16)
    y = ig.gemv(a, _W, tuning="single_warp")
    _check_result(y, a, None)
    with pytest.raises(AssertionError, match="error"):
        _check_result(y + np.float16(0.05) * np.abs(y).max(), a, None)
    with pytest.raises(TypeError):
        ig.gemv(a, _W, stream=object())
