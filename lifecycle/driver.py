"""The driver seam: every CUDA call lifecycle makes, and nothing more.

:class:`Driver` is the interface. :class:`~lifecycle.real_driver.RealDriver` implements it over
``cuda.bindings.driver``; :class:`~lifecycle.testing.sim_driver.SimDriver` models it on the CPU;
:class:`~lifecycle.testing.faults.FaultInjectingDriver` wraps either and makes chosen calls fail.

Handles (contexts, streams, events, pinned pointers) are plain ints; graphs and executable graphs
are opaque objects. Every method raises :class:`~lifecycle.errors.DriverError` on failure; adapters
turn ``CUresult`` codes into that error with :func:`check`.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Protocol, runtime_checkable

from cuda.bindings.driver import CUresult

from .errors import DriverError

__all__ = [
    "is_driver",
    "Driver", "CaptureStatus", "CaptureMode", "STREAM_LEGACY", "STREAM_PER_THREAD", "CALLS",
    "check", "result_name",
]

#: ``CU_STREAM_LEGACY``: the legacy default stream (the NULL stream, 0, means the same here).
STREAM_LEGACY = 0x1
#: ``CU_STREAM_PER_THREAD``: the per-thread default stream; names a different stream per thread.
STREAM_PER_THREAD = 0x2


class CaptureStatus(enum.IntEnum):
    """``CUstreamCaptureStatus``."""
    NONE = 0
    ACTIVE = 1
    INVALIDATED = 2


class CaptureMode(enum.IntEnum):
    """``CUstreamCaptureMode``: how a thread's potentially unsafe calls interact with capture."""
    GLOBAL = 0
    THREAD_LOCAL = 1
    RELAXED = 2


#: Driver method name -> the CUDA driver function it calls (used in error messages).
CALLS = {
    "init": "cuInit",
    "device_count": "cuDeviceGetCount",
    "primary_ctx_retain": "cuDevicePrimaryCtxRetain",
    "primary_ctx_release": "cuDevicePrimaryCtxRelease",
    "ctx_get_current": "cuCtxGetCurrent",
    "ctx_set_current": "cuCtxSetCurrent",
    "ctx_get_device": "cuCtxGetDevice",
    "ctx_synchronize": "cuCtxSynchronize",
    "stream_create": "cuStreamCreate",
    "stream_destroy": "cuStreamDestroy",
    "stream_get_ctx": "cuStreamGetCtx",
    "stream_synchronize": "cuStreamSynchronize",
    "stream_begin_capture": "cuStreamBeginCapture",
    "stream_end_capture": "cuStreamEndCapture",
    "stream_capture_status": "cuStreamIsCapturing",
    "exchange_capture_mode": "cuThreadExchangeStreamCaptureMode",
    "graph_instantiate": "cuGraphInstantiate",
    "graph_launch": "cuGraphLaunch",
    "graph_exec_destroy": "cuGraphExecDestroy",
    "graph_destroy": "cuGraphDestroy",
    "event_create": "cuEventCreate",
    "event_record": "cuEventRecord",
    "event_synchronize": "cuEventSynchronize",
    "event_destroy": "cuEventDestroy",
    "mem_host_alloc": "cuMemHostAlloc",
    "mem_free_host": "cuMemFreeHost",
    "memcpy_htod_async": "cuMemcpyHtoDAsync",
    "launch_host_func": "cuLaunchHostFunc",
}


@runtime_checkable
class Driver(Protocol):
    """The CUDA driver calls lifecycle needs. Contexts are primary contexts only.

    Stream-ordered calls (``memcpy_htod_async``, ``launch_host_func``, ``graph_launch``) are
    captured when their stream is capturing. ``stream_begin_capture`` takes the capture's
    ``CUstreamCaptureMode`` (lifecycle always passes ``THREAD_LOCAL``); ``stream_create`` always
    makes a non-blocking stream (a blocking stream's capture is invalidated by any legacy-stream
    use in the context).
    """

    def init(self) -> None: ...
    def device_count(self) -> int: ...
    def primary_ctx_retain(self, ordinal: int) -> int: ...
    def primary_ctx_release(self, ordinal: int) -> None: ...
    def ctx_get_current(self) -> int: ...  # 0 when no context is current
    def ctx_set_current(self, ctx: int) -> None: ...
    def ctx_get_device(self) -> int: ...  # ordinal of the current context's device
    def ctx_synchronize(self) -> None: ...  # wait for every stream of the current context
    def stream_create(self) -> int: ...
    def stream_destroy(self, stream: int) -> None: ...
    def stream_get_ctx(self, stream: int) -> int: ...
    def stream_synchronize(self, stream: int) -> None: ...
    def stream_begin_capture(self, stream: int, mode: CaptureMode = CaptureMode.THREAD_LOCAL) -> None: ...
    def stream_end_capture(self, stream: int) -> Any: ...  # the graph
    def stream_capture_status(self, stream: int) -> CaptureStatus: ...
    def exchange_capture_mode(self, mode: CaptureMode) -> CaptureMode: ...
    def graph_instantiate(self, graph: Any) -> Any: ...  # the executable graph
    def graph_launch(self, graph_exec: Any, stream: int) -> None: ...
    def graph_exec_destroy(self, graph_exec: Any) -> None: ...
    def graph_destroy(self, graph: Any) -> None: ...
    def event_create(self) -> int: ...
    def event_record(self, event: int, stream: int) -> None: ...
    def event_synchronize(self, event: int) -> None: ...
    def event_destroy(self, event: int) -> None: ...
    def mem_host_alloc(self, nbytes: int) -> int: ...
    def mem_free_host(self, ptr: int) -> None: ...
    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None: ...

    def launch_host_func(self, stream: int, fn: Callable[[], None]) -> object:
        """Enqueue ``fn()`` on ``stream``; returns a keep-alive handle.

        ``fn`` stays callable (for every replay of a graph that captured it) exactly as long as
        the returned handle is referenced; drop the handle only after the stream's work is done.
        ``fn`` runs on a driver thread: it must not call CUDA and should not block unboundedly.
        """
        ...


def result_name(code: int) -> str:
    """The ``CUresult`` name of ``code`` (``"CUresult(<n>)"`` when unknown)."""
    try:
        return CUresult(int(code)).name
    except ValueError:
        return f"CUresult({int(code)})"


def check(call: str, result):
    """Turn a ``cuda.bindings`` result into a value or a :class:`DriverError` naming ``call``.

    ``result`` is what ``cuda.bindings.driver`` returns: ``(CUresult, *values)`` (or a bare
    ``CUresult``). Returns ``None`` for no values, the value for one, the tuple for several.
    """
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if int(err) != 0:
        raise DriverError(call, int(err), result_name(err))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def is_driver(obj) -> bool:
    """Whether ``obj`` offers every :class:`Driver` method (attribute lookup, so wrappers that
    forward through ``__getattr__``, like the fault-injecting driver, qualify; Python 3.12's
    protocol ``isinstance`` looks attributes up statically and would refuse them)."""
    names = [n for n in Driver.__dict__ if not n.startswith("_") and callable(Driver.__dict__[n])]
    return all(callable(getattr(obj, n, None)) for n in names)
