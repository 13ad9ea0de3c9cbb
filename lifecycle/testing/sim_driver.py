"""A CPU model of the CUDA driver semantics lifecycle depends on, for CI without a GPU.

What it models (each is a rule lifecycle's tests rely on, and each is exercised by
``tests/lifecycle/test_sim_model.py``):

* **Devices and primary contexts**: ``devices`` GPUs; a current context per thread; streams,
  graphs and events belong to the context that was current when they were made. Launching a
  graph, or enqueueing on a stream, from another device's context fails with
  ``CUDA_ERROR_INVALID_CONTEXT``.
* **Asynchronous streams**: one worker thread per stream runs its operations in order;
  ``stream_synchronize``/``event_synchronize`` wait (bounded by ``timeout``).
* **Capture**: stream-ordered calls on a capturing stream are recorded, not run. Capture of the
  legacy stream is refused. *Potentially unsafe* calls (pinned and device allocation and free,
  ``cuStreamSynchronize``/``cuEventSynchronize``/``cuCtxSynchronize``, ``cuGraphInstantiate``,
  module load) follow the CUDA capture-mode rules: a thread in interaction mode ``GLOBAL`` (the
  default) is refused them while it has a capture of its own begun in a mode other than
  ``RELAXED``, or while any thread has a capture begun in ``GLOBAL`` mode; a thread in
  ``THREAD_LOCAL`` mode only while it has such a capture of its own; a thread in ``RELAXED`` mode
  never. A refused call returns ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` and invalidates the
  captures that refused it. Synchronizing a capturing stream from any thread, in any mode, does
  the same. ``stream_end_capture`` from another thread fails with ``..._WRONG_THREAD`` (unless the
  capture was begun ``RELAXED``); after invalidation it fails with ``..._INVALIDATED`` and leaves
  the stream out of capture.
* **Pinned memory**: real host memory (so numpy views work); freed blocks are poisoned but kept,
  so a later read by a queued copy is *recorded* in :attr:`SimDriver.violations` instead of
  crashing, and no address is ever reused.
* **Host functions**: called on the stream's worker; a host function whose keep-alive handle was
  dropped, or one that raises, is a violation.

Sim-only helpers for tests (not part of :class:`~lifecycle.driver.Driver`): :meth:`device_array`,
:meth:`launch_kernel`, :meth:`kernel`, :meth:`live_resources`, :attr:`launches`, :meth:`close`.
The parts live in :mod:`~lifecycle.testing.sim_objects`, :mod:`~lifecycle.testing.sim_graphs` and
:mod:`~lifecycle.testing.sim_memory`.
"""

from __future__ import annotations

import collections
import itertools
import threading
import weakref

import numpy as np
from cuda.bindings.driver import CUresult as R

from ..driver import STREAM_LEGACY, STREAM_PER_THREAD, CaptureMode, CaptureStatus, check
from ..threads import current
from .sim_graphs import SimGraphs
from .sim_memory import SimMemory
from .sim_objects import SimCapture, SimDeviceArray, SimGraph, SimKernel, SimStream

__all__ = ["SimDriver", "SimDeviceArray", "SimKernel"]


