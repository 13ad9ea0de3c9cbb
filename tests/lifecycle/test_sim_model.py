"""The simulated driver enforces the rules the suite relies on; the fault injector fails exactly the
Nth call. (If the model were lax, the shared suite could pass vacuously in CI.)"""

import ctypes
import threading
import time

import numpy as np
import pytest

from lifecycle import (
    STREAM_LEGACY,
    CaptureMode,
    CaptureStatus,
    DriverError,
    GraphState,
    check,
)
from lifecycle.testing import FaultInjectingDriver, SimDriver


@pytest.fixture
def sim():
    sim = SimDriver(devices=2, timeout=5.0)
    sim.ctx_set_current(sim.primary_ctx_retain(0))
    try:
        yield sim
    finally:
        sim.close()


def _pinned(sim, values):
    ptr = sim.mem_host_alloc(values.nbytes)
    view = np.ctypeslib.as_array((ctypes.c_uint8 * values.nbytes).from_address(ptr))
    view[:] = values.view(np.uint8)
    return ptr


def test_a_copy_that_reads_freed_pinned_memory_is_flagged(sim):
    s, dst, gate = sim.stream_create(), sim.device_array(4), threading.Event()
    src = _pinned(sim, np.arange(4, dtype=np.float32))
    keep = sim.launch_host_func(s, lambda: gate.wait(5))
    sim.memcpy_htod_async(dst.ptr, src, 16, s)
    sim.mem_free_host(src)  # while the copy is still queued behind the host function
    gate.set()
    sim.stream_synchronize(s)
    assert any("use after free" in v for v in sim.violations)
    del keep


def test_a_dropped_host_function_is_flagged_when_a_graph_still_calls_it(sim):
    s = sim.stream_create()
    sim.stream_begin_capture(s)
    handle = sim.launch_host_func(s, lambda: None)
    graph = sim.stream_end_capture(s)
    exe = sim.graph_instantiate(graph)
    sim.graph_launch(exe, s)
    sim.stream_synchronize(s)
    assert sim.violations == []
    del handle
    sim.graph_launch(exe, s)
    sim.stream_synchronize(s)
    assert sim.violations == ["host function called after its keep-alive handle was dropped"]


def test_capture_records_instead_of_running(sim):
    s, dst = sim.stream_create(), sim.device_array(4)
    sim.stream_begin_capture(s)
    sim.launch_kernel(s, lambda d: d.__iadd__(1), dst)
    assert sim.stream_capture_status(s) is CaptureStatus.ACTIVE
    graph = sim.stream_end_capture(s)
    assert sim.stream_capture_status(s) is CaptureStatus.NONE
    np.testing.assert_array_equal(dst.copy_to_host(), np.zeros(4))
    exe = sim.graph_instantiate(graph)
    sim.graph_launch(exe, s)
    sim.graph_launch(exe, s)
    sim.stream_synchronize(s)
    np.testing.assert_array_equal(dst.copy_to_host(), np.full(4, 2.0))


def test_unsafe_calls_invalidate_only_the_capturing_threads_capture(sim):
    s = sim.stream_create()
    sim.stream_begin_capture(s)
    other = []
    t = threading.Thread(target=lambda: other.append(sim.mem_host_alloc(8)))  # thread-local capture
    t.start()
    t.join(5)
    assert other and sim.stream_capture_status(s) is CaptureStatus.ACTIVE
    previous = sim.exchange_capture_mode(CaptureMode.RELAXED)
    sim.mem_free_host(other[0])  # relaxed: allowed
    sim.exchange_capture_mode(previous)
    with pytest.raises(DriverError, match="cuMemHostAlloc failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"):
        sim.mem_host_alloc(8)
    assert sim.stream_capture_status(s) is CaptureStatus.INVALIDATED
    with pytest.raises(DriverError, match="CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"):
        sim.stream_end_capture(s)
    assert sim.stream_capture_status(s) is CaptureStatus.NONE


def test_end_capture_from_another_thread_fails_and_leaves_the_capture_open(sim):
    s = sim.stream_create()
    sim.stream_begin_capture(s)
    errors = []

    def end():
        try:
            sim.stream_end_capture(s)
        except DriverError as exc:
            errors.append(exc.name)

    t = threading.Thread(target=end)
    t.start()
    t.join(5)
    assert errors == ["CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"]
    assert sim.stream_capture_status(s) is CaptureStatus.ACTIVE
    sim.graph_destroy(sim.stream_end_capture(s))


