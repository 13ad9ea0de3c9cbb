"""Retained staging buffers: owned per graph id, read at every replay, freed only by that id's release."""

import gc
import weakref

import numpy as np
import pytest

from lifecycle import LifecycleError, PinnedBuffer

from payloads import capture_payload


def test_two_owned_ids_keep_separate_payloads_until_their_own_release(backend):
    s, dst7, dst8 = backend.stream(), backend.zeros(256), backend.zeros(256)
    with backend.provider() as p:
        ref7 = capture_payload(p, 7, s, dst7, 7.0)
        ref8 = capture_payload(p, 8, s, dst8, 8.0)
        gc.collect()  # the caller holds no reference: only the provider keeps the payloads alive
        assert isinstance(ref7(), PinnedBuffer) and isinstance(ref8(), PinnedBuffer)
        assert p.counters.pinned_bytes == 2 * 256 * 4

        p.replay(7)
        p.replay(8)
        p.synchronize(8)
        np.testing.assert_array_equal(backend.read(dst7), np.full(256, 7.0))
        np.testing.assert_array_equal(backend.read(dst8), np.full(256, 8.0))

        p.release(7)
        gc.collect()
        assert ref7() is None, "graph 7's payload must be freed by release(7)"
        assert ref8() is not None and not ref8().freed, "release(7) must not free graph 8's payload"
        assert p.counters.pinned_bytes == 256 * 4

        dst8_again = backend.zeros(256)
        backend.add(s, dst8_again, dst8)  # keep the stream busy with unrelated work first
        p.replay(8)
        p.synchronize(8)
        np.testing.assert_array_equal(backend.read(dst8), np.full(256, 8.0))

        p.release(8)
        gc.collect()
        assert ref8() is None
        assert p.counters.pinned_bytes == 0 and p.counters.graphs_alive == 0
    backend.assert_clean()


def _replays_read_the_buffer_as_it_is(backend, p, dst):
    """Graph 7's one staged buffer is rewritten between replays; each replay copies what it holds."""
    for value in (2.0, 3.0):
        (buf,) = p.buffers(7)
        buf.array[:] = value  # update the staged input between replays
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(32, value))


def test_replay_reads_the_retained_buffer_as_it_is_at_replay_time(backend):
    s, dst = backend.stream(), backend.zeros(32)
    with backend.provider() as p:
        capture_payload(p, 7, s, dst, 1.0)
        _replays_read_the_buffer_as_it_is(backend, p, dst)
    backend.assert_clean()


def test_a_buffer_of_another_graph_cannot_be_captured(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        capture_payload(p, 7, s, dst, 7.0)
        (buf7,) = p.buffers(7)
        with pytest.raises(LifecycleError, match="pinned buffer of graph 7 cannot be read by graph 8"):
            with p.capture(8, stream=s) as cap:
                cap.copy_to_device(dst, buf7)
        assert p.graph_ids() == (7,) and not buf7.freed
        with pytest.raises(TypeError, match="PinnedBuffer"):
            with p.capture(8, stream=s) as cap:
                cap.copy_to_device(dst, np.ones(8, np.float32))  # pageable host memory
        del buf7
    backend.assert_clean()


def test_a_freed_buffer_refuses_access(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        capture_payload(p, 7, s, dst, 7.0)
        (buf,) = p.buffers(7)
        p.release(7)
        assert buf.freed
        with pytest.raises(LifecycleError, match="freed when the graph was released"):
            _ = buf.array
    backend.assert_clean()


def test_external_buffers_are_retained_until_close(backend):
    class Caller:
        pass

    with backend.provider() as p:
        obj = Caller()
        assert p.register_external(obj) is obj
        p.register_external(obj)  # registering twice retains once
        ref = weakref.ref(obj)
        del obj
        gc.collect()
        assert ref() is not None and p.counters.external_buffers == 1
    gc.collect()
    assert ref() is None and p.counters.external_buffers == 0
    backend.assert_clean()


def test_retained_objects_live_until_release(backend):
    class DeviceThing:
        pass

    s = backend.stream()
    with backend.provider() as p:
        with p.capture(7, stream=s) as cap:
            ref = weakref.ref(cap.retain(DeviceThing()))
        gc.collect()
        assert ref() is not None
        p.release(7)
        gc.collect()
        assert ref() is None
    backend.assert_clean()


def test_an_eager_replay_copies_what_the_staged_buffer_holds_at_replay_time(backend):
    """With graphs disabled, a replay re-runs the step with the first run's staging buffers *as
    they are*: ``stage`` does not overwrite them with the step's data again, so new data written
    into the staged buffer between runs is what the replay copies (as a graph replay would)."""
    s, dst = backend.stream(), backend.zeros(32)

    def step(cap):
        cap.copy_to_device(dst, cap.stage(np.full(32, 1.0, np.float32)))

    with backend.provider(graphs=False) as p:
        p.record(7, step, stream=s)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(32, 1.0))
        _replays_read_the_buffer_as_it_is(backend, p, dst)
        assert p.counters.pinned_buffers == 1
    backend.assert_clean()
