"""Issue 15: captures and the CUDA capture-mode rules, on the simulated and the real driver.

The driver-level tests pin the rules the simulator models (so CI sees this class of bug); the
provider-level tests check lifecycle's decision: a second capture, or a synchronizing call, on a
thread that already has a lifecycle capture open is refused up front, and the open capture is
unharmed.
"""

import re
import threading
from pathlib import Path

import numpy as np
import pytest

from lifecycle import CaptureError, CaptureMode, CaptureStatus, DriverError, StreamError
from lifecycle.driver import CALLS

from payloads import capture_payload

G, T, R = CaptureMode.GLOBAL, CaptureMode.THREAD_LOCAL, CaptureMode.RELAXED


def _unsafe_call(backend, thread_mode):
    """``cuMemHostAlloc`` (then free) in ``thread_mode``; returns the error or None."""
    base = backend.base
    previous = base.exchange_capture_mode(thread_mode)
    try:
        ptr = base.mem_host_alloc(64)
        base.mem_free_host(ptr)
        return None
    except DriverError as exc:
        return exc
    finally:
        base.exchange_capture_mode(previous)


@pytest.mark.parametrize("capture_mode, thread_mode, same_thread, refused", [
    (T, G, True, True), (T, T, True, True), (T, R, True, False),
    (G, G, True, True), (G, T, True, True), (G, R, True, False),
    (R, G, True, False), (R, T, True, False),
    (G, G, False, True), (G, T, False, False), (G, R, False, False),
    (T, G, False, False), (R, G, False, False)])
def test_unsafe_calls_follow_the_capture_mode_rules(backend, capture_mode, thread_mode, same_thread, refused):
    base, s = backend.base, backend.stream()
    base.stream_begin_capture(s, capture_mode)
    try:
        if same_thread:
            error = _unsafe_call(backend, thread_mode)
        else:
            out = []

            def other():
                base.ctx_set_current(backend.ctx)
                out.append(_unsafe_call(backend, thread_mode))
                base.ctx_set_current(0)

            t = threading.Thread(target=other)
            t.start()
            t.join(20)
            error = out[0]
        status = base.stream_capture_status(s)
    finally:
        try:
            base.graph_destroy(base.stream_end_capture(s))
            ended = None
        except DriverError as exc:
            ended = exc
    if not refused:
        assert error is None and status is CaptureStatus.ACTIVE and ended is None
        return
    assert error is not None and error.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", error
    if same_thread:  # the thread's own capture is invalidated by the refused call
        assert status is CaptureStatus.INVALIDATED
        assert ended is not None and ended.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert backend.capture_status(s) is CaptureStatus.NONE


def test_instantiating_while_this_thread_captures_invalidates_that_capture(backend):
    """What issue 15 saw on the H200, at the driver level: a second thread-local capture on the
    same thread ends fine, but instantiating it (an unsafe call) fails and invalidates the first."""
    base, s, s2 = backend.base, backend.stream(), backend.stream()
    base.stream_begin_capture(s)
    base.stream_begin_capture(s2)
    inner = base.stream_end_capture(s2)
    with pytest.raises(DriverError, match="cuGraphInstantiate failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"):
        base.graph_instantiate(inner)
    base.graph_destroy(inner)
    assert base.stream_capture_status(s) is CaptureStatus.INVALIDATED
    with pytest.raises(DriverError, match="CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"):
        base.stream_end_capture(s)


def test_a_nested_capture_on_one_thread_is_refused_and_the_open_one_completes(backend):
    s, s2, s3 = backend.stream(), backend.stream(), backend.stream()
    dst, dst_q = backend.zeros(8), backend.zeros(8)
    with backend.provider() as p, backend.provider() as q, backend.provider(graphs=False) as eager:
        capture_payload(q, 3, s3, dst_q, 3.0)  # q owns a graph from before
        with p.capture(7, stream=s) as cap:
            cap.copy_to_device(dst, cap.stage(np.full(8, 7.0, np.float32)))
            before = q.counters
            for refused in (lambda: q.begin_capture(1, stream=s2),
                            lambda: q.record(1, lambda c: None, stream=s2),
                            lambda: eager.begin_capture(1, stream=s2),
                            lambda: q.synchronize(3), lambda: q.release(3), q.close):
                with pytest.raises(CaptureError, match="while this thread is capturing graph 7"):
                    refused()
            assert q.counters == before and q.graph_ids() == (3,) and eager.graph_ids() == ()
            assert backend.capture_status(s2) is CaptureStatus.NONE
            assert backend.capture_status(s) is CaptureStatus.ACTIVE, "p's capture was harmed"
            q.replay(3)  # an asynchronous launch on another stream is allowed
        p.replay(7)
        p.synchronize(7)
        q.synchronize(3)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
        np.testing.assert_array_equal(backend.read(dst_q), np.full(8, 3.0))
        with q.capture(1, stream=s2) as cap:  # once p's capture ended, q captures normally
            cap.copy_to_device(dst_q, cap.stage(np.ones(8, np.float32)))
    backend.assert_clean()


