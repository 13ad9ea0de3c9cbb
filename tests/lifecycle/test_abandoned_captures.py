"""Issue 22, item 1: an abandoned capture never wedges a thread.

A capture begun with ``begin_capture`` whose ``end_capture`` never comes (a notebook cell raised in
between) is discarded by its provider's ``close()``, by leaving the provider's ``with`` block on an
exception, and by ``discard_capture(graph_id)``: the stream leaves capture, the partial graph and
its staging buffers are freed, and the thread may capture, release and close again. Another
thread cannot end it (CUDA): ``close()`` there is refused, naming the owner thread.
"""

import gc
import threading
import time

import numpy as np
import pytest

from lifecycle import (CaptureError, CaptureStatus, GraphProvider, GraphState, SimDriver,
                       UnclosedProviderWarning)
from lifecycle.streams import claims

from payloads import capture_payload

WAIT = 20.0


class Boom(Exception):
    pass


def _abandon(p, graph_id, stream, dst):
    """Begin a capture with a staged copy, a host function and a kernel, and lose its handle."""
    cap = p.begin_capture(graph_id, stream=stream)
    cap.copy_to_device(dst, cap.stage(np.full(dst.shape, 5.0, np.float32)))
    cap.host_func(lambda: None)
    return cap.graph_id


def _thread_is_usable(backend, stream):
    """Every provider on this thread captures, replays, releases and closes again."""
    dst = backend.zeros(8)
    with backend.provider() as q:
        capture_payload(q, 1, stream, dst, 4.0)
        q.replay(1)
        q.synchronize(1)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 4.0))
        q.release(1)


def test_close_discards_its_own_abandoned_capture(backend):
    s, dst = backend.stream(), backend.zeros(8)
    p = backend.provider()
    capture_payload(p, 2, s, dst, 2.0)
    _abandon(p, 3, s, dst)
    assert p.counters.capturing == 1 and backend.capture_status(s) is CaptureStatus.ACTIVE
    p.close()  # the next cell: no CaptureError, the capture is discarded, everything released
    assert p.closed and p.counters.graphs_alive == 0 and p.counters.pinned_buffers == 0
    assert backend.capture_status(s) is CaptureStatus.NONE
    _thread_is_usable(backend, s)
    backend.assert_clean()


def test_leaving_the_with_block_on_an_exception_discards_the_capture(backend):
    s, dst = backend.stream(), backend.zeros(8)
    boom = Boom()
    with pytest.raises(Boom) as info:
        with backend.provider() as p:
            _abandon(p, 3, s, dst)
            raise boom
    assert info.value is boom and not getattr(boom, "cleanup_errors", [])
    assert p.closed and p.counters.capturing == 0 and p.counters.pinned_buffers == 0
    assert backend.capture_status(s) is CaptureStatus.NONE
    _thread_is_usable(backend, s)
    backend.assert_clean()


def test_discard_capture_by_graph_id_frees_the_thread_and_the_id(backend):
    s, dst = backend.stream(), backend.zeros(8)
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        _abandon(p, 3, s, dst)
        with pytest.raises(CaptureError, match="no capture of graph|the open capture is of graph 3"):
            p.discard_capture(4)
        assert p.counters.capturing == 1, "a refused discard changed something"
        p.discard_capture(3)
        assert p.graph_ids() == () and p.counters.capturing == 0 and p.counters.pinned_buffers == 0
        assert p.counters.host_funcs == 0 and drv.live_resources().get("graphs", 0) == 0
        assert backend.capture_status(s) is CaptureStatus.NONE
        with pytest.raises(CaptureError, match="no capture is open"):
            p.discard_capture(3)
        _thread_is_usable(backend, s)
        capture_payload(p, 3, s, dst, 6.0)  # the id is free again
        p.replay(3)
        p.synchronize(3)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 6.0))
    backend.assert_clean(drv)


