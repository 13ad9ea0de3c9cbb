"""The eager call path (issue 22, item 4): what the launch cache may remember and what it must
read again on every call.

* the environment is read at call time (:func:`int4gemv.tuning.read_environment` reads
  ``os.environ``'s backing dict) and a miss is resolved from the same snapshot as its key;
* a ``Tuning`` is keyed by identity and kept alive by its entry;
* a tensor's shape, strides and address are read afresh on every call (in-place resizes);
* Numba device arrays' keys are kept per live object and dropped when the array dies (GPU);
* a weight's cached launches are dropped when the weight dies;
* a torch tensor call key reads every field of every array, in one Python call.
"""

import gc
import os
import types
import weakref

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
import int4gemv.api as api
from int4gemv import pipeline
from int4gemv.array_keys import array_key, call_key
from int4gemv.device import simulated
from int4gemv.tuning import ENV_VARS, read_environment

SIMULATED = simulated()
TOL = 2e-3  # per-output error against float64, relative to sum |a| |w| (tests/test_kernels.py)


def _err(y, a, w):
    ref = ig.reference_gemv(a, w)
    scale = np.abs(a.astype(np.float64)) @ np.abs(w.dequantize(np.float64)).T
    return np.max(np.abs(y.astype(np.float64) - ref) / scale)


def _small(rng, N=8, K=64):
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32)
    a_h = rng.standard_normal(K).astype(np.float16)
    return w, a_h, cuda.to_device(a_h), cuda.device_array(N, np.float16)


@pytest.mark.parametrize("values", [
    {}, {"INT4GEMV_SINGLE_WARP": "1"}, {"INT4GEMV_SINGLE_WARP_COLS": " 4 ", "INT4GEMV_SINGLE_WARP": "auto"},
    {name: "é" for name in ENV_VARS},
])
def test_read_environment_is_what_os_environ_get_returns(monkeypatch, values):
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    assert read_environment() == tuple(os.environ.get(n) for n in ENV_VARS)
    monkeypatch.delenv(next(iter(values), ENV_VARS[0]), raising=False)  # a change is seen at once
    assert read_environment() == tuple(os.environ.get(n) for n in ENV_VARS)


def test_read_environment_follows_a_mapping_put_in_place_of_os_environ(monkeypatch):
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "1")
    assert read_environment()[0] == "1"
    monkeypatch.setattr(os, "environ", {"INT4GEMV_SINGLE_WARP_UNROLL": "2"})
    assert read_environment() == (None, None, None, "2")


def test_a_cached_call_follows_environment_changes(rng, monkeypatch):
    w, a_h, a, out = _small(rng, 8, 64)
    pipeline.clear_caches()
    seen = []
    real_plan = api.plan
    monkeypatch.setattr(api, "plan",
                        lambda call, resolved: seen.append(resolved) or real_plan(call, resolved))
    for primary, count in (("1", 1), ("0", 2), ("1", 2), (None, 3)):
        if primary is None:
            monkeypatch.delenv("INT4GEMV_SINGLE_WARP")
        else:
            monkeypatch.setenv("INT4GEMV_SINGLE_WARP", primary)
        out.copy_to_device(np.full(8, np.nan, np.float16))
        ig.gemv(a, w, out=out)
        assert pipeline.cached_launch_count() == count
        assert _err(out.copy_to_host(), a_h, w) <= TOL
    assert [r.tuning.variant for r in seen] == ["single_warp", "default", "default"]


def test_a_miss_is_resolved_from_the_snapshot_its_key_was_made_of(rng, monkeypatch):
    """The environment is read once per call: the key and the resolution of a miss see the same
    values even if ``os.environ`` changes in between (here: read_environment reports a value
    os.environ no longer has)."""
    w, a_h, a, out = _small(rng, 8, 64)
    pipeline.clear_caches()
    snapshot = ("1", None, None, None)
    monkeypatch.setattr(api, "read_environment", lambda: snapshot)
    seen = []
    real_plan = api.plan
    monkeypatch.setattr(api, "plan",
                        lambda call, resolved: seen.append(resolved) or real_plan(call, resolved))
    ig.gemv(a, w, out=out)
    assert seen[0].tuning.variant == "single_warp"
    assert seen[0].source("variant") == "INT4GEMV_SINGLE_WARP=1"
    assert [key[0] for key in pipeline.LAUNCHES] == [(None, False, False, snapshot)]