class SimDriver(SimGraphs, SimMemory):
    """CPU model of :class:`~lifecycle.driver.Driver`; see the module docstring for the rules.

    Args:
        devices: number of simulated GPUs.
        timeout: seconds any synchronization waits before failing with
            ``CUDA_ERROR_LAUNCH_TIMEOUT`` (so a wedged test fails instead of hanging).
    """

    def __init__(self, devices: int = 1, *, timeout: float = 30.0):
        self.devices, self.timeout = int(devices), float(timeout)
        self._cv = threading.Condition(threading.RLock())
        self._tls = threading.local()
        self._ids = itertools.count(0x1000, 0x10)
        self._ctx_of_device = {d: 0xC0000 + d * 0x100 for d in range(self.devices)}
        self._device_of_ctx = {c: d for d, c in self._ctx_of_device.items()}
        self._retains = collections.Counter()
        self._streams: dict[int, SimStream] = {}
        self._special: dict[tuple, SimStream] = {}
        self._graphs: dict[int, SimGraph] = {}
        self._execs: dict[int, SimGraph] = {}
        self._events: dict[int, list] = {}
        self._host: dict[int, np.ndarray] = {}
        self._freed_host: dict[int, np.ndarray] = {}
        self._device_mem: dict[int, SimDeviceArray] = {}
        self._host_funcs: "weakref.WeakSet[HostFuncHandle]" = weakref.WeakSet()
        #: Every rule broken by the code under test (use-after-free, stale host function, ...).
        self.violations: list[str] = []
        #: ``(exec id, device)`` for every graph launch, in order.
        self.launches: list[tuple[int, int]] = []
        self.closed = False

    # -- internals -----------------------------------------------------------------------------
    def _fail(self, call, code):
        check(call, (code,))

    def _thread_ctx(self):
        return getattr(self._tls, "ctx", 0)

    def _mode(self):
        return getattr(self._tls, "mode", CaptureMode.GLOBAL)

    def _capturing_streams(self):
        return [s for s in list(self._streams.values()) + list(self._special.values())
                if s.capture is not None and s.capture.status is CaptureStatus.ACTIVE]

    def _unsafe(self, call):
        """A potentially unsafe call, under the capture-mode rules of the module docstring: when
        the calling thread is prohibited from it, every capture that prohibits it is invalidated
        and the call fails."""
        mode = self._mode()
        if mode is CaptureMode.RELAXED:
            return
        me = current()
        with self._cv:
            blocking = []
            for s in self._capturing_streams():
                cap = s.capture
                if cap.thread is me and cap.mode is not CaptureMode.RELAXED:
                    blocking.append(cap)
                elif cap.thread is not me and mode is CaptureMode.GLOBAL and cap.mode is CaptureMode.GLOBAL:
                    blocking.append(cap)
            for cap in blocking:
                cap.status = CaptureStatus.INVALIDATED
            if blocking:
                self._fail(call, R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)

    def _need_ctx(self, call):
        ctx = self._thread_ctx()
        if not ctx:
            self._fail(call, R.CUDA_ERROR_INVALID_CONTEXT)
        return ctx

    def _stream(self, call, handle, *, check_ctx=True):
        handle = int(handle)
        if handle in (0, STREAM_LEGACY, STREAM_PER_THREAD):
            ctx = self._need_ctx(call)
            key = (ctx,) if handle != STREAM_PER_THREAD else (ctx, current())
            with self._cv:
                s = self._special.get(key)
                if s is None:
                    s = self._special[key] = SimStream(self, next(self._ids), ctx,
                                                     legacy=handle != STREAM_PER_THREAD)
            return s
        s = self._streams.get(handle)
        if s is None or s.destroyed:
            self._fail(call, R.CUDA_ERROR_INVALID_HANDLE)
        if check_ctx and s.ctx != self._thread_ctx():
            self._fail(call, R.CUDA_ERROR_INVALID_CONTEXT)
        return s

    def _enqueue(self, call, stream, ops):
        """Run ``ops`` (callables) on ``stream`` in order, or record them if it is capturing."""
        s = self._stream(call, stream)
        with self._cv:
            cap = s.capture
            if cap is not None:
                if cap.status is CaptureStatus.INVALIDATED:
                    self._fail(call, R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
                cap.ops.extend(ops)
                return
            s.ops.extend(ops)
            s.enqueued += len(ops)
            self._cv.notify_all()

    def _wait(self, call, s, target):
        with self._cv:
            if not self._cv.wait_for(lambda: s.completed >= target, self.timeout):
                self._fail(call, R.CUDA_ERROR_LAUNCH_TIMEOUT)


    # -- devices and contexts ------------------------------------------------------------------
    def init(self) -> None:
        pass

    def device_count(self) -> int:
        return self.devices

    def primary_ctx_retain(self, ordinal: int) -> int:
        if ordinal not in self._ctx_of_device:
            self._fail("cuDevicePrimaryCtxRetain", R.CUDA_ERROR_INVALID_DEVICE)
        with self._cv:
            self._retains[ordinal] += 1
        return self._ctx_of_device[ordinal]

    def primary_ctx_release(self, ordinal: int) -> None:
        with self._cv:
            if self._retains[ordinal] <= 0:
                self._fail("cuDevicePrimaryCtxRelease", R.CUDA_ERROR_INVALID_CONTEXT)
            self._retains[ordinal] -= 1

    def ctx_get_current(self) -> int:
        return self._thread_ctx()

    def ctx_set_current(self, ctx: int) -> None:
        ctx = int(ctx)
        if ctx and (ctx not in self._device_of_ctx or not self._retains[self._device_of_ctx[ctx]]):
            self._fail("cuCtxSetCurrent", R.CUDA_ERROR_INVALID_CONTEXT)
        self._tls.ctx = ctx

    def ctx_get_device(self) -> int:
        return self._device_of_ctx[self._need_ctx("cuCtxGetDevice")]

    def ctx_synchronize(self) -> None:
        ctx = self._need_ctx("cuCtxSynchronize")
        self._unsafe("cuCtxSynchronize")
        with self._cv:
            targets = [(s, s.enqueued) for s in list(self._streams.values()) + list(self._special.values())
                       if s.ctx == ctx]
        for s, target in targets:
            self._wait("cuCtxSynchronize", s, target)

    # -- streams and capture ------------------------------------------------------------------
    def stream_create(self) -> int:
        ctx = self._need_ctx("cuStreamCreate")
        with self._cv:
            handle = next(self._ids)
            self._streams[handle] = SimStream(self, handle, ctx)
        return handle

    def stream_destroy(self, stream: int) -> None:
        s = self._stream("cuStreamDestroy", stream, check_ctx=False)
        if s.legacy or s in self._special.values():
            self._fail("cuStreamDestroy", R.CUDA_ERROR_INVALID_HANDLE)
        with self._cv:
            s.destroyed = True  # queued work still completes, as on a GPU
            del self._streams[s.handle]
            self._cv.notify_all()

    def stream_get_ctx(self, stream: int) -> int:
        return self._stream("cuStreamGetCtx", stream, check_ctx=False).ctx

    def stream_synchronize(self, stream: int) -> None:
        s = self._stream("cuStreamSynchronize", stream, check_ctx=False)
        with self._cv:
            if s.capture is not None:
                s.capture.status = CaptureStatus.INVALIDATED
                self._fail("cuStreamSynchronize", R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            target = s.enqueued
        self._unsafe("cuStreamSynchronize")
        self._wait("cuStreamSynchronize", s, target)

    def stream_begin_capture(self, stream: int, mode: CaptureMode = CaptureMode.THREAD_LOCAL) -> None:
        s = self._stream("cuStreamBeginCapture", stream)
        with self._cv:
            if s.legacy:
                self._fail("cuStreamBeginCapture", R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            if s.capture is not None:
                self._fail("cuStreamBeginCapture", R.CUDA_ERROR_ILLEGAL_STATE)
            s.capture = SimCapture(current(), CaptureMode(int(mode)))

    def stream_end_capture(self, stream: int):
        s = self._stream("cuStreamEndCapture", stream, check_ctx=False)
        with self._cv:
            cap = s.capture
            if cap is None:
                self._fail("cuStreamEndCapture", R.CUDA_ERROR_ILLEGAL_STATE)
            if cap.mode is not CaptureMode.RELAXED and cap.thread is not current():
                self._fail("cuStreamEndCapture", R.CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
            s.capture = None
            if cap.status is CaptureStatus.INVALIDATED:
                self._fail("cuStreamEndCapture", R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
            graph = SimGraph(s.ctx, cap.ops)
            self._graphs[id(graph)] = graph
        return graph

    def stream_capture_status(self, stream: int) -> CaptureStatus:
        s = self._stream("cuStreamIsCapturing", stream, check_ctx=False)
        with self._cv:
            return CaptureStatus.NONE if s.capture is None else s.capture.status

    def exchange_capture_mode(self, mode: CaptureMode) -> CaptureMode:
        previous = self._mode()
        self._tls.mode = CaptureMode(int(mode))
        return previous

    def live_resources(self) -> dict[str, int]:
        """Counts of everything still allocated (contexts count retains); zeros are omitted."""
        with self._cv:
            counts = {
                "streams": len(self._streams), "graphs": len(self._graphs), "execs": len(self._execs),
                "events": len(self._events), "pinned": len(self._host),
                "host_funcs": len(self._host_funcs), "ctx_retains": sum(self._retains.values()),
                "capturing": len(self._capturing_streams()),
            }
        return {k: v for k, v in counts.items() if v}

    def thread_capture_mode(self) -> CaptureMode:
        """The calling thread's capture interaction mode."""
        return self._mode()

    def close(self) -> None:
        """Stop every stream worker (bounded wait). Idempotent."""
        with self._cv:
            self.closed = True
            streams = list(self._streams.values()) + list(self._special.values())
            for s in streams:
                s.destroyed = True
            self._cv.notify_all()
        for s in streams:
            s.worker.join(timeout=self.timeout)

