"""Failed capture recovery: the original error propagates, nothing leaks, the stream stays reusable."""

import numpy as np
import pytest

from lifecycle import STREAM_PER_THREAD, CaptureStatus, DriverError, GraphState, LifecycleError

from payloads import capture_payload


CAPTURE_UNSUPPORTED = 900  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED


class Boom(Exception):
    pass


def _assert_stream_reusable(backend, p, stream, graph_id=99):
    """The next capture on ``stream`` succeeds and its replay computes the right thing."""
    assert backend.capture_status(stream) is CaptureStatus.NONE
    dst = backend.zeros(16)
    with p.capture(graph_id, stream=stream) as cap:
        cap.copy_to_device(dst, cap.stage(np.full(16, 5.0, np.float32)))
    p.replay(graph_id)
    p.synchronize(graph_id)
    np.testing.assert_array_equal(backend.read(dst), np.full(16, 5.0))
    p.release(graph_id)


def test_body_exception_discards_the_capture_and_propagates_unchanged(backend):
    s, dst = backend.stream(), backend.zeros(16)
    with backend.provider() as p:
        boom = Boom("from the body")
        with pytest.raises(Boom) as info:
            with p.capture(7, stream=s) as cap:
                cap.copy_to_device(dst, cap.stage(np.ones(16, np.float32)))
                cap.host_func(lambda: None)
                raise boom
        assert info.value is boom and not getattr(boom, "cleanup_errors", [])
        assert cap.state is GraphState.DISCARDED and p.graph_ids() == ()
        assert p.counters.pinned_bytes == 0 and p.counters.capturing == 0 and p.counters.host_funcs == 0
        _assert_stream_reusable(backend, p, s, graph_id=7)
    backend.assert_clean()


def test_an_invalidating_call_makes_end_capture_fail_cleanly(backend):
    s, dst = backend.stream(), backend.zeros(16)
    with backend.provider() as p:
        with pytest.raises(DriverError) as info:
            with p.capture(7, stream=s) as cap:
                cap.copy_to_device(dst, cap.stage(np.ones(16, np.float32)))
                with pytest.raises(DriverError, match="cuStreamSynchronize"):
                    backend.unsafe_sync(s)  # swallowed, as careless code would
        assert info.value.call == "cuStreamEndCapture"
        assert info.value.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
        assert cap.state is GraphState.DISCARDED and p.counters.pinned_bytes == 0
        _assert_stream_reusable(backend, p, s)
    backend.assert_clean()


def test_a_forbidden_allocation_in_the_body_discards_the_capture(backend):
    s = backend.stream()
    with backend.provider() as p:
        staged = []
        with pytest.raises(backend.forbidden_alloc_error) as info:
            with p.capture(7, stream=s) as cap:
                staged.append(cap.stage(np.ones(4, np.float32)))  # pinned allocation is allowed (relaxed)
                backend.forbidden_alloc()                         # device allocation is not
        assert int(info.value.code) == CAPTURE_UNSUPPORTED, info.value
        assert len(staged) == 1 and staged[0].freed, "the staging buffer must be freed with the capture"
        assert cap.state is GraphState.DISCARDED
        _assert_stream_reusable(backend, p, s)
    backend.assert_clean()


def test_instantiate_failure_destroys_the_partial_graph(backend):
    s = backend.stream()
    drv = backend.instrumented({"graph_instantiate": 1})
    with backend.provider(drv) as p:
        with pytest.raises(DriverError, match="cuGraphInstantiate") as info:
            with p.capture(7, stream=s) as cap:
                cap.stage(np.ones(4, np.float32))
        assert info.value is drv.injected[0]
        assert cap.state is GraphState.DISCARDED
        assert drv.live_resources().get("graphs", 0) == 0, "the ended graph must be destroyed"
        _assert_stream_reusable(backend, p, s)
    backend.assert_clean(drv)


def test_cleanup_errors_are_attached_to_the_original_error(backend):
    s = backend.stream()
    drv = backend.instrumented({"mem_free_host": 1})
    p = backend.provider(drv)
    boom = Boom()
    with pytest.raises(Boom) as info:
        with p.capture(7, stream=s) as cap:
            cap.stage(np.ones(4, np.float32))
            raise boom
    assert info.value is boom
    assert boom.cleanup_errors == [drv.injected[0]]
    assert any("cuMemFreeHost" in note for note in boom.__notes__)
    assert p.counters.pending_cleanup == 1 and p.counters.pinned_buffers == 1
    p.close()  # retries the failed free
    assert p.counters.pending_cleanup == 0 and p.counters.pinned_buffers == 0
    backend.assert_clean(drv)


def test_a_free_that_fails_again_on_close_stays_pending_until_it_succeeds(backend):
    """A cleanup step that fails a second time (the free of a released graph's staging buffer,
    failing on release and again on the first close) is kept for the next close, not forgotten:
    close is clean only once the buffer is really freed."""
    s, dst = backend.stream(), backend.zeros(8)
    drv = backend.instrumented()
    p = backend.provider(drv)
    capture_payload(p, 7, s, dst, 1.0)
    drv.fail("mem_free_host")
    with pytest.raises(DriverError, match="cuMemFreeHost"):
        p.release(7)
    assert p.graph_ids() == () and p.counters.pending_cleanup == 1 and p.counters.pinned_buffers == 1
    drv.fail("mem_free_host")  # the first close's retry fails again
    with pytest.raises(DriverError, match="cuMemFreeHost") as info:
        p.close()
    assert info.value is drv.injected[1]
    assert p.counters.pending_cleanup == 1 and p.counters.pinned_buffers == 1, \
        "the free that failed twice was forgotten"
    p.close()
    assert p.counters.pending_cleanup == 0 and p.counters.pinned_buffers == 0
    assert drv.live_resources() == {}, "the driver still holds what the provider forgot"
    backend.assert_clean(drv)