def test_equal_tunings_are_cached_apart_and_each_entry_keeps_its_tuning(rng):
    w, a_h, a, out = _small(rng, 8, 64)
    pipeline.clear_caches()
    t1, t2 = ig.Tuning("default"), ig.Tuning("default")
    for t, count in ((t1, 1), (t1, 1), (t2, 2), ("default", 3), ("default", 3)):
        out.copy_to_device(np.full(8, np.nan, np.float16))
        assert ig.gemv(a, w, out=out, tuning=t) is out
        assert pipeline.cached_launch_count() == count
        assert _err(out.copy_to_host(), a_h, w) <= TOL
    alive = weakref.ref(t1)
    del t1
    gc.collect()
    assert alive() is not None  # its id stays unique while its entry exists
    assert any(entry[2] is alive() for entry in pipeline.LAUNCHES.values())


class Tensor:
    """A torch-like tensor (torch need not be installed) whose shape and strides can change in
    place, as ``resize_`` does: over device memory on a GPU, over host memory (the simulator's
    device memory) on the simulator."""

    def __init__(self, host):
        self.host, self.shape, self.dtype = host, host.shape, "torch.float16"
        self.device = type("device", (), {"type": "cuda", "index": 0})()
        self._stride = tuple(s // host.itemsize for s in host.strides)
        self._memory = None if SIMULATED else cuda.to_device(host)

    def data_ptr(self):
        return self.host.ctypes.data if SIMULATED else self._memory.device_ctypes_pointer.value

    def stride(self):
        return self._stride

    def element_size(self):
        return self.host.itemsize

    def values(self):
        """The elements now (copied from the device on a GPU)."""
        if not SIMULATED:
            cuda.synchronize()
            self._memory.copy_to_host(self.host)
        return self.host


def test_a_tensor_changed_in_place_is_validated_again(rng):
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)
    a_h = rng.standard_normal(64).astype(np.float16)
    a, out = Tensor(a_h), Tensor(np.full(16, np.nan, np.float16))
    out.shape = (8,)  # a view of the first 8 elements, as after resize_(8)
    pipeline.clear_caches()
    ig.gemv(a, w, out=out)
    ig.gemv(a, w, out=out)
    assert pipeline.cached_launch_count() == 1
    assert _err(out.values()[:8], a_h, w) <= TOL
    assert np.all(np.isnan(out.values()[8:]))  # nothing written past the view
    out.shape = (16,)  # resized in place: same object, same address
    with pytest.raises(ValueError, match="out must have shape"):
        ig.gemv(a, w, out=out)
    out.shape, out._stride = (8,), (2,)  # as_strided_ in place
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        ig.gemv(a, w, out=out)


def test_a_and_bias_changed_in_place_after_cached_calls_are_validated_again(rng):
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)
    a_h = rng.standard_normal(64).astype(np.float16)
    a, out = Tensor(a_h), Tensor(np.full(8, np.nan, np.float16))
    bias = Tensor(rng.standard_normal(16).astype(np.float16))
    bias.shape = (8,)
    pipeline.clear_caches()
    for _ in range(3):
        ig.gemv(a, w, bias=bias, out=out)
    assert pipeline.cached_launch_count() == 1
    bias.shape = (16,)  # resized in place
    with pytest.raises(ValueError, match="bias must have shape"):
        ig.gemv(a, w, bias=bias, out=out)
    bias.shape = (8,)
    ig.gemv(a, w, bias=bias, out=out)
    a.shape = (32,)  # resized in place to a prefix
    with pytest.raises(ValueError, match="a must have shape"):
        ig.gemv(a, w, bias=bias, out=out)


def test_a_dead_weights_launches_are_dropped_and_its_identity_hits_nothing(rng):
    """Entries are keyed on ``id(w)``: they go when ``w`` dies, before the identity can be
    reused, so a later weight never runs another weight's binding."""
    pipeline.clear_caches()
    w, a_h, a, out = _small(rng)
    keep, _, _, _ = _small(rng)
    ig.gemv(a, keep, out=out)
    ig.gemv(a, w, out=out)
    ig.gemv(a, w, out=out, tuning="default")
    assert pipeline.cached_launch_count() == 3
    del w
    gc.collect()
    assert pipeline.cached_launch_count() == 1   # only keep's entry is left
    for _ in range(20):  # new weights, often at a freed identity: each computes its own result
        w2 = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)
        out.copy_to_device(np.full(8, np.nan, np.float16))
        ig.gemv(a, w2, out=out)
        assert _err(out.copy_to_host(), a_h, w2) <= TOL
        del w2
    gc.collect()
    assert pipeline.cached_launch_count() == 1


