"""The real adapter, checked without a GPU: every call it makes names a real ``cuda.bindings.driver``
function with that function's arity and argument types, and its results come back as the
:class:`~lifecycle.driver.Driver` promises. Host functions: the trampoline and its registry."""

import os
import re

import pytest
from cuda.bindings import driver as real_cu

from lifecycle import CaptureMode, CaptureStatus, DriverError, GraphProvider, RealDriver
from lifecycle import real_driver as adapter

_ARG_TYPES = {"hStream": real_cu.CUstream, "hGraph": real_cu.CUgraph, "hGraphExec": real_cu.CUgraphExec,
              "hEvent": real_cu.CUevent, "ctx": real_cu.CUcontext, "dev": real_cu.CUdevice,
              "dstDevice": real_cu.CUdeviceptr, "mode": real_cu.CUstreamCaptureMode}
_OUTPUTS = {"CUdevice": real_cu.CUdevice(3), "CUcontext": real_cu.CUcontext(0xC0),
            "CUstream": real_cu.CUstream(0x50), "CUgraph": real_cu.CUgraph(0x60),
            "CUgraphExec": real_cu.CUgraphExec(0x70), "CUevent": real_cu.CUevent(0x80),
            "CUstreamCaptureStatus": real_cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE,
            "CUstreamCaptureMode": real_cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL,
            "int": 2, "Any": 0x1000}


def _signature(fn):
    doc = fn.__doc__.strip()
    params = re.match(r"\w+\((.*)\)", doc.splitlines()[0]).group(1)
    names = [p.split(":")[0].split()[-1] for p in params.split(",") if p.strip()]
    returns = re.split(r"\n\s*Returns\n\s*-+\n", doc, maxsplit=1)[1]
    returns = re.split(r"\n\s*See Also\n", returns, maxsplit=1)[0]
    return names, re.findall(r"^\s*\w+ : (?::py:obj:`~\.)?(\w+)`?\s*$", returns, re.M)


class _CheckingBindings:
    """Stands in for ``cuda.bindings.driver``: validates each call, answers CUDA_SUCCESS."""

    def __init__(self):
        self.calls = []
        self.args = {}

    def __getattr__(self, name):
        real = getattr(real_cu, name)
        if not (name.startswith("cu") and callable(real) and real.__doc__):
            return real
        names, outputs = _signature(real)

        def fake(*args, **kwargs):
            assert not kwargs, f"{name} takes positional arguments only"
            assert len(args) == len(names), f"{name}{tuple(names)} called with {len(args)} arguments"
            for pname, arg in zip(names, args, strict=False):
                expected = _ARG_TYPES.get(pname, int)
                assert isinstance(arg, expected) and not isinstance(arg, bool), \
                    f"{name}: {pname} should be {expected.__name__}, got {type(arg).__name__}"
            self.calls.append(name)
            self.args[name] = args
            return (real_cu.CUresult.CUDA_SUCCESS, *[_OUTPUTS[t] for t in outputs])

        return fake


@pytest.fixture
def checked(monkeypatch):
    bindings = _CheckingBindings()
    monkeypatch.setattr(adapter, "cu", bindings)
    return bindings


