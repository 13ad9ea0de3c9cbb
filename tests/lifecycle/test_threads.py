"""Several threads, one provider: release waits for the replay in flight, operations are serialized,
the provider's context is current in every calling thread."""

import gc
import random
import threading
import time
import weakref

import numpy as np
import pytest

from lifecycle import GraphStateError

WAIT = 20.0  # bound on every wait in this file


def test_release_from_another_thread_waits_for_the_replay_in_flight(backend):
    s, dst = backend.stream(), backend.zeros(1024)
    gate, entered, timed_out = threading.Event(), threading.Event(), []

    def block():  # runs on a driver thread: no CUDA calls, bounded wait
        entered.set()
        if not gate.wait(WAIT):
            timed_out.append(True)

    with backend.provider() as p:
        with p.capture(7, stream=s) as cap:
            cap.host_func(block)
            buf = cap.stage(np.full(1024, 7.0, np.float32))  # read only after block() returns
            cap.copy_to_device(dst, buf)
        ref = weakref.ref(buf)
        del buf, cap

        p.replay(7)  # caller A: asynchronous, returns while the graph is blocked
        assert entered.wait(WAIT), "the captured host function never ran"
        done, errors = threading.Event(), []

        def caller_b():
            try:
                p.release(7)
            except Exception as exc:  # reported below
                errors.append(exc)
            done.set()

        b = threading.Thread(target=caller_b)
        b.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        gc.collect()  # (a device-synchronizing free here would stall until the gate's timeout:
        buf = ref()   # the real backend holds Numba's deferred frees for the whole test)
        late = time.monotonic() - t0
        state = "gone" if buf is None else ("freed" if buf.freed else "alive")
        del buf
        returned, gate_timed_out = done.is_set(), list(timed_out)
        gate.set()
        b.join(WAIT)
        assert gate_timed_out == [] and late < 1.0, f"the check ran {late:.1f} s late: the gate timed out first"
        assert not returned, "release returned while the replay was still in flight"
        assert state == "alive", f"the pinned buffer was {state} while release waited for the replay"
        assert done.is_set() and errors == [] and timed_out == []
        gc.collect()
        assert ref() is None, "release must free the buffer once the replay finished"
        np.testing.assert_array_equal(backend.read(dst), np.full(1024, 7.0))
    backend.assert_clean()


class _Kept:
    """A retained object (weak-referenceable)."""


def test_the_released_graphs_objects_live_until_release_returns(backend):
    """Issue 22 item 5: release frees the memory after the wait, but the graph's Python objects
    (staging buffers, retained objects) stay referenced until release returns. Observed from the
    releasing thread's last driver call (restoring its context), after the frees."""
    s, dst = backend.stream(), backend.zeros(64)
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        with p.capture(7, stream=s) as cap:
            buf = cap.stage(np.full(64, 7.0, np.float32))
            cap.copy_to_device(dst, buf)
            kept = cap.retain(_Kept())
        refs = [weakref.ref(buf), weakref.ref(kept)]
        del buf, cap, kept
        p.replay(7)
        seen, releaser = [], threading.Thread(target=p.release, args=(7,))
        real = drv.inner.ctx_set_current

        def restore_context(ctx):  # the releasing thread's last driver call
            if threading.current_thread() is releaser and drv.calls["mem_free_host"]:
                gc.collect()
                seen.append([ref() is not None for ref in refs])
            return real(ctx)

        drv.inner = _Patched(drv.inner, "ctx_set_current", restore_context)
        try:
            releaser.start()
            releaser.join(WAIT)
        finally:
            drv.inner = drv.inner.wrapped
        assert not releaser.is_alive() and p.graph_ids() == ()
        assert seen and all(all(alive) for alive in seen), f"objects died inside release: {seen}"
        gc.collect()
        assert [ref() for ref in refs] == [None, None], "release returned still holding the objects"
        np.testing.assert_array_equal(backend.read(dst), np.full(64, 7.0))
    backend.assert_clean(drv)