def test_discard_capture_from_another_thread_is_refused_naming_the_owner(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        _abandon(p, 3, s, dst)
        errors = []

        def other():
            for op in (lambda: p.discard_capture(3), p.close):
                try:
                    op()
                except CaptureError as exc:
                    errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join(WAIT)
        assert len(errors) == 2
        for error in errors:
            assert f"thread {threading.get_ident()} (MainThread)" in str(error)
            assert "discard_capture(3)" in str(error)
        assert p.counters.capturing == 1 and not p.closed
        assert backend.capture_status(s) is CaptureStatus.ACTIVE
    assert p.closed and backend.capture_status(s) is CaptureStatus.NONE  # the owner's exit discards it
    backend.assert_clean()


def test_a_refused_inner_capture_leaves_the_outer_open_and_abortable(backend):
    """``p0.begin_capture`` then ``p1.begin_capture`` on one thread: the inner one is refused before
    touching anything; the outer stays open (documented), can still be ended or discarded, and
    nothing leaks on either provider."""
    s0, s1, dst = backend.stream(), backend.stream(), backend.zeros(8)
    d0, d1 = backend.instrumented(), backend.instrumented()
    with backend.provider(d0) as p0, backend.provider(d1) as p1:
        outer = p0.begin_capture(3, stream=s0)
        outer.copy_to_device(dst, outer.stage(np.full(8, 3.0, np.float32)))
        calls = sum(d1.calls.values())
        with pytest.raises(CaptureError, match="while this thread is capturing graph 3"):
            p1.begin_capture(4, stream=s1)
        assert sum(d1.calls.values()) == calls, "the refused provider touched the driver"
        assert p1.counters.capturing == 0 and p1.graph_ids() == () and d1.live_resources().get("pinned", 0) == 0
        assert backend.capture_status(s0) is CaptureStatus.ACTIVE and outer.state is GraphState.CAPTURING
        assert backend.capture_status(s1) is CaptureStatus.NONE
        p0.discard_capture(3)  # abortable by id (the handle would do too: abort_capture(outer, error))
        assert outer.state is GraphState.DISCARDED and backend.capture_status(s0) is CaptureStatus.NONE
        capture_payload(p1, 4, s1, dst, 4.0)  # the inner capture now works
        p1.replay(4)
        p1.synchronize(4)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 4.0))
    backend.assert_clean(d0, d1)


def test_close_from_a_thread_capturing_for_another_provider_is_still_refused(backend):
    s0, s1, dst = backend.stream(), backend.stream(), backend.zeros(8)
    with backend.provider() as p0, backend.provider() as p1:
        capture_payload(p1, 1, s1, dst, 1.0)
        cap = p0.begin_capture(3, stream=s0)
        with pytest.raises(CaptureError, match="while this thread is capturing graph 3"):
            p1.close()
        assert not p1.closed and p1.graph_ids() == (1,)
        p0.end_capture(cap)
    backend.assert_clean()


def test_a_capture_whose_thread_exited_is_named_as_such_not_as_endable_there():
    """Simulated driver only (on a GPU the stream would stay in capture for the rest of the
    process). A thread that began a capture and returned without ending it: ``close()`` and
    ``discard_capture`` from another thread are refused (CUDA lets only that thread end it), and
    the refusal says the thread has exited and that nothing can end the capture, instead of
    sending the caller to a thread that no longer exists."""
    sim = SimDriver(timeout=5.0)
    sim.ctx_set_current(sim.primary_ctx_retain(0))
    p = GraphProvider(sim, stream_wait_timeout=1.0)
    handle = p.stream
    t = threading.Thread(target=lambda: p.begin_capture(4), name="cell-worker")
    t.start()
    t.join()
    for refused in (p.close, lambda: p.discard_capture(4)):
        with pytest.raises(CaptureError, match="which has exited without ending it") as info:
            refused()
        assert "call end_capture(capture)" not in str(info.value)
    assert p.state(4) is GraphState.CAPTURING and not p.closed
    with pytest.warns(UnclosedProviderWarning):   # dropped: the finalizer warns, frees nothing
        del p, refused, info
        gc.collect()
    # Stream claims are process-wide, by handle, and every SimDriver numbers its streams from the
    # same start: drop the dead capture's claim so that later tests' streams are not held by it.
    assert claims.holders(handle)[0] == 4
    claims.release_capture(handle)
    sim.close()


