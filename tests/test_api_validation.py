"""Bad input is refused with TypeError/ValueError naming the argument, before any launch."""

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
import int4gemv.api as api


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if anything gets as far as binding a kernel launch."""
    def refuse(*args, **kwargs):
        raise AssertionError("a launch was prepared for invalid input")
    monkeypatch.setattr(api, "bind", refuse)


@pytest.fixture
def w(rng):
    return ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)


def test_good_call_gets_past_validation(w, rng, no_launch):
    with pytest.raises(AssertionError, match="launch was prepared"):
        ig.gemv(rng.standard_normal(64).astype(np.float16), w)


@pytest.mark.parametrize("make_a, exc, match", [
    (lambda r: r.standard_normal(64).astype(np.float32), TypeError, "a must be float16"),
    (lambda r: r.standard_normal(63).astype(np.float16), ValueError, "a must have shape"),
    (lambda r: r.standard_normal((2, 2, 64)).astype(np.float16), ValueError, "a must have shape"),
    (lambda r: r.standard_normal(128).astype(np.float16)[::2], ValueError, "a must be C-contiguous"),
    (lambda r: r.standard_normal((64, 2)).astype(np.float16).T, ValueError, "a must be C-contiguous"),
    (lambda r: [1.0] * 64, TypeError, "a must be a numpy array or a CUDA array"),
    (lambda r: np.frombuffer(r.bytes(130), np.uint8)[1:129].view(np.float16), ValueError, "a is misaligned"),
])
def test_bad_activations(w, rng, no_launch, make_a, exc, match):
    with pytest.raises(exc, match=match):
        ig.gemv(make_a(rng), w)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(bias=np.zeros(7, np.float16)), ValueError, "bias must have shape"),
    (dict(bias=np.zeros(8, np.float32)), TypeError, "bias must be float16"),
    (dict(out=np.zeros(9, np.float16)), ValueError, "out must have shape"),
    (dict(out=np.zeros((1, 8), np.float16)), ValueError, "out must have shape"),
    (dict(out=np.zeros(8, np.float32)), TypeError, "out must be float16"),
    (dict(variant="fastest"), ValueError, "variant"),
    (dict(stream=5), ValueError, "stream"),
    (dict(pdl=1), TypeError, "pdl must be a bool"),
    (dict(pdl=True), ValueError, "pdl is only accepted with device arrays"),
    (dict(prefetch=1), TypeError, "prefetch must be a bool"),
    (dict(prefetch=True), ValueError, "prefetch needs pdl=True"),
])
def test_bad_keywords(w, rng, no_launch, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ig.gemv(rng.standard_normal(64).astype(np.float16), w, **kwargs)


def test_host_device_mix_is_refused(w, rng, no_launch):
    a = rng.standard_normal(64).astype(np.float16)
    with pytest.raises(TypeError, match="out must be a CUDA array"):
        ig.gemv(cuda.to_device(a), w, out=np.zeros(8, np.float16))
    with pytest.raises(TypeError, match="bias must be a numpy array"):
        ig.gemv(a, w, bias=cuda.to_device(np.zeros(8, np.float16)))


def test_weight_must_be_a_quantized_weight(rng, no_launch):
    with pytest.raises(TypeError, match="w must be an int4gemv.QuantizedWeight"):
        ig.gemv(rng.standard_normal(64).astype(np.float16), np.zeros((8, 64)))


def test_bad_environment_is_refused_before_launch(w, rng, no_launch, monkeypatch):
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "maybe")
    with pytest.raises(ValueError, match="INT4GEMV_SINGLE_WARP='maybe'"):
        ig.gemv(rng.standard_normal(64).astype(np.float16), w)


def test_conflicting_controls_warn_naming_both(w, rng, monkeypatch):
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "0")
    monkeypatch.setenv("INT4GEMV_ENABLE_SINGLE_WARP_GEMV", "1")
    with pytest.warns(RuntimeWarning, match="INT4GEMV_ENABLE_SINGLE_WARP_GEMV"):
        plan = ig.explain(rng.standard_normal(64).astype(np.float16), w)
    assert plan.kernel == "default" and "INT4GEMV_SINGLE_WARP=0" in plan.control


def test_explain_validates_and_launches_nothing(w, rng, no_launch):
    plan = ig.explain(rng.standard_normal((3, 64)).astype(np.float16), w, variant="single_warp")
    assert plan.kernel == "default" and "batch M is 3" in plan.reason
    with pytest.raises(ValueError, match="a must have shape"):
        ig.explain(np.zeros(32, np.float16), w)
