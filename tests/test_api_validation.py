"""Bad input is refused with TypeError/ValueError naming the argument, before any launch."""

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
import int4gemv.pipeline as pipeline
from int4gemv.device import simulated

SIMULATED = simulated()

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if anything gets as far as binding a kernel launch."""
    def refuse(*args, **kwargs):
        raise AssertionError("a launch was prepared for invalid input")
    monkeypatch.setattr(pipeline, "bind_kernel", refuse)
    pipeline.clear_caches()


@pytest.fixture
def w(rng):
    return ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)


def test_good_call_gets_past_validation(w, rng, no_launch):
    with pytest.raises(AssertionError, match="launch was prepared"):
        ig.gemv(rng.standard_normal(64).astype(np.float16), w)


@pytest.mark.parametrize("make_a, exc, match", [
    (lambda r: r.standard_normal(64).astype(np.float32), TypeError, "a must be float16"),
    (lambda r: r.standard_normal(64).astype(BF16), TypeError, "a must be float16; got bfloat16"),
    (lambda r: r.standard_normal(63).astype(np.float16), ValueError, "a must have shape"),
    (lambda r: np.array(1.0, np.float16), ValueError, "a must have shape"),
    (lambda r: r.standard_normal((2, 2, 64)).astype(np.float16), ValueError, "a must have shape"),
    (lambda r: np.zeros((0, 64), np.float16), ValueError,
     r"a must have shape \[K\] or \[M, K\] with K=64 and M >= 1; got \(0, 64\)"),
    (lambda r: r.standard_normal((17, 64)).astype(np.float16), ValueError, "at most 16"),
    (lambda r: r.standard_normal(128).astype(np.float16)[::2], ValueError, "a must be C-contiguous"),
    (lambda r: r.standard_normal((64, 2)).astype(np.float16).T, ValueError, "a must be C-contiguous"),
    (lambda r: [1.0] * 64, TypeError, "a must be a numpy array or a CUDA array"),
    (lambda r: "a string", TypeError, "a must be a numpy array or a CUDA array"),
    (lambda r: np.frombuffer(r.bytes(130), np.uint8)[1:129].view(np.float16), ValueError, "a is misaligned"),
])
def test_bad_activations(w, rng, no_launch, make_a, exc, match):
    with pytest.raises(exc, match=match):
        ig.gemv(make_a(rng), w)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(bias=np.zeros(7, np.float16)), ValueError, "bias must have shape"),
    (dict(bias=np.zeros((1, 8), np.float16)), ValueError, "bias must have shape"),
    (dict(bias=np.zeros(8, np.float32)), TypeError, "bias must be float16"),
    (dict(bias=np.zeros(8, BF16)), TypeError, "bias must be float16; got bfloat16"),
    (dict(bias=np.zeros(16, np.float16)[::2]), ValueError, "bias must be C-contiguous"),
    (dict(bias=[0.0] * 8), TypeError, "bias must be a numpy array"),
    (dict(out=np.zeros(9, np.float16)), ValueError, "out must have shape"),
    (dict(out=np.zeros((1, 8), np.float16)), ValueError, "out must have shape"),
    (dict(out=np.zeros(8, np.float32)), TypeError, "out must be float16"),
    (dict(out=np.zeros(8, BF16)), TypeError, "out must be float16; got bfloat16"),
    (dict(out=np.zeros(16, np.float16)[::2]), ValueError, "out must be C-contiguous"),
    (dict(variant="fastest"), ValueError, "variant"),
    (dict(tuning="fastest"), ValueError, "tuning"),
    (dict(tuning=3), TypeError, "tuning must be"),
    (dict(tuning="auto", variant="default"), TypeError, "not both"),
    (dict(stream=5), ValueError, "stream"),
    (dict(stream="s"), TypeError, "stream must be"),
    (dict(stream=1.5), TypeError, "stream must be"),
    (dict(stream=True), TypeError, "stream must be"),
    (dict(stream=-1), ValueError, "stream handle must be non-negative"),
    (dict(pdl=1), TypeError, "pdl must be a bool"),
    (dict(pdl=True), ValueError, "pdl is only accepted with device arrays"),
    (dict(tuning=ig.Tuning(pdl=True)), ValueError, "pdl is only accepted with device arrays"),
    (dict(prefetch=1), TypeError, "prefetch must be a bool"),
    (dict(prefetch=True), ValueError, "prefetch needs pdl=True"),
])
def test_bad_keywords(w, rng, no_launch, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ig.gemv(rng.standard_normal(64).astype(np.float16), w, **kwargs)


def test_size_one_dimensions_may_have_any_stride(w, rng):
    """C-contiguity ignores the stride of a size-1 dimension (numpy's rule): ``v[None]``
    (stride 0) and a ``[1, K]`` row view of a bigger array (a long leading stride) are
    accepted and give the product of ``v`` as a ``[1, K]`` batch."""
    v = rng.standard_normal(64).astype(np.float16)
    want = ig.gemv(v.reshape(1, 64), w)
    big = np.zeros((3, 128), np.float16)
    big[1, :64] = v
    row = big[1:2, :64]
    assert v[None].strides == (0, 2) and row.strides == (256, 2) and row.flags.c_contiguous
    long = np.lib.stride_tricks.as_strided(v, shape=(1, 64), strides=(4096, 2))
    for a in (v[None], row, long):
        np.testing.assert_array_equal(ig.gemv(a, w), want)


def test_host_device_mix_is_refused(w, rng, no_launch):
    a = rng.standard_normal(64).astype(np.float16)
    with pytest.raises(TypeError, match="out must be a CUDA array"):
        ig.gemv(cuda.to_device(a), w, out=np.zeros(8, np.float16))
    with pytest.raises(TypeError, match="bias must be a numpy array"):
        ig.gemv(a, w, bias=cuda.to_device(np.zeros(8, np.float16)))


@pytest.mark.parametrize("name", ["a", "bias", "out"])
def test_bad_device_arrays_are_refused_by_name(w, rng, monkeypatch, name):
    """Device arrays of the wrong dtype, shape or strides, named, also after a good call of the
    same weight was cached."""
    good = dict(a=cuda.to_device(rng.standard_normal(64).astype(np.float16)),
                bias=cuda.to_device(np.zeros(8, np.float16)), out=cuda.device_array(8, np.float16))
    ig.gemv(**good, w=w)  # bound and cached
    monkeypatch.setattr(pipeline, "bind_kernel", None)  # nothing else may bind
    size = 64 if name == "a" else 8
    for bad, exc, what in ((cuda.device_array(size, np.float32), TypeError, "must be float16"),
                           (cuda.device_array(size + 1, np.float16), ValueError, "must have shape"),
                           (cuda.device_array(2 * size, np.float16)[::2], ValueError,
                            "must be C-contiguous")):
        with pytest.raises(exc, match=f"{name} {what}"):
            ig.gemv(**dict(good, **{name: bad}), w=w)


def test_weight_must_be_a_quantized_weight(rng, no_launch):
    with pytest.raises(TypeError, match="w must be an int4gemv.QuantizedWeight"):
        ig.gemv(rng.standard_normal(64).astype(np.float16), np.zeros((8, 64)))


def test_bf16_weight_refuses_mixed_dtypes_naming_the_argument(rng, no_launch):
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32, dtype="bfloat16")
    assert w.dtype == "bfloat16"
    with pytest.raises(TypeError, match="a must be bfloat16; got float16"):
        ig.gemv(rng.standard_normal(64).astype(np.float16), w)
    with pytest.raises(TypeError, match="bias must be bfloat16"):
        ig.gemv(rng.standard_normal(64).astype(BF16), w, bias=np.zeros(8, np.float16))


def test_bf16_device_call_without_out_is_refused_naming_out(rng, no_launch):
    """A bf16 device call must pass ``out``: Numba has no bfloat16 arrays, so the fp16 array
    gemv would allocate would receive bf16 bits. A bf16 device array is a torch-like bf16
    tensor (its storage is uint16 bf16 bits); refused before any launch is bound."""
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32, dtype="bfloat16")
    a = FakeTensor(rng.standard_normal(64).astype(BF16), "torch.bfloat16")
    with pytest.raises(ValueError, match="out is required for a bfloat16 device call"):
        ig.gemv(a, w)
    with pytest.raises(AssertionError, match="launch was prepared"):   # with out it gets through
        ig.gemv(a, w, out=FakeTensor(np.zeros(8, BF16), "torch.bfloat16"))


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
    assert plan.kernel == "tensor_core" and "batch M is 3" in plan.reason  # the M >= 2 default
    with pytest.raises(ValueError, match="a must have shape"):
        ig.explain(np.zeros(32, np.float16), w)


class FakeTensor:
    """The attributes the pipeline reads of a torch tensor (torch need not be installed): its
    memory is the host numpy array on the simulator (what the simulator's device memory is) and a
    device copy of it on a GPU (``to_host`` reads it back)."""

    def __init__(self, host, dtype="torch.float16", device_type="cuda", index=0):
        self.host, self.dtype, self.shape = host, dtype, host.shape
        self.device = type("device", (), {"type": device_type, "index": index,
                                          "__repr__": lambda s: f"{device_type}:{index}"})()
        self.mem = None
        if not SIMULATED and host.flags.c_contiguous:
            from numba import cuda
            self.mem = cuda.to_device(host.view(np.uint8))

    def data_ptr(self):
        if self.mem is None:
            return self.host.ctypes.data
        return self.mem.device_ctypes_pointer.value

    def to_host(self):
        if self.mem is None:
            return self.host
        return self.mem.copy_to_host().view(self.host.dtype).reshape(self.shape)

    def stride(self):
        return tuple(s // self.host.itemsize for s in self.host.strides)

    def element_size(self):
        return self.host.itemsize


def test_torch_like_tensors_are_read_without_an_array_interface(w, rng, no_launch):
    """A bf16 torch tensor has no __cuda_array_interface__; dtype, device and strides are read
    from the tensor itself and checked by name."""
    a16 = rng.standard_normal(64).astype(np.float16)
    with pytest.raises(TypeError, match="a must be float16; got bfloat16"):
        ig.gemv(FakeTensor(a16.astype(BF16), "torch.bfloat16"), w)
    with pytest.raises(TypeError, match="a is a tensor on cpu"):
        ig.gemv(FakeTensor(a16, device_type="cpu"), w)
    with pytest.raises(ValueError, match="a must be C-contiguous"):
        ig.gemv(FakeTensor(np.zeros(128, np.float16)[::2]), w)
    with pytest.raises(AssertionError, match="launch was prepared"):  # a good one gets through
        ig.gemv(FakeTensor(a16), w, out=FakeTensor(np.zeros(8, np.float16)))


def test_torch_like_fp16_tensor_runs(rng):
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)
    a = rng.standard_normal(64).astype(np.float16)
    out = np.full(8, np.nan, np.float16)
    out_tensor = FakeTensor(out)
    ig.gemv(FakeTensor(a), w, out=out_tensor)
    if not SIMULATED:
        from numba import cuda
        cuda.synchronize()
    y = out_tensor.to_host().astype(np.float64)
    ref = ig.reference_gemv(a, w)
    assert np.all(np.isfinite(y)) and np.linalg.norm(y - ref) / np.linalg.norm(ref) < 2e-3


# Issue 22, item 3: each bad argument is named before anything runs.

def test_a_read_only_out_is_refused_naming_out(w, rng, no_launch):
    out = np.zeros(8, np.float16)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        ig.gemv(rng.standard_normal(64).astype(np.float16), w, out=out)


def test_a_read_only_device_out_is_refused_naming_out(w, rng, no_launch):
    """A ``__cuda_array_interface__`` whose ``data`` says read-only is refused like numpy's."""
    class ReadOnly:
        def __init__(self, arr):
            self.arr = arr  # keeps the memory alive
            pointer = arr._ary.ctypes.data if SIMULATED else arr.device_ctypes_pointer.value
            self.__cuda_array_interface__ = {"shape": (8,), "typestr": "<f2", "version": 3,
                                             "data": (pointer, True), "strides": None}

    a = cuda.to_device(rng.standard_normal(64).astype(np.float16))
    with pytest.raises(ValueError, match="out is read-only"):
        ig.gemv(a, w, out=ReadOnly(cuda.device_array(8, np.float16)))


@pytest.mark.parametrize("primary, cols, unroll, named", [
    ("1", "16", "4", ["INT4GEMV_SINGLE_WARP_COLS=16", "INT4GEMV_SINGLE_WARP_UNROLL=4"]),
    ("1", "16", None, ["INT4GEMV_SINGLE_WARP_COLS=16", "unroll=4 (the single_warp kernel's default)"]),
    (None, "16", None, ["INT4GEMV_SINGLE_WARP_COLS=16"]),
    (None, None, "8", ["INT4GEMV_SINGLE_WARP_UNROLL=8"]),
    (None, "16", "4", ["INT4GEMV_SINGLE_WARP_COLS=16"]),   # unroll 4 is a default-tiling unroll
])
def test_an_environment_tuning_no_kernel_has_names_the_variables(w, rng, no_launch, monkeypatch,
                                                                 primary, cols, unroll, named):
    for name, value in (("INT4GEMV_SINGLE_WARP", primary), ("INT4GEMV_SINGLE_WARP_COLS", cols),
                        ("INT4GEMV_SINGLE_WARP_UNROLL", unroll)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    a = rng.standard_normal(32 * 4).astype(np.float16)
    w = ig.quantize(rng.standard_normal((8, 128)).astype(np.float32), 32)
    with pytest.raises(ValueError) as err:
        ig.gemv(a, w)
    message = str(err.value)
    assert message.startswith(" and ".join(named) + ": "), message
    assert "tuning" not in message.split(":")[0]
    for name, value in (("INT4GEMV_SINGLE_WARP", primary), ("INT4GEMV_SINGLE_WARP_COLS", cols),
                        ("INT4GEMV_SINGLE_WARP_UNROLL", unroll)):
        assert value is None or f"{name}={value}" in message, message   # every variable the user set


def test_a_given_tuning_no_kernel_has_names_the_tuning_argument(w, rng, no_launch):
    with pytest.raises(ValueError, match=r"cols=16 \(argument tuning=\) and unroll=4 \(argument tuning=\)"):
        ig.gemv(rng.standard_normal(64).astype(np.float16), w,
                tuning=ig.Tuning("single_warp", cols=16, unroll=4))


def test_a_cuda_stream_protocol_object_gives_the_handle_not_the_version():
    """``__cuda_stream__()`` returns ``(version, handle)``: ``stream_handle`` takes the handle."""
    from int4gemv.device import stream_handle

    class ProtocolStream:
        def __cuda_stream__(self):
            return (0, 0x1234)
    assert stream_handle(ProtocolStream()) == 0x1234


@pytest.mark.parametrize("cc, pdl", [((9, 0), True), ((10, 0), True), ((8, 9), False), ((8, 0), False)])
def test_programmatic_dependent_launch_needs_compute_capability_9_0_or_newer(monkeypatch, cc, pdl):
    """Off the simulator, PDL is supported from compute capability 9.0 (Hopper) on, 9.0 included."""
    import int4gemv.device as device

    monkeypatch.setattr(device, "simulated", lambda: False)
    monkeypatch.setattr(device, "device_facts", lambda: ("fake GPU", 132, cc))
    assert device.supports_pdl() is pdl
