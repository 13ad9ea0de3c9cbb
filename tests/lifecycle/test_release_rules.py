"""Issue 14, ownership and release: foreign staging buffers, what release waits on, step errors in
eager runs, retryable close, external buffers, device checks before any work, the caller's context."""

import threading
import time

import numpy as np
import pytest

from lifecycle import (
    STREAM_PER_THREAD,
    DeviceMismatchError,
    DriverError,
    LifecycleError,
)
from lifecycle.driver import CALLS

from payloads import capture_payload

WAIT = 20.0


class Boom(Exception):
    pass


def test_a_staging_buffer_of_another_provider_is_refused_and_never_freed_by_it(backend):
    s, s2, dst, dst2 = backend.stream(), backend.stream(), backend.zeros(8), backend.zeros(8)
    with backend.provider() as p, backend.provider() as q:
        foreign = capture_payload(p, 7, s, dst, 7.0)()
        with pytest.raises(LifecycleError, match="belongs to another provider"):
            with q.capture(7, stream=s2) as cap:  # the same graph id: only the owner tells them apart
                cap.copy_to_device(dst2, foreign)
        assert q.graph_ids() == () and q.counters.pinned_buffers == 0
        with pytest.raises(LifecycleError, match="belongs to another provider"):
            foreign.free(object())  # any owner but p's
        assert not foreign.freed
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
        np.testing.assert_array_equal(backend.read(dst2), np.zeros(8))
    backend.assert_clean()


def _gated_eager_step(dst, gate, runs, timed_out):
    """A recorded step whose replays (not its first run) block on ``gate`` before their copy."""
    def block():
        if not gate.wait(WAIT):
            timed_out.append(True)

    def step(cap):
        runs.append(threading.get_ident())
        if len(runs) > 1:
            cap.host_func(block)
        cap.copy_to_device(dst, cap.stage(np.full(dst.shape, 3.0, np.float32)))
    return step


def test_release_from_another_thread_waits_for_work_whose_event_was_not_recorded(backend):
    """The replay's completion event fails to record; release from thread B must still wait for
    thread A's per-thread-stream work (not for B's own per-thread stream) before freeing."""
    dst, gate, runs, timed_out = backend.zeros(64), threading.Event(), [], []
    drv = backend.instrumented({"event_record": 2})
    with backend.provider(drv, graphs=False) as p:
        p.record(4, _gated_eager_step(dst, gate, runs, timed_out), stream=STREAM_PER_THREAD)
        with pytest.raises(DriverError, match="cuEventRecord"):
            p.replay(4)  # its work is queued, blocked, unmarked
        done = threading.Event()
        b = threading.Thread(target=lambda: (p.release(4), done.set()))
        b.start()
        time.sleep(0.2)
        assert not done.is_set(), "release returned while the replay was still in flight"
        assert p.counters.pinned_buffers == 1, "the staging buffer was freed under the GPU"
        gate.set()
        b.join(WAIT)
        assert done.is_set() and timed_out == []
    backend.assert_clean(drv)


def test_a_failed_close_is_retried_from_another_thread(backend):
    dst, gate, runs, timed_out = backend.zeros(64), threading.Event(), [], []
    drv = backend.instrumented({"event_record": 2, "ctx_synchronize": 1})
    p = backend.provider(drv, graphs=False)
    p.record(4, _gated_eager_step(dst, gate, runs, timed_out), stream=STREAM_PER_THREAD)
    with pytest.raises(DriverError):
        p.replay(4)
    errors = []

    def close():
        try:
            p.close()
        except Exception as exc:
            errors.append(exc)

    for attempt in range(2):
        if attempt == 1:
            gate.set()
        t = threading.Thread(target=close)
        t.start()
        t.join(WAIT)
        if attempt == 0:
            assert [e.call for e in errors] == ["cuCtxSynchronize"]
            assert p.counters.pinned_buffers == 1, "nothing may be freed when the wait failed"
    assert len(errors) == 1 and timed_out == []
    assert p.counters.pinned_buffers == 0 and p.counters.pending_cleanup == 0
    backend.assert_clean(drv)


