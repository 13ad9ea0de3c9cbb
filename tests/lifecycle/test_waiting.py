"""Issue 22, item 2: contending callers wait their turn for a stream.

An operation that needs a stream another operation holds (a capture on it in another thread; a
wait, launch or warm-up on it while a capture wants it) waits, up to the provider's
``stream_wait_timeout`` (default 30 s); only a wait past the bound is a ``StreamError`` naming the
stream. A thread that holds the stream itself is refused at once (it would wait for itself).

``LIFECYCLE_RACE_LOOPS`` (default 50) sets how often the replay-against-capture race runs.
"""

import os
import threading
import time

import numpy as np
import pytest

from lifecycle import CaptureError, CaptureStatus, StreamError
from lifecycle.streams import DEFAULT_STREAM_WAIT_TIMEOUT, claims

from payloads import capture_payload

WAIT = 20.0
LOOPS = int(os.environ.get("LIFECYCLE_RACE_LOOPS", "50"))


def test_the_default_bound_is_30_seconds_and_settable_per_provider(backend):
    assert DEFAULT_STREAM_WAIT_TIMEOUT == 30.0
    for bad, error in ((0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                       ("30", TypeError), (None, TypeError), (True, TypeError)):
        with pytest.raises(error, match="stream_wait_timeout"):
            backend.provider(stream_wait_timeout=bad)
    with backend.provider(stream_wait_timeout=float("inf")) as p:
        assert p.graph_ids() == ()
    backend.assert_clean()


def test_a_replay_waits_for_a_capture_on_its_stream_then_runs(backend):
    s, dst, out = backend.stream(), backend.zeros(8), backend.zeros(8)
    with backend.provider() as p:
        capture_payload(p, 1, s, dst, 1.0)
        cap = p.begin_capture(2, stream=s)
        errors, t0 = [], time.monotonic()
        t = threading.Thread(target=lambda: errors.append(_error_of(p.replay, 1)))
        t.start()
        t.join(0.3)
        assert t.is_alive(), "the replay did not wait for the capture on its stream"
        cap.copy_to_device(out, cap.stage(np.full(8, 2.0, np.float32)))
        p.end_capture(cap)
        t.join(WAIT)
        assert errors == [None] and time.monotonic() - t0 < WAIT
        p.synchronize(1)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 1.0))
        np.testing.assert_array_equal(backend.read(out), np.zeros(8))  # graph 2 captured, not run
    backend.assert_clean()


def test_a_capture_waits_for_a_long_synchronize_on_its_stream(backend):
    s, dst, gate = backend.stream(), backend.zeros(8), threading.Event()
    with backend.provider() as p:
        with p.capture(1, stream=s) as cap:
            cap.host_func(lambda: gate.wait(WAIT))
            cap.copy_to_device(dst, cap.stage(np.full(8, 1.0, np.float32)))
        p.replay(1)
        syncer = threading.Thread(target=p.synchronize, args=(1,))
        syncer.start()
        _until(lambda: claims.holders(s)[1] >= 1)  # the synchronize holds the stream, waiting on the GPU
        threading.Timer(0.3, gate.set).start()
        t0 = time.monotonic()
        capture_payload(p, 2, s, dst, 2.0)  # waits until the synchronize returned, then captures
        waited = time.monotonic() - t0
        assert waited >= 0.1, "the capture did not wait for the synchronize"
        assert waited < WAIT / 4, "the capture was not woken when the synchronize ended"
        syncer.join(WAIT)
        assert not syncer.is_alive()
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 1.0))
    backend.assert_clean()


@pytest.mark.parametrize("op", ["synchronize", "release"])
def test_a_wait_holds_its_stream_from_its_turn_to_its_end(backend, monkeypatch, op):
    """The use claim a synchronize/release takes for its turn is the one it waits under: between
    them no other thread's capture can slip onto the stream (on the H200 a capture once began
    while a synchronize still waited, in the gap between two claims)."""
    s, dst, gate, drops = backend.stream(), backend.zeros(8), threading.Event(), []
    release = claims.release

    def watched_release(handle):
        release(handle)
        if handle == s and not gate.is_set() and claims.holders(s)[1] == 0:
            drops.append(op)  # the stream was free while the wait had not ended

    with backend.provider() as p:
        with p.capture(1, stream=s) as cap:
            cap.host_func(lambda: gate.wait(WAIT))
            cap.copy_to_device(dst, cap.stage(np.full(8, 1.0, np.float32)))
        p.replay(1)
        monkeypatch.setattr(claims, "release", watched_release)
        waiter = threading.Thread(target=getattr(p, op), args=(1,))
        waiter.start()
        _until(lambda: claims.holders(s)[1] >= 1)
        time.sleep(0.05)
        gate.set()
        waiter.join(WAIT)
        assert not waiter.is_alive() and drops == []
        monkeypatch.undo()
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 1.0))
    backend.assert_clean()