_DESTROYS = ("graph_exec_destroy", "graph_destroy", "event_destroy", "mem_free_host")


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_release_waits_for_another_threads_synchronize_of_the_same_graph(backend, graphs):
    """release() destroys a graph's executable graph, events and buffers only once every other
    thread's synchronize() of that graph has returned (its wait may still use them; an eager
    record's synchronize waits on its events). Thread A is held inside its driver wait (stream or
    event synchronize) while thread B releases the graph; B's own wait returns at once, and B must
    then wait for A: no destroy or free before A's wait has returned, and B returns only after."""
    s, dst = backend.stream(), backend.zeros(8)
    drv = backend.instrumented()
    wait_name = "stream_synchronize" if graphs else "event_synchronize"
    with backend.provider(drv, graphs=graphs) as p:
        p.record(7, lambda cap: cap.copy_to_device(dst, cap.stage(np.full(8, 7.0, np.float32))), stream=s)
        p.replay(7)
        real_wait = getattr(drv.inner, wait_name)
        a_inside, b_waited, b_done = threading.Event(), threading.Event(), threading.Event()
        destroyed_while_a_waited, b_returned_while_a_waited, errors = [], [], []

        def held_wait(*args):
            me = threading.current_thread()
            if me is a:  # A: held inside its wait until B's wait ended and B had time to go on
                a_inside.set()
                if b_waited.wait(WAIT):
                    b_done.wait(0.5)  # a release that does not wait for A returns meanwhile
                try:
                    return real_wait(*args)  # (on a destroyed event this raises: the bug itself)
                finally:
                    destroyed_while_a_waited.append({n: drv.calls[n] - base[n] for n in _DESTROYS
                                                     if drv.calls[n] > base[n]})
                    b_returned_while_a_waited.append(b_done.is_set())
            real_wait(*args)
            if me is b:
                b_waited.set()

        def run(fn, done=None):
            try:
                fn(7)
            except Exception as exc:  # reported below
                errors.append(exc)
            if done is not None:
                done.set()

        a = threading.Thread(target=run, args=(p.synchronize,))
        b = threading.Thread(target=run, args=(p.release, b_done))
        base = {n: drv.calls[n] for n in _DESTROYS}  # (the warm-up freed its own buffer)
        drv.inner = _Patched(drv.inner, wait_name, held_wait)
        try:
            a.start()
            assert a_inside.wait(WAIT), "thread A's synchronize never reached its wait"
            b.start()
            a.join(WAIT)
            b.join(WAIT)
        finally:
            drv.inner = drv.inner.wrapped
        assert not a.is_alive() and not b.is_alive(), "a thread hung"
        assert b_waited.is_set(), "thread B's release never waited for the graph's work"
        assert destroyed_while_a_waited == [{}], \
            f"release destroyed or freed the graph's handles while A's synchronize waited: {destroyed_while_a_waited}"
        assert b_returned_while_a_waited == [False], "release returned while A's synchronize waited"
        assert errors == [] and p.graph_ids() == ()
        handle = "graph_exec_destroy" if graphs else "event_destroy"
        assert drv.calls[handle] > base[handle], "the released graph's handles were never destroyed"
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
    backend.assert_clean(drv)


def test_each_calling_thread_gets_the_providers_context_and_keeps_its_own(backend):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        with p.capture(7, stream=s) as cap:
            cap.copy_to_device(dst, cap.stage(np.full(8, 7.0, np.float32)))
        seen = []

        def fresh_thread():  # starts with no current context
            seen.append(backend.base.ctx_get_current())
            p.replay(7)
            p.synchronize(7)
            seen.append(backend.base.ctx_get_current())

        t = threading.Thread(target=fresh_thread)
        t.start()
        t.join(WAIT)
        assert seen == [0, 0], "the thread's (absent) context must be restored after each call"
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
    backend.assert_clean()


def test_capture_is_thread_local(backend):
    """Unsafe calls in *other* threads (pinned alloc/free, synchronize) do not invalidate a capture."""
    s, s2, dst, dst2 = backend.stream(), backend.stream(), backend.zeros(8), backend.zeros(8)
    with backend.provider() as p, backend.provider() as q:
        with p.capture(7, stream=s) as cap:
            cap.copy_to_device(dst, cap.stage(np.full(8, 7.0, np.float32)))
            errors = []

            def other():
                try:
                    with q.capture(1, stream=s2) as c:
                        c.copy_to_device(dst2, c.stage(np.ones(8, np.float32)))
                    q.replay(1)
                    q.release(1)  # synchronize + cuMemFreeHost while p is capturing
                except Exception as exc:
                    errors.append(exc)

            t = threading.Thread(target=other)
            t.start()
            t.join(WAIT)
            assert not t.is_alive() and errors == []
        p.replay(7)
        p.synchronize(7)
        np.testing.assert_array_equal(backend.read(dst), np.full(8, 7.0))
        np.testing.assert_array_equal(backend.read(dst2), np.ones(8))
    backend.assert_clean()