def test_a_later_thread_with_the_exited_owners_ident_cannot_end_its_capture():
    """Simulated driver only. Thread idents are reused: the first thread started after the
    capturing thread exited usually gets its number (glibc reuses the stack and its pthread id).
    That thread is not the owner (CUDA's per-thread capture state does not carry over), so its
    ``close()`` and ``discard_capture`` are refused as for any other thread, naming the exited
    owner, and the capture stays open; the simulated driver refuses it ``cuStreamEndCapture``."""
    sim = SimDriver(timeout=5.0)
    sim.ctx_set_current(sim.primary_ctx_retain(0))
    p = GraphProvider(sim, stream_wait_timeout=1.0)
    handle, owner = p.stream, {}

    def begin():
        owner["ident"] = threading.get_ident()
        p.begin_capture(4)

    t = threading.Thread(target=begin)
    t.start()
    t.join()
    seen = []

    def later():
        seen.append(threading.get_ident())
        if seen[-1] != owner["ident"]:
            return
        for refused in (p.close, lambda: p.discard_capture(4)):
            try:
                refused()
            except CaptureError as exc:
                seen.append(str(exc))
        sim.ctx_set_current(sim.primary_ctx_retain(0))
        try:
            sim.stream_end_capture(handle)
        except Exception as exc:
            seen.append(str(exc))

    for _ in range(50):   # until a new thread gets the owner's ident
        u = threading.Thread(target=later)
        u.start()
        u.join()
        if seen[-1] != owner["ident"] and not isinstance(seen[-1], int):
            break
    assert owner["ident"] in seen, "no later thread got the exited thread's ident (glibc reuses it)"
    messages = [m for m in seen if isinstance(m, str)]
    assert len(messages) == 3 and all("which has exited without ending it" in m for m in messages[:2])
    assert "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD" in messages[2]
    assert p.state(4) is GraphState.CAPTURING and not p.closed
    with pytest.warns(UnclosedProviderWarning):
        del p
        gc.collect()
    claims.release_capture(handle)   # as in the test above: later tests' streams reuse the handle
    sim.close()


def test_a_dropped_providers_open_capture_does_not_wedge_its_thread():
    """Simulated driver only. A notebook cell ran ``p = GraphProvider(...)``,
    ``cap = p.begin_capture(3)`` and raised; the cell is re-run, so the old provider (and its
    ``Capture``) is garbage-collected with the capture open. No one else can end that capture,
    so the thread's next lifecycle call discards it: the new provider captures, replays and closes,
    and the dropped provider is torn down (its staging buffer freed, its stream destroyed)."""
    sim = SimDriver(timeout=5.0)
    sim.ctx_set_current(sim.primary_ctx_retain(0))
    baseline = sim.live_resources()
    d = sim.device_array(4)
    p = GraphProvider(sim)
    handle = p.stream
    cap = p.begin_capture(3)
    cap.stage(np.ones(4, np.float32))
    with pytest.warns(UnclosedProviderWarning):   # the re-run cell drops the old provider
        del p, cap
        gc.collect()
    with GraphProvider(sim) as q:
        with q.capture(3) as c:
            c.copy_to_device(d, c.stage(np.full(4, 5.0, np.float32)))
        q.replay(3)
        q.synchronize(3)
        np.testing.assert_array_equal(d.copy_to_host(), np.full(4, 5.0))
    assert claims.holders(handle)[0] is None
    deadline = time.monotonic() + 5.0   # the dropped provider's teardown runs on its own thread
    while sim.live_resources() != baseline:
        assert time.monotonic() < deadline, (sim.live_resources(), baseline)
        time.sleep(0.01)
    assert sim.violations == []
    sim.close()