def test_only_a_wait_past_the_bound_fails_naming_the_stream_and_its_holder(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p, backend.provider(stream_wait_timeout=0.2) as q:
        capture_payload(q, 1, s, dst, 1.0)
        cap = p.begin_capture(2, stream=s)
        errors = []
        t = threading.Thread(target=lambda: errors.append(_error_of(q.replay, 1)))
        t0 = time.monotonic()
        t.start()
        t.join(WAIT)
        waited = time.monotonic() - t0
        assert isinstance(errors[0], StreamError), errors
        message = str(errors[0])
        assert f"stream {s:#x}" in message and "waited 0.2 s" in message
        assert f"being captured for graph 2 by thread {threading.get_ident()}" in message
        assert 0.2 <= waited < WAIT
        p.end_capture(cap)
        q.replay(1)  # nothing changed by the failed wait
        q.synchronize(1)
    backend.assert_clean()


def _hold_a_capture(p, stream, errors):
    """Another thread opens graph 1's capture on ``p`` and ends it when the returned event is set."""
    opened, done = threading.Event(), threading.Event()

    def hold():
        cap = p.begin_capture(1, stream=stream)
        opened.set()
        done.wait(WAIT)
        p.end_capture(cap)

    t = threading.Thread(target=_reporting(hold, errors, 0))
    t.start()
    assert opened.wait(WAIT)
    return t, done


def test_a_capture_waits_for_another_threads_capture_of_the_provider_up_to_the_bound(backend):
    s, s2, dst, errors = backend.stream(), backend.stream(), backend.zeros(8), []
    with backend.provider(stream_wait_timeout=0.2) as p, backend.provider(stream_wait_timeout=WAIT) as q:
        t, done = _hold_a_capture(p, s, errors)
        with pytest.raises(CaptureError, match=r"cannot capture graph 2: waited 0\.2 s: graph 1 is being "
                                               r"captured \(thread \d+\); one capture at a time per provider"):
            capture_payload(p, 2, s2, dst, 2.0)
        assert p.graph_ids() == (1,) and backend.capture_status(s2) is CaptureStatus.NONE
        done.set()
        t.join(WAIT)
        t, done = _hold_a_capture(q, s, errors)
        threading.Timer(0.1, done.set).start()
        t0 = time.monotonic()
        capture_payload(q, 2, s2, dst, 2.0)  # waits its turn, and goes as soon as the other ends
        assert time.monotonic() - t0 < WAIT / 4, "the waiting capture was not woken when the other ended"
        t.join(WAIT)
        assert errors == [] and p.graph_ids() == (1,) and q.graph_ids() == (1, 2)
    backend.assert_clean()


def test_a_waiting_capture_goes_before_new_uses_of_its_stream(backend):
    """A stream of steady replays cannot starve a capture: once a capture waits for the stream,
    a new replay from another thread waits behind it."""
    s, dst, out, gate = backend.stream(), backend.zeros(8), backend.zeros(8), threading.Event()
    order, errors = [], []
    with backend.provider() as p, backend.provider() as q:
        with p.capture(1, stream=s) as cap:
            cap.host_func(lambda: gate.wait(WAIT))
            cap.copy_to_device(dst, cap.stage(np.full(8, 1.0, np.float32)))
        p.replay(1)
        holder = threading.Thread(target=_reporting(lambda: p.synchronize(1), errors, 0))
        holder.start()  # holds the stream while it waits on the gated graph
        _until(lambda: claims.holders(s)[1] >= 1)

        def capture():
            with q.capture(5, stream=s) as c:
                order.append("capture began")
                c.copy_to_device(out, c.stage(np.full(8, 5.0, np.float32)))
                time.sleep(0.2)
                order.append("capture ends")

        capturer = threading.Thread(target=_reporting(capture, errors, 0))
        capturer.start()
        _until(lambda: claims.holders(s)[2] == 1)  # the capture now waits for the synchronize
        replayer = threading.Thread(target=_reporting(lambda: (p.replay(1), order.append("replay")), errors, 0))
        replayer.start()
        replayer.join(0.2)
        assert replayer.is_alive(), "a new replay overtook the waiting capture"
        gate.set()
        for t in (holder, capturer, replayer):
            t.join(WAIT)
        assert errors == [] and order == ["capture began", "capture ends", "replay"], (order, errors)
        p.synchronize(1)
    backend.assert_clean()


def test_the_thread_holding_the_stream_is_refused_at_once(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        capture_payload(p, 1, s, dst, 1.0)
        with p.capture(2, stream=s):
            t0 = time.monotonic()
            with pytest.raises(StreamError, match="by this thread"):
                p.replay(1)
            assert time.monotonic() - t0 < 1.0, "refused only after waiting for itself"
    backend.assert_clean()


def test_replays_on_a_stream_race_a_capture_on_it_without_errors(backend):
    """Thread A replays graph 1 on S while thread B captures graph 2 on S, released and captured
    again; ``LOOPS`` rounds, no error, every output right."""
    s, dst1, dst2 = backend.stream(), backend.zeros(8), backend.zeros(8)
    failures = []
    with backend.provider() as p:
        capture_payload(p, 1, s, dst1, 1.0)
        for loop in range(LOOPS):
            start = threading.Barrier(2, timeout=WAIT)

            def replayer():
                start.wait()
                for _ in range(10):
                    p.replay(1)

            def capturer(value=float(loop + 2)):
                start.wait()
                for _ in range(2):
                    capture_payload(p, 2, s, dst2, value)
                    p.replay(2)
                    p.release(2)

            threads = [threading.Thread(target=_reporting(fn, failures, loop)) for fn in (replayer, capturer)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT)
            assert not any(t.is_alive() for t in threads), f"round {loop} hung"
            assert failures == [], failures
            p.synchronize(1)
            np.testing.assert_array_equal(backend.read(dst1), np.full(8, 1.0))
            np.testing.assert_array_equal(backend.read(dst2), np.full(8, loop + 2.0))
    print(f"race: {LOOPS} rounds, no failure")
    backend.assert_clean()


def _until(condition):
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the expected state was never reached"
        time.sleep(0.001)


def _reporting(fn, failures, loop):
    def run():
        try:
            fn()
        except Exception as exc:  # reported by the caller
            failures.append(f"round {loop}: {exc!r}")
    return run


def _error_of(fn, *args):
    try:
        fn(*args)
    except Exception as exc:
        return exc
    return None