def test_a_stream_lifecycle_captures_makes_other_providers_waits_wait_their_turn(backend):
    """Two providers sharing a stream: a wait or launch on it from another thread would invalidate
    (or land in) the capture, so it waits until the capture ended, then runs."""
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p, backend.provider() as q:
        capture_payload(q, 3, s, dst, 3.0)
        errors, threads = [], []
        with p.capture(7, stream=s) as cap:
            for op in (q.replay, q.synchronize):
                threads.append(threading.Thread(target=lambda op=op: errors.append(_error_of(op, 3))))
                threads[-1].start()
            threads[0].join(0.3)
            assert all(t.is_alive() for t in threads) and errors == [], "a wait ran inside the capture"
            cap.copy_to_device(dst, cap.stage(np.full(8, 7.0, np.float32)))
            assert backend.capture_status(s) is CaptureStatus.ACTIVE
        for t in threads:
            t.join(20)
        assert errors == [None, None]
        q.synchronize(3)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 3.0))
        q.release(3)
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
    backend.assert_clean()


def test_eager_work_and_a_capture_never_share_a_stream_at_once(backend):
    """An eager provider's step on a stream another provider captures would be captured into (or
    invalidate) that graph: each side waits while the other holds the stream."""
    s, dst = backend.stream(), backend.zeros(8)
    step = lambda cap: cap.copy_to_device(dst, cap.stage(np.ones(8, np.float32)))  # noqa: E731
    with backend.provider() as p, backend.provider(graphs=False) as eager:
        errors = []
        with p.capture(7, stream=s) as cap:
            t = threading.Thread(target=lambda: errors.append(_error_of(eager.record, 1, step, stream=s)))
            t.start()
            t.join(0.3)
            assert t.is_alive() and eager.graph_ids() == (), "the eager step ran inside the capture"
            cap.copy_to_device(dst, cap.stage(np.full(8, 7.0, np.float32)))
        t.join(20)
        assert errors == [None] and eager.graph_ids() == (1,)
        eager.release(1)
        # The eager record is begun and ended on one worker thread (thread-local capture), held
        # open while this thread tries to capture on the same stream: the capture waits for it.
        opened, done = threading.Event(), threading.Event()
        failures = []

        def hold_eager_record():
            try:
                handle = eager.begin_capture(2, stream=s)
                opened.set()
                done.wait(20)
                eager.end_capture(handle)
            except Exception as exc:  # reported by the assertion below
                failures.append(exc)
                opened.set()
        t = threading.Thread(target=hold_eager_record)
        t.start()
        assert opened.wait(20) and not failures, failures
        with backend.provider(stream_wait_timeout=0.2) as impatient:
            with pytest.raises(StreamError, match=r"waited 0\.2 s for stream .* in use by"):
                with impatient.capture(8, stream=s):
                    pass
            assert impatient.graph_ids() == () and impatient.counters.capturing == 0
        threading.Timer(0.2, done.set).start()
        with p.capture(8, stream=s) as cap:  # waits until the eager record ended
            assert eager.graph_ids() == (2,) and eager.state(2).value == "ready"
            cap.copy_to_device(dst, cap.stage(np.full(8, 8.0, np.float32)))
        t.join(20)
        assert not failures, failures
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
    backend.assert_clean()


def _error_of(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return exc
    return None


DOC = Path(__file__).resolve().parents[2] / "lifecycle" / "README.md"


def _documented_capture_calls():
    table = DOC.read_text().split("## Driver calls during a capture", 1)[1].split("\n## ", 1)[0]
    first_cells = re.findall(r"^\|([^|]*)\|", table, re.M)
    return {name for cell in first_cells for name in re.findall(r"`(cu\w+)`", cell)}


def test_every_driver_call_made_during_a_capture_is_documented(backend):
    """The calls the provider makes between begin and end of capture (in the capturing thread) are
    exactly those the lifecycle docs list and check against the capture-mode rules."""
    s, s2, dst = backend.stream(), backend.stream(), backend.zeros(8)
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        capture_payload(p, 3, s2, dst, 3.0)
        drv.log.clear()
        with p.capture(7, stream=s) as cap:
            cap.copy_to_device(dst, cap.stage(np.ones(8, np.float32)))
            cap.host_func(lambda: None)
            p.replay(3)
        with pytest.raises(RuntimeError):
            with p.capture(8, stream=s) as cap:
                cap.stage(np.ones(8, np.float32))
                raise RuntimeError
    names = [name for name, _ in drv.log]
    made = set()
    for begin in [i for i, n in enumerate(names) if n == "stream_begin_capture"]:
        end = next(i for i in range(begin, len(names)) if names[i] in ("stream_end_capture",))
        made |= {CALLS[n] for n in names[begin:end + 1]}
    documented = _documented_capture_calls()
    assert made <= documented, f"undocumented calls during a capture: {sorted(made - documented)}"
    assert documented - made <= {"cuCtxSetCurrent"}, "documented calls the provider no longer makes"
    backend.assert_clean(drv)
