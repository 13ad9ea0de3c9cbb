"""Numba specifics: deferred deallocations held for the whole capture, warm-up before capture,
only device arrays inside a capture."""

import contextlib

import numpy as np
import pytest

from lifecycle import GraphState
from lifecycle.numba_glue import check_device_args


class Boom(Exception):
    pass


def _recording_guard(drv, events):
    @contextlib.contextmanager
    def guard():
        events.append(("enter", len(drv.log)))
        try:
            yield
        finally:
            events.append(("exit", len(drv.log)))
    return guard


@pytest.mark.parametrize("fails", [False, True])
def test_capture_guard_spans_begin_to_instantiate_or_discard(backend, fails):
    s = backend.stream()
    drv, events = backend.instrumented(), []
    with backend.provider(drv, capture_guard=_recording_guard(drv, events)) as p:
        with pytest.raises(Boom) if fails else contextlib.nullcontext():
            with p.capture(7, stream=s) as cap:
                cap.stage(np.ones(4, np.float32))
                if fails:
                    raise Boom
        calls = [name for name, _ in drv.log]
        (_, entered), (_, exited) = events
        begin = calls.index("stream_begin_capture")
        last = max(i for i, name in enumerate(calls) if name in ("graph_instantiate", "stream_end_capture",
                                                                  "mem_free_host"))
        assert entered <= begin and exited > last, (events, calls)
        assert cap.state is (GraphState.DISCARDED if fails else GraphState.READY)
    backend.assert_clean(drv)


def test_record_warms_up_once_then_captures(backend):
    s, dst, one = backend.stream(), backend.zeros(16), backend.zeros(16)
    runs = []

    def step(cap):
        runs.append(cap.eager)
        cap.copy_to_device(one, cap.stage(np.ones(16, np.float32)))
        backend.add(cap.stream, dst, one)

    with backend.provider() as p:
        p.record(7, step, stream=s)
        assert runs == [True, False], "one eager warm-up run, then the capture"
        np.testing.assert_array_equal(backend.read(dst), np.ones(16))  # only the warm-up ran
        assert p.counters.pinned_buffers == 1, "the warm-up's staging buffer is freed after it ran"
        p.replay(7)
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(16, 3.0))
    backend.assert_clean()


def test_only_device_arrays_may_be_launched_inside_a_capture():
    class DeviceArray:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}

    check_device_args((DeviceArray(), 3, 2.5, np.float32(1)))
    with pytest.raises(TypeError, match="argument 1 is a host numpy array"):
        check_device_args((DeviceArray(), np.ones(4)))


class GuardFailed(Exception):
    pass


def test_a_capture_guard_that_fails_to_start_leaves_the_callers_context_and_the_stream(backend):
    s = backend.stream()
    drv = backend.instrumented()

    def failing_guard():
        raise GuardFailed

    with backend.provider(drv, capture_guard=failing_guard) as p:
        before = backend.base.ctx_get_current()
        backend.base.ctx_set_current(0)  # the caller has no current context
        try:
            with pytest.raises(GuardFailed):
                with p.capture(7, stream=s):
                    pass
            assert backend.base.ctx_get_current() == 0, "the provider's context was left current"
        finally:
            backend.base.ctx_set_current(before)
        assert 7 not in p.graph_ids()
    with backend.provider(drv) as q:  # the stream's claim was released: it captures at once
        with q.capture(7, stream=s) as cap:
            cap.stage(np.ones(4, np.float32))
    backend.assert_clean(drv)


def test_a_capture_guard_that_fails_on_exit_after_a_good_capture_keeps_the_graph(backend):
    """The capture was instantiated before the guard's exit raised: the guard's error is raised,
    the graph is kept (READY; documented at ``GraphProvider(capture_guard=)``), and it replays
    and releases like any other; the caller's context is restored."""
    s, dst = backend.stream(), backend.zeros(4)

    @contextlib.contextmanager
    def failing_exit():
        yield
        raise GuardFailed

    with backend.provider(capture_guard=failing_exit) as p:
        before = backend.base.ctx_get_current()
        with pytest.raises(GuardFailed):
            with p.capture(7, stream=s) as cap:
                cap.copy_to_device(dst, cap.stage(np.full(4, 3.0, np.float32)))
        assert backend.base.ctx_get_current() == before
        assert p.state(7) is GraphState.READY
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(4, 3.0))
        p.release(7)
    backend.assert_clean()


class Interrupted(BaseException):
    """Like ``KeyboardInterrupt``, without stopping pytest when it escapes."""


def test_leaving_the_with_block_keeps_the_users_error_over_any_close_error(backend, monkeypatch):
    """Even a ``BaseException`` from ``close()`` (an interrupt while it waits) is attached to the
    user's exception, not raised in its place."""
    with pytest.raises(Boom) as caught:
        with backend.provider() as p:
            real_close = p.close

            def interrupted_close():
                real_close()
                raise Interrupted

            monkeypatch.setattr(p, "close", interrupted_close)
            raise Boom
    assert [type(e) for e in caught.value.cleanup_errors] == [Interrupted]


def test_a_capture_whose_body_raises_leaves_the_callers_context_current(backend):
    """A capture makes the provider's context current for its body; when the body raises, the
    caller's own context (here: none) is current again once the error reaches the caller."""
    s = backend.stream()
    with backend.provider() as p:
        before = backend.base.ctx_get_current()
        backend.base.ctx_set_current(0)  # the caller has no current context
        try:
            with pytest.raises(Boom):
                with p.capture(7, stream=s) as cap:
                    cap.stage(np.ones(4, np.float32))
                    raise Boom
            assert backend.base.ctx_get_current() == 0, "the provider's context was left current"
        finally:
            backend.base.ctx_set_current(before)
        assert 7 not in p.graph_ids()
    backend.assert_clean()
