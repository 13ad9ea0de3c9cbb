"""Ownership by graph id: one open capture, owner-only end, unique ids, clear errors, no state change."""

import threading

import numpy as np
import pytest

from lifecycle import CaptureError, CaptureStatus, GraphState, GraphStateError, StreamError, UnknownGraphError

from payloads import capture_payload


def test_capture_replay_release_moves_through_states(backend):
    s, dst, one = backend.stream(), backend.zeros(64), backend.zeros(64)
    with backend.provider() as p:
        with p.capture(7, stream=s) as cap:
            assert cap.state is GraphState.CAPTURING and p.state(7) is GraphState.CAPTURING
            buf = cap.stage(np.ones(64, np.float32))
            cap.copy_to_device(one, buf)
            backend.add(cap.stream, dst, one)
        assert cap.state is GraphState.READY and p.graph_ids() == (7,)
        for _ in range(3):
            p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(64, 3.0))  # captured, not run eagerly
        p.release(7)
        assert cap.state is GraphState.RELEASED and p.graph_ids() == ()
        assert p.counters.pinned_bytes == 0
    backend.assert_clean()


def test_second_capture_while_one_is_open_is_refused_on_its_thread_and_waits_on_others(backend):
    s, s2, dst = backend.stream(), backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        cap = p.begin_capture(7, stream=s)
        before = p.counters
        with pytest.raises(CaptureError, match="this thread is capturing graph 7"):
            p.begin_capture(8, stream=s2)
        errors = []
        t = threading.Thread(target=lambda: _record_error(errors, lambda: capture_payload(p, 9, s2, dst, 9.0)))
        t.start()
        t.join(0.3)
        assert t.is_alive() and errors == [], "another thread's capture did not wait its turn"
        assert p.counters == before and p.graph_ids() == (7,)
        assert backend.capture_status(s2) is CaptureStatus.NONE
        p.end_capture(cap)
        t.join(10)
        assert errors == [] and p.graph_ids() == (7, 9)
        capture_payload(p, 8, s2, dst, 1.0)  # the refused id is free
        assert p.graph_ids() == (7, 8, 9)
    backend.assert_clean()


def _record_error(errors, fn):
    try:
        fn()
    except Exception as exc:
        errors.append(exc)


def test_end_that_does_not_match_the_owner_is_refused(backend):
    s = backend.stream()
    with backend.provider() as p:
        old = p.begin_capture(6, stream=s)
        p.end_capture(old)
        cap = p.begin_capture(7, stream=s)
        with pytest.raises(CaptureError, match="not the open capture"):
            p.end_capture(old)  # a stale capture object
        errors = []
        t = threading.Thread(target=lambda: _record_error(errors, lambda: p.end_capture(cap)))
        t.start()
        t.join(10)
        assert isinstance(errors[0], CaptureError) and "begun by thread" in str(errors[0])
        assert p.state(7) is GraphState.CAPTURING
        assert backend.capture_status(s) is CaptureStatus.ACTIVE
        p.end_capture(cap)
        assert p.state(7) is GraphState.READY
        with pytest.raises(CaptureError, match="has ended"):
            cap.pinned(4)
    backend.assert_clean()


def test_capturing_an_existing_id_is_refused_and_the_body_never_runs(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        capture_payload(p, 7, s, dst, 7.0)
        before = p.counters
        ran = []
        with pytest.raises(GraphStateError, match="already exists"):
            with p.capture(7, stream=s):
                ran.append(True)
        assert ran == [] and p.counters == before
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
    backend.assert_clean()


def test_unknown_and_released_ids_are_clear_errors(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        with pytest.raises(UnknownGraphError, match="cannot replay graph 99: no such graph"):
            p.replay(99)
        capture_payload(p, 7, s, dst, 1.0)
        p.release(7)
        for op in (p.replay, p.release, p.synchronize):
            with pytest.raises(UnknownGraphError, match="graph 7"):
                op(7)
        with pytest.raises(TypeError):
            p.replay("7")
        with pytest.raises(TypeError, match="graph_id must be an int"):
            with p.capture(True):
                pass
    backend.assert_clean()


def test_a_graph_cannot_be_replayed_while_it_is_being_captured(backend):
    s = backend.stream()
    with backend.provider() as p:
        with p.capture(7, stream=s):
            with pytest.raises(GraphStateError, match="capturing"):
                p.replay(7)
    backend.assert_clean()


def test_stream_being_captured_makes_other_threads_wait_and_refuses_its_own_thread(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        capture_payload(p, 7, s, dst, 7.0)
        cap = p.begin_capture(8, stream=s)
        errors, threads = [], []
        for op in (p.replay, p.release):
            threads.append(threading.Thread(target=lambda op=op: _record_error(errors, lambda: op(7))))
            threads[-1].start()
            threads[-1].join(0.2)
        assert all(t.is_alive() for t in threads) and errors == [], "another thread did not wait its turn"
        with pytest.raises(CaptureError, match="while this thread is capturing"):
            p.release(7)  # would synchronize and free inside the owner's capture
        with pytest.raises(StreamError, match="being captured for graph 8 by this thread"):
            p.replay(7)  # would be captured into graph 8; waiting for itself would never end
        assert backend.capture_status(s) is CaptureStatus.ACTIVE and p.graph_ids() == (7, 8)
        p.end_capture(cap)
        for t in threads:
            t.join(20)
        assert not any(t.is_alive() for t in threads), "a waiting thread never returned"
        assert len(errors) <= 1 and all(isinstance(e, GraphStateError) for e in errors)  # replay after release
        assert p.graph_ids() == (8,)
    backend.assert_clean()


def test_owner_thread_may_replay_a_graph_on_another_stream_during_capture(backend):
    s, s2, dst7, dst8 = backend.stream(), backend.stream(), backend.zeros(8), backend.zeros(8)
    with backend.provider() as p:
        capture_payload(p, 7, s, dst7, 7.0)
        with p.capture(8, stream=s2) as cap:
            p.replay(7)  # asynchronous work on a stream that is not capturing
            buf = cap.stage(np.full(8, 8.0, np.float32))
            cap.copy_to_device(dst8, buf)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst7), np.full(8, 7.0))
        np.testing.assert_array_equal(backend.read(dst8), np.zeros(8))  # 8 captured, not run
    backend.assert_clean()
