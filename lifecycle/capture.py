"""The handle a capture body works with: the stream to launch on, and retained resources.

Launch Numba kernels on ``capture.stream`` (``numba.cuda.external_stream(capture.stream)``, or
:func:`lifecycle.numba_glue.launch`); stage host inputs with :meth:`Capture.stage` and
:meth:`Capture.copy_to_device`, so the pinned source is retained with the graph.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .driver import CaptureStatus, Driver
from .errors import CaptureError, LifecycleError
from .record import GraphRecord, GraphState
from .staging import PinnedBuffer

__all__ = ["Capture", "device_pointer", "end_abandoned_capture", "exit_guard"]


def device_pointer(dst, nbytes: int) -> int:
    """The device address of ``dst`` (an int, or a C-contiguous ``__cuda_array_interface__``
    object of at least ``nbytes`` bytes)."""
    if isinstance(dst, (int, np.integer)) and not isinstance(dst, bool):
        return int(dst)
    cai = getattr(dst, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"destination must be a device pointer or a CUDA array; got {type(dst).__name__} "
                        "(only device arrays may be used inside a capture)")
    shape, itemsize = tuple(cai["shape"]), np.dtype(cai["typestr"]).itemsize
    size = int(np.prod(shape, dtype=np.int64)) * itemsize
    strides = cai.get("strides")
    if strides is not None:
        expected = itemsize
        for dim, stride in zip(reversed(shape), reversed(strides), strict=False):
            if dim > 1 and stride != expected:
                raise ValueError(f"destination must be C-contiguous; got strides {strides}")
            expected *= dim
    if size < nbytes:
        raise ValueError(f"destination holds {size} bytes; the copy needs {nbytes}")
    return int(cai["data"][0])


class Capture:
    """Given to a capture body by :meth:`GraphProvider.capture <lifecycle.provider.GraphProvider.capture>`.

    Attributes:
        graph_id: the id being captured.
        stream: the raw ``CUstream`` handle to launch on.
        device: the provider's device ordinal.
        eager: ``True`` when graphs are disabled and work runs as it is issued.

    Methods may only be used by the thread that owns the capture, until the capture ends.
    """

    def __init__(self, driver: Driver, record: GraphRecord, device: int, *, relaxed: bool,
                 reuse: list[PinnedBuffer] | None = None):
        self._driver, self._record, self._relaxed = driver, record, relaxed
        self._reuse = None if reuse is None else iter(list(reuse))
        self.graph_id, self.stream, self.device, self.eager = record.graph_id, record.stream, device, record.eager
        self._open = True

    @property
    def state(self) -> GraphState:
        """The graph's state: capturing, then ready, released or discarded."""
        return self._record.state

    def _check_open(self):
        if not self._open:
            raise CaptureError(f"the capture of graph {self.graph_id} has ended")

    def pinned(self, shape, dtype=np.float32) -> PinnedBuffer:
        """A pinned host buffer retained for this graph id (freed when the graph is released).

        During an eager replay of a recorded step the buffers of the first run are returned again,
        in order, unchanged.
        """
        self._check_open()
        if self._reuse is not None:
            buf = next(self._reuse, None)
            if buf is None or buf.shape != tuple(np.atleast_1d(shape)) or buf.dtype != np.dtype(dtype):
                raise LifecycleError(f"graph {self.graph_id}: an eager replay must acquire the same "
                                     "staging buffers, in the same order, as the first run")
            return buf
        buf = PinnedBuffer(self._driver, self.graph_id, shape, dtype)
        self._record.buffers.append(buf)  # registered first: a failure below cannot leak it
        return buf.allocate(relaxed=self._relaxed)

    def stage(self, data) -> PinnedBuffer:
        """A retained pinned copy of ``data`` (on eager replays: the first run's buffer, as is)."""
        data = np.ascontiguousarray(data)
        reusing = self._reuse is not None
        buf = self.pinned(data.shape, data.dtype)
        if not reusing:
            buf.array[...] = data
        return buf

    def copy_to_device(self, dst, src: PinnedBuffer, nbytes: int | None = None) -> None:
        """Enqueue (capture) a host-to-device copy from the retained ``src`` into ``dst``.

        ``src`` must be a buffer of this graph id: a buffer of another graph could be freed while
        this graph still reads it.
        """
        self._check_open()
        if not isinstance(src, PinnedBuffer):
            raise TypeError("the source must be a PinnedBuffer from Capture.pinned()/stage(); "
                            f"got {type(src).__name__}")
        if src.graph_id != self.graph_id or src.freed:
            raise LifecycleError(f"pinned buffer of graph {src.graph_id} cannot be read by graph "
                                 f"{self.graph_id}: it is freed with its own graph")
        nbytes = src.nbytes if nbytes is None else int(nbytes)
        if not 0 < nbytes <= src.nbytes:
            raise ValueError(f"nbytes must be in 1..{src.nbytes}; got {nbytes}")
        self._driver.memcpy_htod_async(device_pointer(dst, nbytes), src.ptr, nbytes, self.stream)

    def host_func(self, fn: Callable[[], None]) -> None:
        """Enqueue (capture) ``fn()``; it runs on a driver thread at every replay.

        ``fn`` must not call CUDA and must not block without a bound. It stays callable until
        the graph is released (eager runs: until it has run).
        """
        self._check_open()
        if not self.eager:
            self._record.host_funcs.append(self._driver.launch_host_func(self.stream, fn))
            return
        ran = []

        def once():
            try:
                fn()
            finally:
                ran.append(True)

        handle = self._driver.launch_host_func(self.stream, once)
        kept = self._record.host_funcs
        kept[:] = [(h, r) for h, r in kept if not r] + [(handle, ran)]

    def retain(self, obj):
        """Keep ``obj`` (e.g. a device array the graph reads or writes) alive until release."""
        self._check_open()
        if not any(kept is obj for kept in self._record.retained):
            self._record.retained.append(obj)
        return obj

    def _close(self):
        self._open = False

    def __repr__(self) -> str:
        mode = "eager" if self.eager else "graph"
        return f"Capture(graph {self.graph_id}, stream {self.stream:#x}, device {self.device}, {mode})"


def end_abandoned_capture(driver: Driver, record: GraphRecord) -> list[BaseException]:
    """Take a failed capture's stream out of capture, keeping any partial graph in ``record`` (to be
    destroyed with it). Retries once, so one failed end cannot leave the stream capturing.
    Returns the errors; never raises."""
    errors = []
    for _ in range(2):
        try:
            status = driver.stream_capture_status(record.stream)
        except Exception as exc:
            errors.append(exc)
            status = None  # unknown: try to end anyway
        if record.graph is not None or status is CaptureStatus.NONE:
            break
        try:
            record.graph = driver.stream_end_capture(record.stream)
        except Exception as exc:
            errors.append(exc)
    return errors


def exit_guard(guard, error: BaseException | None) -> list[BaseException]:
    """Exit a capture guard (see ``GraphProvider(capture_guard=...)``); returns its error, if any."""
    try:
        if error is None:
            guard.__exit__(None, None, None)
        else:
            guard.__exit__(type(error), error, error.__traceback__)
    except Exception as exc:
        return [exc]
    return []
