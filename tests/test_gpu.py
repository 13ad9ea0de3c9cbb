"""Real-GPU matrix at real sizes: every workload shape, both tilings, every tuning, interop.

Marked ``gpu``: skipped with a printed reason on the simulator; on a GPU machine they all run.
"""

import json
import pathlib

import numpy as np
import pytest

import int4gemv as ig
from int4gemv import pipeline
from int4gemv.kernels import single_warp

pytestmark = pytest.mark.gpu
WORKLOADS = json.loads((pathlib.Path(__file__).parents[1] / "int4gemv" / "workloads"
                        / "qwen3_vl_2b_decode.json").read_text())
SHAPES = [(p["name"], p["N"], p["K"]) for p in WORKLOADS["projections"]]
TOL = 2e-3


def _run(a, w, variant, bias=None, stream=None):
    from numba import cuda
    out = cuda.to_device(np.full(w.N, np.nan, np.float16))
    d_bias = None if bias is None else cuda.to_device(bias)
    ig.gemv(cuda.to_device(a), w, bias=d_bias, out=out, stream=stream, variant=variant)
    y = out.copy_to_host().astype(np.float64)
    assert np.all(np.isfinite(y)), "unwritten outputs"
    return y


def _err(y, ref):
    return np.linalg.norm(y - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("name, N, K", SHAPES, ids=[s[0] for s in SHAPES])
def test_workload_shapes_both_tilings(rng, name, N, K):
    w = ig.quantize((rng.standard_normal((N, K)) * 0.02).astype(np.float32), 32)
    a = rng.standard_normal(K).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float16)
    ref = ig.reference_gemv(a, w, bias)
    y_def = _run(a, w, "default", bias)
    y_sw = _run(a, w, "single_warp", bias)
    assert _err(y_def, ref) <= TOL and _err(y_sw, ref) <= TOL
    assert ig.explain(a, w, variant="single_warp").kernel == "single_warp"


@pytest.mark.parametrize("cols, unroll", single_warp.TUNINGS)
def test_every_tuning(rng, monkeypatch, cols, unroll):
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP_COLS", str(cols))
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP_UNROLL", str(unroll))
    for N, K in ((1000, 2048), (777, 6144)):  # resident and streaming, N tails
        w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32, symmetric=False)
        a = rng.standard_normal(K).astype(np.float16)
        assert _err(_run(a, w, "single_warp"), ig.reference_gemv(a, w)) <= TOL


@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_default_tiling_real_sizes(rng, bs, symmetric):
    N, K = 3001, 4104  # N and K tails, a partial last block for every block size
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), bs, symmetric)
    a = rng.standard_normal((3, K)).astype(np.float16)
    y = ig.gemv(a, w)
    assert _err(y.astype(np.float64), ig.reference_gemv(a, w)) <= TOL


def test_torch_and_cupy_arrays_and_streams(rng):
    torch = pytest.importorskip("torch")
    N, K = 4096, 2048
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32)
    a = torch.from_numpy(rng.standard_normal(K).astype(np.float16)).cuda()
    out = torch.full((N,), float("nan"), dtype=torch.float16, device="cuda")
    s = torch.cuda.Stream()
    for variant in ("default", "single_warp"):
        out.fill_(float("nan"))
        with torch.cuda.stream(s):
            assert ig.gemv(a, w, out=out, stream=s, variant=variant) is out
        s.synchronize()
        y = out.cpu().numpy().astype(np.float64)
        assert _err(y, ig.reference_gemv(a.cpu().numpy(), w)) <= TOL
    cupy = pytest.importorskip("cupy")
    ca = cupy.asarray(a.cpu().numpy())
    cout = cupy.full(N, cupy.nan, dtype=cupy.float16)
    ig.gemv(ca, w, out=cout, stream=cupy.cuda.Stream.null.ptr, variant="single_warp")
    cupy.cuda.runtime.deviceSynchronize()
    assert _err(cupy.asnumpy(cout).astype(np.float64), ig.reference_gemv(cupy.asnumpy(ca), w)) <= TOL