def test_legacy_stream_cannot_be_captured_and_contexts_are_per_device(sim):
    with pytest.raises(DriverError, match="CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"):
        sim.stream_begin_capture(STREAM_LEGACY)
    ctx0 = sim.ctx_get_current()
    sim.ctx_set_current(sim.primary_ctx_retain(1))
    s1 = sim.stream_create()
    sim.stream_begin_capture(s1)
    exe = sim.graph_instantiate(sim.stream_end_capture(s1))
    sim.ctx_set_current(ctx0)
    with pytest.raises(DriverError, match="cuGraphLaunch failed: CUDA_ERROR_INVALID_CONTEXT"):
        sim.graph_launch(exe, s1)  # a graph of device 1 from a device 0 context
    with pytest.raises(DriverError, match="CUDA_ERROR_INVALID_CONTEXT"):
        sim.memcpy_htod_async(sim.device_array(4).ptr, _pinned(sim, np.ones(1, np.float32)), 4, s1)
    assert sim.launches == []


def test_synchronization_is_bounded():
    sim = SimDriver(timeout=0.2)
    try:
        sim.ctx_set_current(sim.primary_ctx_retain(0))
        s, gate = sim.stream_create(), threading.Event()
        keep = sim.launch_host_func(s, lambda: gate.wait(5))
        start = time.monotonic()
        with pytest.raises(DriverError, match="CUDA_ERROR_LAUNCH_TIMEOUT"):
            sim.stream_synchronize(s)
        assert time.monotonic() - start < 2
        gate.set()
        del keep
    finally:
        sim.close()


def test_a_cold_kernel_invalidates_a_capture_unless_record_warms_it_up(sim_backend):
    b = sim_backend
    s, dst = b.stream(), b.zeros(4)
    with b.provider() as p:
        cold = b.sim.kernel(lambda d: d.__iadd__(1))
        with pytest.raises(DriverError, match="cuModuleLoadData|CAPTURE_UNSUPPORTED") as info:
            with p.capture(7, stream=s) as cap:
                cold.launch(cap.stream, dst)
        assert cap.state is GraphState.DISCARDED and info.value.call == "cuModuleLoadData"
        kernel = b.sim.kernel(lambda d: d.__iadd__(1))
        p.record(8, lambda cap: kernel.launch(cap.stream, dst), stream=s)  # warm-up loads it
        p.replay(8)
        p.synchronize(8)
        np.testing.assert_array_equal(b.read(dst), np.full(4, 2.0))  # warm-up + one replay
    b.assert_clean()


def test_fault_injector_fails_exactly_the_nth_call_and_tracks_resources(sim):
    drv = FaultInjectingDriver(sim, {"stream_create": 2})
    first = drv.stream_create()
    with pytest.raises(DriverError) as info:
        drv.stream_create()
    assert info.value.injected and info.value.call == "cuStreamCreate" and info.value is drv.injected[0]
    third = drv.stream_create()
    assert drv.calls["stream_create"] == 3 and drv.live_resources() == {"streams": 2}
    drv.stream_destroy(first)
    drv.stream_destroy(third)
    assert drv.live_resources() == {}
    with pytest.raises(ValueError, match="unknown driver method"):
        drv.fail("cuStreamCreate")


def test_the_testing_drivers_stay_importable_from_lifecycle():
    import lifecycle
    import lifecycle.testing
    assert lifecycle.SimDriver is lifecycle.testing.SimDriver is SimDriver
    assert lifecycle.FaultInjectingDriver is lifecycle.testing.FaultInjectingDriver is FaultInjectingDriver


def test_check_turns_results_into_values_or_named_errors():
    from cuda.bindings.driver import CUresult
    assert check("cuX", (CUresult.CUDA_SUCCESS,)) is None
    assert check("cuX", (CUresult.CUDA_SUCCESS, 5)) == 5
    assert check("cuX", (CUresult.CUDA_SUCCESS, 5, 6)) == (5, 6)
    with pytest.raises(DriverError) as info:
        check("cuStreamEndCapture", (CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None))
    assert str(info.value) == "cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)"
    assert (info.value.call, info.value.code) == ("cuStreamEndCapture", 901)
    with pytest.raises(DriverError, match=r"CUresult\(123456\)"):
        check("cuY", 123456)


def test_fault_rotation_fails_each_method_in_turn_until_stopped(sim):
    drv = FaultInjectingDriver(sim)
    drv.rotate(["stream_create", "event_create"], gap=1)
    outcomes, made = [], []
    for _ in range(4):
        for name in ("stream_create", "event_create"):
            try:
                made.append((name, getattr(drv, name)()))
                outcomes.append(".")
            except DriverError as exc:
                assert exc.injected
                outcomes.append(name[0])
    assert "".join(outcomes) == "s..e..s."
    drv.stop()
    assert [e.call for e in drv.injected] == ["cuStreamCreate", "cuEventCreate", "cuStreamCreate"]
    made.append(("stream_create", drv.stream_create()))  # stopped: no more faults
    for name, handle in made:
        (drv.stream_destroy if name == "stream_create" else drv.event_destroy)(handle)
    assert drv.live_resources() == {}
    with pytest.raises(ValueError, match="rotate needs driver method names"):
        drv.rotate(["cuStreamCreate"])
