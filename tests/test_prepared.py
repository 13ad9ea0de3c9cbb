"""``int4gemv.prepare``: validated, planned and bound once; each call is one launch that reads the
current contents of ``a``. Runs on the simulator in CI and on a GPU."""

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv import pipeline


def _weight(rng, N, K):
    return ig.quantize((rng.standard_normal((N, K)) * 0.05).astype(np.float32), 32)


def _err(y, ref):
    return np.linalg.norm(y - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("variant", ["default", "single_warp"])
def test_each_call_reads_the_current_activations(rng, variant):
    N, K = 12, 96
    w = _weight(rng, N, K)
    a_h = rng.standard_normal(K).astype(np.float16)
    bias_h = rng.standard_normal(N).astype(np.float16)
    a, bias = cuda.to_device(a_h), cuda.to_device(bias_h)
    out = cuda.to_device(np.full(N, np.nan, np.float16))
    run = ig.prepare(a, w, out=out, bias=bias, variant=variant)
    assert run.plan.kernel == variant and repr(run).startswith(f"PreparedGemv({variant}")
    for _ in range(2):  # fresh activations written in place, output poisoned each time
        a_h = rng.standard_normal(K).astype(np.float16)
        a.copy_to_device(a_h)
        out.copy_to_device(np.full(N, np.nan, np.float16))
        assert run() is out
        cuda.synchronize()
        y = out.copy_to_host().astype(np.float64)
        assert np.all(np.isfinite(y))
        assert _err(y, ig.reference_gemv(a_h, w, bias_h)) < 2e-3


def test_a_given_tuning_is_prepared_and_explained(rng):
    w = _weight(rng, 8, 64)
    a = cuda.to_device(rng.standard_normal(64).astype(np.float16))
    out = cuda.device_array(8, np.float16)
    run = ig.prepare(a, w, out=out, tuning=ig.Tuning("single_warp", cols=2, unroll=1))
    assert (run.plan.kernel, run.plan.cols, run.plan.unroll) == ("single_warp", 2, 1)
    assert repr(run).startswith("PreparedGemv(single_warp 2x1, M=1, N=8, K=64, float16")


def test_controls_are_read_once_when_prepared(rng, monkeypatch):
    w = _weight(rng, 8, 64)
    a = cuda.to_device(rng.standard_normal(64).astype(np.float16))
    out = cuda.device_array(8, np.float16)
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "1")
    run = ig.prepare(a, w, out=out)
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "0")
    assert run.plan.kernel == "single_warp" and ig.explain(a, w).kernel == "default"


@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a launch was prepared for invalid input")
    monkeypatch.setattr(pipeline, "bind_kernel", refuse)


@pytest.mark.parametrize("case, exc, match", [
    ("host a", TypeError, "a must be a CUDA array for prepare"),
    ("host a, device out", TypeError, "a must be a CUDA array for prepare"),
    ("host a, device out and bias", TypeError, "a must be a CUDA array for prepare"),
    ("no out", ValueError, "out is required"),
    ("bad out", ValueError, "out must have shape"),
    ("pdl int", TypeError, "pdl must be a bool"),
    ("prefetch alone", ValueError, "prefetch needs pdl=True"),
    ("bad variant", ValueError, "variant"),
    ("bad tuning", TypeError, "tuning must be"),
    ("both", TypeError, "not both"),
])
def test_bad_input_is_refused_before_any_launch(rng, no_launch, case, exc, match):
    w = _weight(rng, 8, 64)
    a_h = rng.standard_normal(64).astype(np.float16)
    a, out = cuda.to_device(a_h), cuda.device_array(8, np.float16)
    kwargs = {
        "host a": dict(a=a_h, out=np.zeros(8, np.float16)),
        "host a, device out": dict(a=a_h, out=out),
        "host a, device out and bias": dict(a=a_h, out=out, bias=cuda.device_array(8, np.float16)),
        "no out": dict(a=a, out=None),
        "bad out": dict(a=a, out=cuda.device_array(9, np.float16)),
        "pdl int": dict(a=a, out=out, pdl=1),
        "prefetch alone": dict(a=a, out=out, prefetch=True),
        "bad variant": dict(a=a, out=out, variant="fastest"),
        "bad tuning": dict(a=a, out=out, tuning=["single_warp"]),
        "both": dict(a=a, out=out, tuning="auto", variant="auto"),
    }[case]
    with pytest.raises(exc, match=match):
        ig.prepare(w=w, **kwargs)


def test_cached_launch_is_reused_and_keyed_on_arrays_tuning_and_weight(rng):
    """The launch cache lives with the pipeline: same arrays and tuning reuse one binding, a new
    array, tuning or weight binds again, and every call computes the right thing."""
    from int4gemv import pipeline
    w1, w2 = _weight(rng, 8, 64), _weight(rng, 8, 64)
    a_h = rng.standard_normal(64).astype(np.float16)
    a, out = cuda.to_device(a_h), cuda.device_array(8, np.float16)
    pipeline.clear_caches()
    for w, tuning, count in ((w1, "single_warp", 1), (w1, "single_warp", 1), (w1, "default", 2),
                             (w2, "default", 3), (w1, ig.Tuning("single_warp"), 4)):
        out.copy_to_device(np.full(8, np.nan, np.float16))
        assert ig.gemv(a, w, out=out, tuning=tuning) is out
        assert pipeline.cached_launch_count() == count
        assert _err(out.copy_to_host().astype(np.float64), ig.reference_gemv(a_h, w)) < 2e-3
    assert not hasattr(w1, "_launches")


def test_a_prepared_call_launches_on_the_stream_it_is_given():
    """``prepared(stream)`` launches its bound launch with ``stream``'s raw handle (as
    :func:`int4gemv.device.stream_handle` reads it), not on the default stream."""
    from types import SimpleNamespace

    from int4gemv.prepared import PreparedGemv

    class Bound:
        def __init__(self):
            self.handles = []

        def launch(self, handle):
            self.handles.append(handle)
    out = object()
    run = PreparedGemv(None, Bound(), out, ())
    assert run(SimpleNamespace(cuda_stream=0x55)) is out   # a torch/CuPy-like stream object
    assert run(0x77) is out and run() is out
    assert run.bound.handles == [0x55, 0x77, 0]