THREADS, OPS, IDS, STREAMS, SEED = 8, 400, 12, 3, 20240611
EXPECTED = (GraphStateError,)  # UnknownGraphError is a GraphStateError; no other refusal: callers wait


def test_stress_random_capture_replay_release_from_many_threads(backend):
    streams = [backend.stream() for _ in range(STREAMS)]
    slots = [backend.zeros(4) for _ in range(IDS)]  # graph id i copies its payload into slot i
    tally = {op: [0, 0] for op in ("capture", "replay", "release", "synchronize", "capture waited")}
    unexpected, lock = [], threading.Lock()
    start = threading.Barrier(THREADS, timeout=WAIT)

    with backend.provider() as p:
        def capture(tid, i, rng, gid):
            """Capture ``gid``; waits its turn while another thread's capture is open."""
            t0 = time.monotonic()
            with p.capture(gid, stream=streams[rng.randrange(STREAMS)]) as cap:
                if time.monotonic() - t0 > 0.0002:
                    with lock:
                        tally["capture waited"][0] += 1
                buf = cap.stage(np.full(4, tid * 10000 + i, np.float32))
                if rng.random() < 0.05:
                    time.sleep(0.0005)  # widen the window for conflicting callers
                cap.copy_to_device(slots[gid], buf)
                if rng.random() < 0.2:
                    cap.host_func(lambda: None)

        def worker(tid):
            rng = random.Random(SEED * 100 + tid)
            start.wait()
            for i in range(OPS):
                op = rng.choice(("capture", "capture", "replay", "replay", "replay", "release", "synchronize"))
                gid = rng.randrange(IDS)
                try:
                    if op == "capture":
                        capture(tid, i, rng, gid)
                    else:
                        getattr(p, op)(gid)
                    ok = 0
                except EXPECTED:
                    ok = 1
                except Exception as exc:
                    with lock:
                        unexpected.append(f"thread {tid} op {i} {op}({gid}): {exc!r}")
                    return
                with lock:
                    tally[op][ok] += 1

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a worker hung"
        assert unexpected == []
        print("stress tally (succeeded, refused):", tally)
        waited = tally.pop("capture waited")[0]
        assert sum(sum(v) for v in tally.values()) == THREADS * OPS
        for op, (succeeded, refused) in tally.items():
            assert succeeded >= 20 and refused > 0, f"{op} not exercised both ways: {tally}"
        assert waited > 0, "no capture ever waited for another: the test is too tame"

        for gid in p.graph_ids():  # every surviving graph still computes its own payload
            expected = p.buffers(gid)[0].array.copy()
            p.replay(gid)
            p.synchronize(gid)
            np.testing.assert_array_equal(backend.read(slots[gid]), expected)
    assert p.counters.graphs_alive == 0 and p.counters.pinned_bytes == 0
    backend.assert_clean()


@pytest.mark.parametrize("graphs", [True, False])
def test_operations_are_serialized(backend, graphs):
    """No two graph operations of one provider are ever inside the driver at the same time."""
    inside, overlaps, lock = [0], [], threading.Lock()
    drv = backend.instrumented()
    real_launch = drv.inner.graph_launch if graphs else drv.inner.event_record

    def guarded(*args):
        with lock:
            inside[0] += 1
            if inside[0] > 1:
                overlaps.append(inside[0])
        time.sleep(0.001)
        try:
            return real_launch(*args)
        finally:
            with lock:
                inside[0] -= 1

    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider(drv, graphs=graphs) as p:
        p.record(7, lambda cap: cap.copy_to_device(dst, cap.stage(np.ones(8, np.float32))),
                 stream=s, warmup=False)
        drv.inner = _Patched(drv.inner, "graph_launch" if graphs else "event_record", guarded)
        threads = [threading.Thread(target=lambda: [p.replay(7) for _ in range(20)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        drv.inner = drv.inner.wrapped
    assert overlaps == []
    backend.assert_clean(drv)


class _Patched:
    """Forward to ``wrapped`` except one method."""

    def __init__(self, wrapped, name, fn):
        self.wrapped, self._name, self._fn = wrapped, name, fn

    def __getattr__(self, name):
        return self._fn if name == self._name else getattr(self.wrapped, name)
