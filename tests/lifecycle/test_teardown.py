"""Teardown: close() and the context-manager exit release everything, idempotently; counters prove it."""

import threading

import numpy as np
import pytest

from lifecycle import CaptureError, CaptureStatus, ClosedError, Counters, DriverError


def _graph(p, graph_id, stream, dst, *, buffers=1):
    with p.capture(graph_id, stream=stream) as cap:
        for _ in range(buffers):
            cap.copy_to_device(dst, cap.stage(np.full(dst.shape, graph_id, np.float32)))
        cap.host_func(lambda: None)


def test_counters_follow_what_is_held(backend):
    s, dst = backend.stream(), backend.zeros(32)
    with backend.provider() as p:
        assert p.counters == Counters(0, 0, 0, 0, 0, 0, 0)
        cap = p.begin_capture(7, stream=s)
        assert p.counters.capturing == 1 and p.counters.graphs_alive == 1
        p.end_capture(cap)
        _graph(p, 8, s, dst, buffers=2)
        p.register_external(object())
        c = p.counters
        assert (c.graphs_alive, c.capturing, c.pinned_buffers, c.pinned_bytes, c.external_buffers, c.host_funcs) \
            == (2, 0, 2, 2 * 32 * 4, 1, 1)
        p.release(8)
        assert p.counters.pinned_bytes == 0 and p.counters.graphs_alive == 1
    assert p.counters == Counters(0, 0, 0, 0, 0, 0, 0)
    backend.assert_clean()


def test_close_releases_every_graph_and_buffer_idempotently(backend):
    s, dst = backend.stream(), backend.zeros(16)
    p = backend.provider()
    for gid in (3, 1, 2):
        _graph(p, gid, s, dst)
    p.replay(1)
    p.replay(2)  # still in flight when close() waits
    p.register_external(bytearray(8))
    _ = p.stream  # the provider's own stream, destroyed by close()
    p.close()
    assert p.closed and p.counters == Counters(0, 0, 0, 0, 0, 0, 0)
    backend.assert_clean()
    p.close()  # idempotent
    for op in (p.replay, p.release):
        with pytest.raises(ClosedError):
            op(1)
    with pytest.raises(ClosedError):
        with p.capture(9, stream=s):
            pass
    with pytest.raises(ClosedError):
        p.register_external(object())
    backend.assert_clean()


def test_context_manager_exit_closes_even_when_the_block_raises(backend):
    s, dst = backend.stream(), backend.zeros(16)
    with pytest.raises(ZeroDivisionError):
        with backend.provider() as p:
            _graph(p, 1, s, dst)
            raise ZeroDivisionError
    assert p.closed and p.counters.graphs_alive == 0
    backend.assert_clean()


def test_close_from_another_thread_while_a_capture_is_open_is_refused_naming_the_owner(backend):
    s = backend.stream()
    p = backend.provider()
    cap = p.begin_capture(7, stream=s)
    errors = []
    t = threading.Thread(target=lambda: errors.append(_error_of(p.close)), name="closer")
    t.start()
    t.join(20)
    assert isinstance(errors[0], CaptureError)
    message = str(errors[0])
    assert f"by thread {threading.get_ident()} (MainThread)" in message and "discard_capture(7)" in message
    assert not p.closed and p.counters.capturing == 1
    assert backend.capture_status(s) is CaptureStatus.ACTIVE
    p.end_capture(cap)
    p.close()
    backend.assert_clean()


def _error_of(fn, *args):
    try:
        fn(*args)
    except Exception as exc:
        return exc
    return None


def test_failed_cleanup_is_retried_by_close(backend):
    s, dst = backend.stream(), backend.zeros(16)
    drv = backend.instrumented({"graph_exec_destroy": 1, "mem_free_host": 1})
    p = backend.provider(drv)
    _graph(p, 7, s, dst)
    with pytest.raises(DriverError, match="cuGraphExecDestroy") as info:
        p.release(7)
    assert info.value is drv.injected[0]
    assert drv.injected[1] in info.value.cleanup_errors  # both failures reported
    assert p.graph_ids() == () and p.counters.pending_cleanup == 2 and p.counters.pinned_buffers == 1
    p.close()
    assert p.counters == Counters(0, 0, 0, 0, 0, 0, 0)
    backend.assert_clean(drv)
