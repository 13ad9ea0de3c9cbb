"""Issue 22 item 5 probe (real driver): does a staging buffer's object die while release waits?

Runs the scenario of ``tests/lifecycle/test_threads.py::test_release_from_another_thread_waits_for_
the_replay_in_flight`` ``--runs`` times per mode: thread A replays a graph whose first node is a
host function blocked on a gate (timing out after ``GATE_S``); thread B calls ``release``; 0.2 s
later ``gc.collect()`` runs and the buffer, held only through a weak reference, must be alive and
not freed, and release must not have returned. Modes: ``plain`` (as the test was); ``garbage``
(more than ``CUDA_DEALLOCS_COUNT`` Numba device arrays are left in a reference cycle first, so the
collection flushes Numba's deferred frees: ``cuMemFree`` waits for the device, i.e. for the gated
graph); ``garbage-held`` (the same under ``cuda.defer_cleanup()``, what the test backend now does).
Prediction: ``garbage`` stalls ``gc.collect()`` until the gate times out and then sees the buffer
gone; the other two never do. Every driver call is logged with its time and thread; an anomaly
prints that log and thread B's stack.

    python3 bench/lifecycle_release_probe.py --runs 5
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
GATE_S = 2.0  # the gate's own timeout (the test uses 20 s)
GARBAGE_ARRAYS = 16  # > Numba's CUDA_DEALLOCS_COUNT (10): dropping them flushes its queue


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


class _Cycle:
    """Keeps device arrays in a reference cycle, so only the cycle collector frees them."""

    def __init__(self, arrays):
        self.arrays, self.me = arrays, self


def one_run(cuda, RealDriver, FaultInjectingDriver, GraphProvider, stream, mode) -> tuple[str | None, float]:
    log: list = []
    drv = FaultInjectingDriver(_Logged(RealDriver(), log))
    dst = cuda.to_device(np.zeros(1024, np.float32))
    gate, entered = threading.Event(), threading.Event()

    def block():
        entered.set()
        gate.wait(GATE_S)

    anomaly = None
    with GraphProvider(drv) as p:
        with p.capture(7, stream=stream) as cap:
            cap.host_func(block)
            buf = cap.stage(np.full(1024, 7.0, np.float32))
            cap.copy_to_device(dst, buf)
        ref = weakref.ref(buf)
        del buf, cap
        if mode != "plain":
            _Cycle([cuda.device_array(256, np.float32) for _ in range(GARBAGE_ARRAYS)])
        t_replay = time.monotonic()
        p.replay(7)
        assert entered.wait(WAIT)
        done = threading.Event()
        b = threading.Thread(target=lambda: (p.release(7), done.set()), name="releaser")
        b.start()
        time.sleep(0.2)
        returned = done.is_set()
        t0 = time.monotonic()
        if mode == "garbage-held":
            with cuda.defer_cleanup():
                gc.collect()
        else:
            gc.collect()
        late = time.monotonic() - t0
        alive = ref()
        state = "gone" if alive is None else ("freed" if alive.freed else "alive")
        del alive
        if returned or state != "alive":
            frames = sys._current_frames().get(b.ident)
            stack = "".join(traceback.format_stack(frames)) if frames is not None else "(thread ended)"
            calls = "\n".join(f"  {t - t_replay:+.4f} s {who}: {name}" for t, who, name in list(log)
                              if t >= t_replay)
            anomaly = f"release returned: {returned}; buffer: {state}; gc.collect took {late:.2f} s\n" \
                      f"calls since the replay:\n{calls}\nreleaser stack:\n{stack}"
        gate.set()
        b.join(WAIT)
    gc.collect()  # the garbage arrays go now, with the device idle
    return anomaly, late


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
    table = []
    for mode in ("plain", "garbage", "garbage-held"):
        anomalies, lates, t0 = 0, [], time.monotonic()
        for i in range(args.runs):
            found, late = one_run(cuda, RealDriver, FaultInjectingDriver, GraphProvider, stream, mode)
            lates.append(late)
            if found:
                anomalies += 1
                if anomalies == 1:
                    print(f"{mode} run {i}: ANOMALY\n{found}", flush=True)
        table.append(f"{mode:13s} {args.runs:4d} runs {time.monotonic() - t0:6.1f} s  anomalies {anomalies:3d}  "
                     f"gc.collect max {max(lates):.2f} s")
    base.stream_destroy(stream)
    base.primary_ctx_release(0)
    print("release probe (mode, runs, time, runs where the buffer was gone/freed or release had returned):")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