def test_a_step_error_in_an_eager_replay_reaches_the_caller_unchanged(backend):
    s, dst, runs, boom = backend.stream(), backend.zeros(8), [], Boom()

    def step(cap):
        runs.append(1)
        cap.copy_to_device(dst, cap.stage(np.ones(8, np.float32)))
        if len(runs) == 2:
            raise boom

    drv = backend.instrumented({"event_record": 2})
    with backend.provider(drv, graphs=False) as p:
        p.record(5, step, stream=s)
        with pytest.raises(Boom) as info:
            p.replay(5)  # the step raises, then recording its end fails too
        assert info.value is boom and boom.cleanup_errors == [drv.injected[0]]
        p.replay(5)
        p.release(5)
    backend.assert_clean(drv)


def test_a_step_error_in_an_eager_record_reaches_the_caller_unchanged(backend):
    s, dst, boom = backend.stream(), backend.zeros(8), Boom()

    def step(cap):
        cap.copy_to_device(dst, cap.stage(np.ones(8, np.float32)))
        raise boom

    drv = backend.instrumented({"stream_synchronize": 1})
    p = backend.provider(drv, graphs=False)
    with pytest.raises(Boom) as info:
        p.record(5, step, stream=s)  # the step raises, then waiting for its work fails
    assert info.value is boom and boom.cleanup_errors == [drv.injected[0]]
    assert p.graph_ids() == () and p.counters.pending_cleanup == 1
    p.close()
    backend.assert_clean(drv)


def test_close_after_a_failed_warm_up_wait_can_be_retried_until_clean(backend):
    dst = backend.zeros(8)
    drv = backend.instrumented({"stream_synchronize": 1})
    p = backend.provider(drv)
    with pytest.raises(DriverError, match="cuStreamSynchronize"):
        p.record(7, lambda cap: cap.copy_to_device(dst, cap.stage(np.ones(8, np.float32))))  # own stream
    assert p.counters.pending_cleanup == 1 and p.counters.pinned_buffers == 1
    drv.fail("stream_synchronize")  # the first close's retry of the warm-up wait fails again
    with pytest.raises(DriverError, match="cuStreamSynchronize"):
        p.close()
    p.close()  # the provider's stream was kept for this retry
    assert p.counters.pending_cleanup == 0 and p.counters.pinned_buffers == 0
    backend.assert_clean(drv)


def test_a_release_whose_wait_fails_leaves_the_id_working_as_before(backend):
    """If release's wait for the graph's work fails, nothing is released and the id stops being
    "being released": replay, synchronize and release of it then succeed, and close is clean."""
    s, dst = backend.stream(), backend.zeros(8)
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        capture_payload(p, 7, s, dst, 7.0)
        p.replay(7)
        drv.fail("stream_synchronize")  # the wait of the release below
        with pytest.raises(DriverError, match="cuStreamSynchronize") as info:
            p.release(7)
        assert info.value is drv.injected[0]
        assert p.graph_ids() == (7,) and p.counters.pinned_buffers == 1, "released although the wait failed"
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
        p.release(7)
        assert p.graph_ids() == () and p.counters.pinned_buffers == 0
    assert p.counters.pending_cleanup == 0
    backend.assert_clean(drv)


def test_a_failed_close_keeps_external_buffers_registered(backend):
    s, dst = backend.stream(), backend.zeros(8)
    drv = backend.instrumented({"mem_free_host": 1})
    p = backend.provider(drv)
    capture_payload(p, 7, s, dst, 1.0)
    p.register_external(bytearray(16))
    with pytest.raises(DriverError, match="cuMemFreeHost"):
        p.close()
    assert p.counters.external_buffers == 1, "released only once everything else is"
    p.close()
    assert p.counters.external_buffers == 0
    backend.assert_clean(drv)