def test_bound_launch_is_reused_and_rebinds_on_new_arrays(rng):
    from numba import cuda
    N, K = 2048, 2048
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32)
    a1 = rng.standard_normal(K).astype(np.float16)
    a2 = rng.standard_normal(K).astype(np.float16)
    d1, d2 = cuda.to_device(a1), cuda.to_device(a2)
    out = cuda.device_array(N, np.float16)
    pipeline.clear_caches()
    ig.gemv(d1, w, out=out, variant="single_warp")
    ig.gemv(d1, w, out=out, variant="single_warp")
    assert pipeline.cached_launch_count() == 1
    ig.gemv(d2, w, out=out, variant="single_warp")
    assert pipeline.cached_launch_count() == 2
    ig.gemv(d2, w, out=out, tuning=ig.Tuning("single_warp"))
    assert pipeline.cached_launch_count() == 3
    assert _err(out.copy_to_host().astype(np.float64), ig.reference_gemv(a2, w)) <= TOL


def test_bound_launch_follows_environment_changes(rng, monkeypatch):
    from numba import cuda
    N, K = 1000, 2048
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32)
    a = rng.standard_normal(K).astype(np.float16)
    d, out = cuda.to_device(a), cuda.device_array(N, np.float16)
    pipeline.clear_caches()
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "1")
    for cols in ("4", "2", "4"):
        monkeypatch.setenv("INT4GEMV_SINGLE_WARP_COLS", cols)
        out[:] = np.full(N, np.nan, np.float16)
        ig.gemv(d, w, out=out)
        ig.gemv(d, w, out=out)
        assert _err(out.copy_to_host().astype(np.float64), ig.reference_gemv(a, w)) <= TOL
    assert pipeline.cached_launch_count() == 2  # one binding per distinct environment, reused after
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "0")
    ig.gemv(d, w, out=out)
    assert pipeline.cached_launch_count() == 3


@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("K1", [2048, 6144])  # the second launch in registers / streaming mode
def test_programmatic_launches_wait_for_their_producer(rng, K1, prefetch):
    """A chain where each launch reads the previous one's output, all with ``pdl=True`` (and
    the L2 prefetch) on one stream, eager and captured in a graph: a missing wait would read
    stale activations."""
    torch = pytest.importorskip("torch")
    N1, N2 = 2048, 1024
    w1 = ig.quantize((rng.standard_normal((N1, K1)) * 0.05).astype(np.float32), 32)
    w2 = ig.quantize((rng.standard_normal((N2, N1)) * 0.05).astype(np.float32), 32)
    a = torch.from_numpy(rng.standard_normal(K1).astype(np.float16)).cuda()
    mid = torch.empty(N1, dtype=torch.float16, device="cuda")
    out = torch.empty(N2, dtype=torch.float16, device="cuda")
    s = torch.cuda.Stream()

    def chain():
        ig.gemv(a, w1, out=mid, stream=s, variant="single_warp", pdl=True, prefetch=prefetch)
        ig.gemv(mid, w2, out=out, stream=s, variant="single_warp", pdl=True, prefetch=prefetch)

    def check():
        y1 = ig.reference_gemv(a.cpu().numpy(), w1)
        y2 = ig.reference_gemv(mid.cpu().numpy(), w2)
        assert _err(mid.cpu().numpy().astype(np.float64), y1) <= TOL
        assert _err(out.cpu().numpy().astype(np.float64), y2) <= TOL

    with torch.cuda.stream(s):
        for _ in range(3):
            a.copy_(torch.randn(K1, dtype=torch.float16, device="cuda"))
            mid.fill_(float("nan"))
            out.fill_(float("nan"))
            chain()
            s.synchronize()
            check()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            chain()
        for _ in range(3):
            a.copy_(torch.randn(K1, dtype=torch.float16, device="cuda"))
            mid.fill_(float("nan"))
            out.fill_(float("nan"))
            g.replay()
            s.synchronize()
            check()
