"""Issue 22 item 5 probe (real driver): does a staging buffer's object die while release waits?

Runs the scenario of ``tests/lifecycle/test_threads.py::test_release_from_another_thread_waits_for_
the_replay_in_flight`` ``--runs`` times: thread A replays a graph whose first node is a host
function blocked on a gate; thread B calls ``release``; 0.2 s later (after ``gc.collect()``) the
buffer, held by the probe only through a weak reference, must be alive and not freed, and release
must not have returned. Every driver call is logged with its time and thread; an anomaly prints
that log and thread B's stack.

    python3 bench/lifecycle_release_probe.py --runs 40
"""

from __future__ import annotations

__all__ = ["main"]

import argparse
import gc
import sys
import threading
import time
import traceback
import weakref

import numpy as np

WAIT = 20.0


class _Logged:
    """Forward to a driver, logging ``(seconds, thread name, method)`` for every call."""

    def __init__(self, inner, log):
        self._inner, self._log = inner, log

    def __getattr__(self, name):
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        def call(*args):
            self._log.append((time.monotonic(), threading.current_thread().name, name))
            return target(*args)
        return call


def one_run(cuda, RealDriver, FaultInjectingDriver, GraphProvider, stream) -> str | None:
    log: list = []
    drv = FaultInjectingDriver(_Logged(RealDriver(), log))
    dst = cuda.to_device(np.zeros(1024, np.float32))
    gate, entered = threading.Event(), threading.Event()

    def block():
        entered.set()
        gate.wait(WAIT)

    anomaly = None
    with GraphProvider(drv) as p:
        with p.capture(7, stream=stream) as cap:
            cap.host_func(block)
            buf = cap.stage(np.full(1024, 7.0, np.float32))
            cap.copy_to_device(dst, buf)
        ref = weakref.ref(buf)
        del buf, cap
        t_replay = time.monotonic()
        p.replay(7)
        assert entered.wait(WAIT)
        done = threading.Event()
        b = threading.Thread(target=lambda: (p.release(7), done.set()), name="releaser")
        b.start()
        time.sleep(0.2)
        returned = done.is_set()
        gc.collect()
        alive = ref()
        state = "gone" if alive is None else ("freed" if alive.freed else "alive")
        del alive
        if returned or state != "alive":
            frames = sys._current_frames().get(b.ident)
            stack = "".join(traceback.format_stack(frames)) if frames is not None else "(thread ended)"
            calls = "\n".join(f"  {t - t_replay:+.4f} s {who}: {name}" for t, who, name in list(log)
                              if t >= t_replay)
            anomaly = f"release returned: {returned}; buffer: {state}\ncalls since the replay:\n{calls}\n" \
                      f"releaser stack:\n{stack}"
        gate.set()
        b.join(WAIT)
    return anomaly


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args(argv)
    from numba import cuda

    from lifecycle import FaultInjectingDriver, GraphProvider, RealDriver
    cuda.current_context()
    base = RealDriver()
    base.init()
    ctx = base.primary_ctx_retain(0)
    base.ctx_set_current(ctx)
    stream = base.stream_create()
    anomalies = []
    t0 = time.monotonic()
    for i in range(args.runs):
        found = one_run(cuda, RealDriver, FaultInjectingDriver, GraphProvider, stream)
        if found:
            anomalies.append(found)
            print(f"run {i}: ANOMALY\n{found}", flush=True)
    base.stream_destroy(stream)
    base.primary_ctx_release(0)
    print(f"release probe: {args.runs} runs in {time.monotonic() - t0:.1f} s, {len(anomalies)} anomalies")
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