def test_a_stream_of_another_device_is_refused_before_the_step_runs(two_devices):
    b = two_devices
    s0, dst1 = b.stream(device=0), b.zeros(8, device=1)
    caller_ctx = b.base.ctx_get_current()
    ran = []
    with b.provider(device=1) as p1:
        with pytest.raises(DeviceMismatchError, match="another context"):
            p1.record(7, lambda cap: ran.append(cap.copy_to_device(dst1, cap.stage(np.ones(8, np.float32)))),
                      stream=s0)
        assert ran == [], "the step ran on the wrong device's stream before the refusal"
        assert b.base.ctx_get_current() == caller_ctx and p1.counters.pinned_buffers == 0
    b.assert_clean()


_CONTEXT_FREE = {"init", "device_count", "primary_ctx_retain", "primary_ctx_release", "ctx_get_current",
                 "ctx_set_current"}


class _ContextWatch:
    """Forwards to ``inner``; records every call made while the provider's context is not current."""

    def __init__(self, inner, base, ctx):
        self.inner, self.base, self.ctx, self.wrong = inner, base, ctx, []

    def __getattr__(self, name):
        target = getattr(self.inner, name)
        if name not in CALLS or name in _CONTEXT_FREE:
            return target

        def call(*args):
            if self.base.ctx_get_current() != self.ctx:
                self.wrong.append(name)
            return target(*args)
        return call


def test_every_method_runs_in_the_providers_context_and_restores_the_callers(two_devices):
    b = two_devices
    s1, dst1 = b.stream(device=1), b.zeros(8, device=1)
    caller_ctx = b.base.ctx_get_current()
    with b.on(1):
        ctx1 = b.base.ctx_get_current()
    drv = b.instrumented({"graph_launch": 2})
    watch = _ContextWatch(drv, b.base, ctx1)
    p = b.provider(watch, device=1)

    def calls():
        with p.capture(7, stream=s1) as cap:
            cap.copy_to_device(dst1, cap.stage(np.ones(8, np.float32)))
            b.base.ctx_set_current(caller_ctx)  # the body switches back to device 0
        yield
        p.record(8, lambda c: c.copy_to_device(dst1, c.stage(np.ones(8, np.float32))), stream=s1)
        yield
        p.replay(7)
        yield
        with pytest.raises(DriverError):
            p.replay(8)  # the injected failure
        yield
        with pytest.raises(LifecycleError):
            p.replay(99)
        yield
        p.synchronize(7)
        yield
        p.release(7)
        yield
        _ = p.stream
        yield
        p.close()
        yield

    for step, _ in enumerate(calls()):
        assert b.base.ctx_get_current() == caller_ctx, f"call {step} left another context current"
    assert watch.wrong == []
    b.assert_clean(drv)


def test_marking_one_threads_eager_run_leaves_another_threads_unmarked_work_awaited(backend):
    """``GraphRecord.mark_run`` marks only the calling thread's work (its key on the per-thread
    stream): another thread's work whose event was never recorded stays *unmarked*, and
    ``wait_steps`` still waits for it (``cuCtxSynchronize``, as that thread's stream cannot be
    named from here)."""
    from lifecycle.record import GraphRecord, run_actions
    from lifecycle.threads import current

    drv = backend.instrumented()
    record = GraphRecord(graph_id=7, stream=STREAM_PER_THREAD, eager=True)
    other = []

    def issue_elsewhere():  # thread B issues work and never marks it (its event record failed)
        record.mark_issuing()
        other.append(current())

    record.mark_issuing()
    worker = threading.Thread(target=issue_elsewhere)
    worker.start()
    worker.join(WAIT)
    assert len(record.unmarked) == 2
    record.mark_run(drv)  # this thread's work is marked with an event
    assert record.unmarked == {(STREAM_PER_THREAD, other[0])}, "another thread's unmarked work was forgotten"
    before = drv.calls["ctx_synchronize"]
    for step in record.wait_steps(drv):
        step()
    assert drv.calls["ctx_synchronize"] == before + 1, "release no longer waits for the other thread's work"
    assert run_actions(record.teardown(drv)) == ([], [])
    assert record.events == {}
    backend.assert_clean(drv)