def _lookalike_torch():
    """A tensor class that the key readers take for torch's own (module ``torch...``, with
    ``is_cuda``); its fields can be changed in place."""
    class Tensor:
        def __init__(self, ptr, shape):
            self.ptr, self.shape, self.contiguous, self.dtype = ptr, shape, True, "torch.float16"
            self.device, self.is_cuda = types.SimpleNamespace(type="cuda", index=0), True

        def data_ptr(self):
            return self.ptr

        def stride(self):
            return (1,)

        def is_contiguous(self):
            return self.contiguous
    Tensor.__module__ = "torch_lookalike"
    return Tensor


def test_a_torch_call_key_reads_every_field_of_every_array():
    Tensor = _lookalike_torch()
    a, out, bias = Tensor(1 << 20, (64,)), Tensor(2 << 20, (8,)), Tensor(3 << 20, (8,))
    for args in ((a, out, None), (a, out, bias)):
        base = call_key(*args, "how", 7)
        assert base is not None and base[:3] == ("how", 7, Tensor)
        for x in args[:2] + ((bias,) if args[2] is not None else ()):
            for field, other in (("ptr", 4 << 20), ("shape", (16,)), ("contiguous", False),
                                 ("dtype", "torch.bfloat16")):
                saved = getattr(x, field)
                setattr(x, field, other)
                assert call_key(*args, "how", 7) != base, field
                setattr(x, field, saved)
        assert call_key(*args, "how", 7) == base
        assert call_key(*args, "other", 7) != base and call_key(*args, "how", 8) != base
    assert call_key(a, out) != call_key(a, out, bias)
    assert call_key(a, out, bias)[:11] == call_key(a, out)
    numba_out = cuda.device_array(8, np.float16)    # another class: read array by array
    assert call_key(a, numba_out, None, "how", 7) == ("how", 7, array_key(a), array_key(numba_out),
                                                      None)
    assert call_key(np.zeros(64, np.float16), out) is None
    assert call_key(a, out, "not an array") is None


def test_a_numba_call_key_reads_each_array_once_per_live_object():
    """The Numba call reader (chosen on a GPU, tested here on stand-ins with ``gpu_data``): ``a``
    and ``out`` through their kept per-object keys; a bias or another class, array by array."""
    from int4gemv import array_keys

    class DeviceArray:
        def __init__(self, ptr, shape):
            self.dtype, self.shape, self.strides = np.dtype(np.float16), shape, (2,)
            self.gpu_data = types.SimpleNamespace(device_pointer=ptr)
            self._ary = np.zeros(shape, np.float16)   # what the simulator's reader looks at

        def copy_to_host(self):
            raise AssertionError("a key read never copies")
    reader = array_keys._numba_call_reader(DeviceArray)
    a, out, out2 = DeviceArray(1 << 20, (64,)), DeviceArray(2 << 20, (8,)), DeviceArray(3 << 20, (8,))
    key = reader(a, out, None, "how", 7)
    assert key == ("how", 7, array_keys._numba_key(a), array_keys._numba_key(out))
    assert key[2][-1] == 1 << 20 and key[3][-1] == 2 << 20
    assert reader(a, out2, None, "how", 7) != key and reader(out, a, None, "how", 7) != key
    bias = DeviceArray(4 << 20, (8,))
    assert reader(a, out, bias, "how", 7) == ("how", 7, array_key(a), array_key(out), array_key(bias))
    assert reader(a, cuda.device_array(8, np.float16), None, "how", 7)[2] == array_key(a)


def test_keys_of_things_that_are_not_device_arrays_are_none():
    assert array_key(None) is None and array_key(np.zeros(3, np.float16)) is None
    assert array_key("abc") is None and array_key([1.0]) is None


class _Interface:
    """A CUDA array seen only through ``__cuda_array_interface__`` (as CuPy's are)."""

    def __init__(self, shape, strides, pointer=0x7000):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": "<f2",
                                         "data": (pointer, False), "version": 3}