# -- a failure at every injection point ----------------------------------------------------------

def _graph_scenario(backend, drv, stream, dst, out, *, fail_body=None):
    """Capture 7 on ``stream`` and 8 on the provider's own stream, replay, release 7 (then close)."""
    p = out["p"] = backend.provider(drv)
    with p.capture(7, stream=stream) as cap:
        cap.copy_to_device(dst, cap.stage(np.full(16, 7.0, np.float32)))
        cap.host_func(lambda: None)
        backend.add(cap.stream, dst, dst)
        if fail_body is not None:
            raise fail_body
    with p.capture(8) as cap:
        cap.copy_to_device(dst, cap.stage(np.full(16, 8.0, np.float32)))
    p.replay(7)
    p.replay(8)
    p.synchronize(7)
    p.release(7)


def _eager_scenario(backend, drv, stream, dst, out, *, fail_body=None):
    """Graphs disabled, on the per-thread default stream: record, replay, release (then close)."""
    p = out["p"] = backend.provider(drv, graphs=False)

    def step(cap):
        cap.copy_to_device(dst, cap.stage(np.full(16, 5.0, np.float32)))
        cap.host_func(lambda: None)
        if fail_body is not None:
            raise fail_body

    p.record(5, step, stream=STREAM_PER_THREAD)
    p.replay(5)
    p.release(5)


SCENARIOS = {"graphs": (_graph_scenario, False), "graphs-failing-body": (_graph_scenario, True),
             "eager": (_eager_scenario, False), "eager-failing-body": (_eager_scenario, True)}


def _run(backend, scenario, drv, stream, dst, fail_body):
    """Run a scenario, then close its provider until clean (at most 3 tries).

    Returns ``(the scenario's error or None, the errors close() raised)``.
    """
    error, close_errors, out = None, [], {}
    try:
        scenario(backend, drv, stream, dst, out, fail_body=fail_body)
    except Exception as exc:  # any error is inspected by the caller
        error = exc
    if "p" in out:
        for _ in range(3):
            try:
                out["p"].close()
                break
            except LifecycleError as exc:
                close_errors.append(exc)
    return error, close_errors


def _surfaced(injected, error, close_errors, boom):
    """The injected error was raised by the failing operation, or by close() when the failure was in
    close(), or (body failing) attached to the body's error, which stays the one raised."""
    if boom is not None and error is boom:
        return injected in getattr(boom, "cleanup_errors", []) or injected in close_errors
    return error is injected or (error is None and injected in close_errors)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_failure_at_every_injection_point_keeps_the_error_and_leaks_nothing(backend, name):
    scenario, body_fails = SCENARIOS[name]
    stream, dst = backend.stream(), backend.zeros(16)
    golden = backend.instrumented()
    boom = Boom() if body_fails else None
    error, close_errors = _run(backend, scenario, golden, stream, dst, boom)
    assert error is boom and close_errors == [], f"a fault-free run raised {error!r} {close_errors!r}"
    backend.assert_clean(golden)
    points = list(dict.fromkeys(golden.log))
    assert len(points) >= 10, points

    problems = []
    for method, n in points:
        drv = backend.instrumented({method: n})
        boom = Boom() if body_fails else None
        error, close_errors = _run(backend, scenario, drv, stream, dst, boom)
        where = f"{method} #{n}"
        injected = drv.injected[0] if drv.injected else None
        if injected is None:
            problems.append(f"{where}: not reached")
        elif not _surfaced(injected, error, close_errors, boom):
            problems.append(f"{where}: raised {error!r} then {close_errors!r}, losing the injected error")
        leaks = drv.live_resources()
        if leaks:
            problems.append(f"{where}: leaked {leaks}")
        if backend.capture_status(stream) is not CaptureStatus.NONE:
            problems.append(f"{where}: stream left capturing")
        if backend.violations():
            problems.append(f"{where}: {backend.violations()}")
            break
    assert problems == []
    with backend.provider(backend.instrumented()) as p:
        _assert_stream_reusable(backend, p, stream)
    backend.assert_clean()


def test_host_funcs_counts_the_host_functions_of_cleanup_still_pending(backend):
    """``counters.host_funcs`` counts every host function the provider still holds, including
    those of work kept for cleanup because awaiting it failed (here: the warm-up run of a record,
    whose stream synchronize fails): 1 while that cleanup is pending, 0 once close() retried it."""
    s, dst = backend.stream(), backend.zeros(16)
    drv = backend.instrumented({"stream_synchronize": 1})  # awaiting the warm-up run fails
    p = backend.provider(drv)

    def step(cap):
        cap.copy_to_device(dst, cap.stage(np.full(16, 3.0, np.float32)))
        cap.host_func(lambda: None)

    with pytest.raises(DriverError, match="cuStreamSynchronize") as info:
        p.record(7, step, stream=s)
    assert info.value is drv.injected[0]
    assert p.graph_ids() == () and p.counters.pending_cleanup == 1
    assert p.counters.host_funcs == 1, "the pending cleanup's host function is not counted"
    p.close()  # retries: awaits the warm-up run, then frees its buffer and host function
    assert p.counters.pending_cleanup == 0 and p.counters.host_funcs == 0
    backend.assert_clean(drv)
