"""Streams: the legacy stream is never captured; the per-thread default stream is refused with graphs
on and used eagerly with graphs off; release waits on the graph's own work only."""

import threading
import time

import numpy as np
import pytest

from lifecycle import STREAM_LEGACY, STREAM_PER_THREAD, CaptureStatus, GraphStateError, StreamError

WAIT = 20.0


@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("legacy", [0, STREAM_LEGACY])
def test_the_legacy_default_stream_is_refused(backend, graphs, legacy):
    with backend.provider(graphs=graphs) as p:
        with pytest.raises(StreamError, match="legacy default stream"):
            with p.capture(7, stream=legacy):
                pass
        assert p.graph_ids() == () and p.counters.capturing == 0
    backend.assert_clean()


def test_per_thread_stream_is_refused_with_graphs_on_naming_the_reason(backend):
    with backend.provider() as p:
        ran = []
        with pytest.raises(StreamError) as info:
            with p.capture(7, stream=STREAM_PER_THREAD):
                ran.append(True)
        message = str(info.value)
        assert "CU_STREAM_PER_THREAD" in message and "graphs" in message and "different stream" in message
        assert ran == [] and p.graph_ids() == () and p.counters.capturing == 0
        assert backend.capture_status(STREAM_PER_THREAD) is CaptureStatus.NONE
    backend.assert_clean()


def test_per_thread_stream_runs_the_same_work_eagerly_with_graphs_off(backend):
    dst, one = backend.zeros(64), backend.zeros(64)

    def step(cap):
        cap.copy_to_device(one, cap.stage(np.ones(64, np.float32)))
        backend.add(cap.stream, dst, one)

    with backend.provider(graphs=False) as p:
        p.record(7, step, stream=STREAM_PER_THREAD)  # runs now, no graph, no warm-up run
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.ones(64))
        p.replay(7)
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(64, 3.0))
        assert p.counters.pinned_buffers == 1, "eager replays reuse the first run's staging buffer"
        with p.capture(8, stream=STREAM_PER_THREAD) as cap:  # the context-manager form runs once
            cap.copy_to_device(dst, cap.stage(np.zeros(64, np.float32)))
        with pytest.raises(GraphStateError, match="nothing to replay"):
            p.replay(8)
        p.release(8)
        p.release(7)
        assert p.counters.pinned_bytes == 0
    backend.assert_clean()


def test_eager_release_from_another_thread_waits_for_the_work_not_its_own_stream(backend):
    """Work sits blocked on thread A's per-thread stream; B's release must wait for *that* work."""
    dst = backend.zeros(256)
    gate, timed_out = threading.Event(), []

    def block():
        if not gate.wait(WAIT):
            timed_out.append(True)

    def step(cap):
        cap.host_func(block)
        cap.copy_to_device(dst, cap.stage(np.full(256, 4.0, np.float32)))  # reads after block()

    with backend.provider(graphs=False) as p:
        p.record(4, step, stream=STREAM_PER_THREAD)  # thread A (this one) enqueues
        done = threading.Event()
        b = threading.Thread(target=lambda: (p.release(4), done.set()))
        b.start()
        time.sleep(0.2)
        assert not done.is_set(), "release returned before the eager work finished"
        assert p.counters.pinned_buffers == 1, "the staging buffer was freed under the GPU"
        gate.set()
        b.join(WAIT)
        assert done.is_set() and timed_out == []
        np.testing.assert_array_equal(backend.read(dst), np.full(256, 4.0))
    backend.assert_clean()


def test_release_waits_for_its_graphs_own_stream(backend):
    """The caller's current (legacy) stream is idle; the graph's stream is blocked."""
    s_graph, dst = backend.stream(), backend.zeros(64)
    gate, timed_out = threading.Event(), []

    def block():
        if not gate.wait(WAIT):
            timed_out.append(True)

    with backend.provider() as p:
        with p.capture(7, stream=s_graph) as cap:
            cap.host_func(block)
            cap.copy_to_device(dst, cap.stage(np.full(64, 7.0, np.float32)))
        p.replay(7)
        done = threading.Event()
        b = threading.Thread(target=lambda: (p.release(7), done.set()))
        b.start()
        time.sleep(0.2)
        assert not done.is_set()
        gate.set()
        b.join(WAIT)
        assert done.is_set() and timed_out == []
        np.testing.assert_array_equal(backend.read(dst), np.full(64, 7.0))
    backend.assert_clean()


def test_eager_runs_from_several_threads_are_all_awaited_by_release(backend):
    """Each thread's per-thread default stream is a different stream: release waits for all."""
    dst = backend.zeros(64)
    gate, timed_out = threading.Event(), []

    def block():
        if not gate.wait(WAIT):
            timed_out.append(True)

    def step(cap):
        if threading.current_thread() is threading.main_thread():
            cap.host_func(block)  # only the main thread's run is held up
        cap.copy_to_device(dst, cap.stage(np.full(64, 2.0, np.float32)))

    with backend.provider(graphs=False) as p:
        p.record(2, step, stream=STREAM_PER_THREAD)  # main thread: blocked behind block()
        other = threading.Thread(target=lambda: p.replay(2))
        other.start()  # another thread's run on its own per-thread stream completes
        other.join(WAIT)
        done = threading.Event()
        releaser = threading.Thread(target=lambda: (p.release(2), done.set()))
        releaser.start()
        time.sleep(0.2)
        assert not done.is_set(), "release must also wait for the main thread's run"
        gate.set()
        releaser.join(WAIT)
        assert done.is_set() and timed_out == []
    backend.assert_clean()