def test_an_interface_arrays_key_reads_its_strides_pointer_shape_and_dtype():
    """Two views of one pointer and shape that differ in their strides (a square ``out`` and its
    transpose) must not share a key: the cached launch of one would serve the other, which
    validation would refuse as not C-contiguous."""
    base = array_key(_Interface((8, 8), (16, 2)))
    assert base == array_key(_Interface((8, 8), (16, 2)))
    assert base != array_key(_Interface((8, 8), (2, 16)))    # the transpose
    assert base != array_key(_Interface((8, 8), None))       # C order stated by omission
    assert base != array_key(_Interface((8, 8), (16, 2), pointer=0x8000))
    assert base != array_key(_Interface((4, 16), (32, 2)))


@pytest.mark.gpu
def test_real_torch_tensors_resized_or_repointed_in_place_are_seen(rng):
    torch = pytest.importorskip("torch")
    N, K = 256, 512
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32)
    a_h = rng.standard_normal(K).astype(np.float16)
    a = torch.from_numpy(a_h).cuda()
    out = torch.full((N,), float("nan"), dtype=torch.float16, device="cuda")
    pipeline.clear_caches()
    ig.gemv(a, w, out=out)
    ig.gemv(a, w, out=out)
    assert pipeline.cached_launch_count() == 1
    torch.cuda.synchronize()
    assert _err(out.cpu().numpy(), a_h, w) <= TOL
    out.resize_(N // 2)
    with pytest.raises(ValueError, match="out must have shape"):
        ig.gemv(a, w, out=out)
    out.resize_(2 * N)  # storage for a stride-2 view of N elements
    out.as_strided_((N,), (2,))
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        ig.gemv(a, w, out=out)
    fresh = torch.full((N,), float("nan"), dtype=torch.float16, device="cuda")
    out.set_(fresh)  # same Python object, new memory
    b_h = rng.standard_normal(K).astype(np.float16)
    a.copy_(torch.from_numpy(b_h))
    ig.gemv(a, w, out=out)
    torch.cuda.synchronize()
    assert _err(fresh.cpu().numpy(), b_h, w) <= TOL
    out.data = fresh.view(torch.bfloat16)  # same object and address, another dtype
    with pytest.raises(TypeError, match="out"):
        ig.gemv(a, w, out=out)
    out.data = fresh
    a.data = a.cpu()  # same object, now on the host
    with pytest.raises((TypeError, ValueError), match="a"):
        ig.gemv(a, w, out=out)


@pytest.mark.gpu
def test_numba_array_keys_are_kept_per_live_array_only(rng):
    from int4gemv import array_keys
    w, a_h, a, out = _small(rng, 256, 512)
    pipeline.clear_caches()
    for _ in range(3):  # new arrays (ids may be reused): each computes its own result
        b_h = rng.standard_normal(512).astype(np.float16)
        b = cuda.to_device(b_h)
        out.copy_to_device(np.full(256, np.nan, np.float16))
        ig.gemv(b, w, out=out)
        assert _err(out.copy_to_host(), b_h, w) <= TOL
        ident = id(b)
        assert ident in array_keys._NUMBA_KEYS
        del b
        gc.collect()
        assert ident not in array_keys._NUMBA_KEYS


def test_the_host_cost_probe_measures_every_call_form():
    """``bench/eager_host_cost.py`` (the CPU-side probe of this path) runs and times each form, on
    the simulator in a process of its own (on a GPU too), and refuses a real GPU."""
    import json
    import subprocess
    import sys

    code = ("import json; from bench import eager_host_cost as e; "
            "print(json.dumps(e.measure(calls=5, repeats=1)))")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where bench/ is
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    best = json.loads(done.stdout.splitlines()[-1])
    assert set(best) == {"prepare()-like floor", "gemv(tuning=None)", 'gemv(variant="default")',
                         "gemv(tuning=Tuning(...))"}
    assert all(us > 0 for us in best.values())
    if not simulated():
        from bench import eager_host_cost
        with pytest.raises(RuntimeError, match="simulator only"):
            eager_host_cost.measure(calls=1, repeats=1)


def test_a_host_bias_after_a_cached_device_call_is_refused_as_a_mix(rng):
    """A call key is made only when every given array has one: a numpy ``bias`` on the device
    path (no key) misses the cache and is refused as a host/device mix, even right after a cached
    call of the same ``a`` and ``out`` without bias (it is never silently dropped)."""
    w, _, a, out = _small(rng)
    ig.gemv(a, w, out=out)
    ig.gemv(a, w, out=out)
    with pytest.raises(TypeError, match="bias"):
        ig.gemv(a, w, out=out, bias=np.zeros(8, np.float16))