def test_every_call_matches_the_cuda_bindings_signature(checked):
    d = RealDriver()
    d.init()
    assert d.device_count() == 2
    assert d.primary_ctx_retain(0) == 0xC0
    d.primary_ctx_release(0)
    assert d.ctx_get_current() == 0xC0
    d.ctx_set_current(0xC0)
    assert d.ctx_get_device() == 3
    d.ctx_synchronize()
    stream = d.stream_create()
    assert stream == 0x50
    assert d.stream_get_ctx(stream) == 0xC0
    d.stream_synchronize(stream)
    d.stream_begin_capture(stream)
    graph = d.stream_end_capture(stream)
    assert d.stream_capture_status(stream) is CaptureStatus.ACTIVE
    assert d.exchange_capture_mode(CaptureMode.RELAXED) is CaptureMode.GLOBAL
    exe = d.graph_instantiate(graph)
    d.graph_launch(exe, stream)
    d.graph_exec_destroy(exe)
    d.graph_destroy(graph)
    event = d.event_create()
    assert event == 0x80
    d.event_record(event, stream)
    d.event_synchronize(event)
    d.event_destroy(event)
    ptr = d.mem_host_alloc(64)
    assert ptr == 0x1000
    d.memcpy_htod_async(0x2000, ptr, 64, stream)
    d.mem_free_host(ptr)
    d.stream_destroy(stream)
    assert checked.args["cuStreamBeginCapture"][1] == \
        real_cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, "captures must be thread-local"
    assert checked.args["cuStreamCreate"][0] == real_cu.CUstream_flags.CU_STREAM_NON_BLOCKING
    from lifecycle.driver import CALLS
    used = set(checked.calls)
    assert {c for c in CALLS.values() if c != "cuLaunchHostFunc"} <= used, "a Driver method is untested"


def test_a_failing_call_names_the_function_and_the_error(monkeypatch):
    class Failing:
        def __getattr__(self, name):
            if name == "cuStreamSynchronize":
                return lambda *a: (real_cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
            return getattr(real_cu, name)

    monkeypatch.setattr(adapter, "cu", Failing())
    with pytest.raises(DriverError, match="cuStreamSynchronize failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"):
        RealDriver().stream_synchronize(0x50)


def test_host_functions_stay_callable_exactly_while_their_handle_lives(monkeypatch):
    queued = []

    def fake_launch(stream, fn_ptr, user_data):  # what libcuda would do, minus the GPU
        queued.append(user_data.value)
        return 0

    monkeypatch.setattr(adapter, "_cu_launch_host_func", lambda: fake_launch)
    calls = []
    handle = RealDriver().launch_host_func(0x50, lambda: calls.append(1))
    adapter._trampoline(queued[0])  # a replay
    adapter._trampoline(queued[0])  # another replay: still registered
    assert calls == [1, 1]
    del handle
    adapter._trampoline(queued[0])  # graph released: the key is gone, nothing is called
    assert calls == [1, 1]


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and os.path.exists("/dev/nvidiactl"),
                    reason="would initialize a real GPU while Numba runs on its simulator")
def test_without_a_gpu_the_real_driver_fails_cleanly_and_with_one_it_works():
    ok, why = RealDriver.available()
    if not ok:  # CI: no driver library or no device
        assert why.startswith("CUDA driver")
        with pytest.raises(DriverError) as info:
            GraphProvider()  # the default driver is the real one
        assert info.value.call in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain")
    else:
        with GraphProvider() as p:
            assert p.counters.graphs_alive == 0


@pytest.mark.parametrize("cuinit", ["no library", "no device"])
def test_without_a_gpu_the_real_driver_names_the_two_ways_out(monkeypatch, cuinit):
    """No driver library, or a driver with no device: ``GraphProvider()`` raises one
    ``DriverError`` naming ``cuInit``, the cause and both ways out (a GPU, or ``SimDriver``).
    ``cuInit`` is replaced, so no GPU is touched on any machine."""
    from lifecycle import real_driver

    def fake(flags):
        if cuinit == "no library":
            raise RuntimeError("libcuda.so.1: cannot open shared object file")
        return (real_driver.cu.CUresult.CUDA_ERROR_NO_DEVICE,)

    monkeypatch.setattr(real_driver.cu, "cuInit", fake)
    with pytest.raises(DriverError, match="cuInit failed: CUDA_ERROR_NO_DEVICE") as info:
        GraphProvider()
    message = str(info.value)
    assert "no usable CUDA GPU" in message and "SimDriver()" in message, message
    assert info.value.call == "cuInit"
    if cuinit == "no library":
        assert "libcuda.so.1" in message, message
