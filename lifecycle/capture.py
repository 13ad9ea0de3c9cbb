"""The handle a capture body works with: the stream to launch on, and retained resources.

Launch Numba kernels on ``capture.stream`` (``numba.cuda.external_stream(capture.stream)``, or
:func:`lifecycle.numba_glue.launch`); stage host inputs with :meth:`Capture.stage` and
:meth:`Capture.copy_to_device`, so the pinned source is retained with the graph.
"""

from __future__ import annotations

import collections
import traceback
from typing import Callable

import numpy as np

from .driver import Driver
from .errors import CaptureError, LifecycleError
from .record import GraphRecord, GraphState
from .staging import PinnedBuffer

__all__ = ["Capture", "device_pointer"]


#: A device address is a nonzero unsigned 64-bit value (``CUdeviceptr``); 0 is the null pointer.
_MAX_POINTER = 2**64 - 1


def device_pointer(dst, nbytes: int) -> int:
    """The device address of ``dst`` (an int in ``1..2**64-1``, or a C-contiguous
    ``__cuda_array_interface__`` object of at least ``nbytes`` bytes)."""
    if isinstance(dst, (int, np.integer)) and not isinstance(dst, (bool, np.bool_)):
        if not 0 < int(dst) <= _MAX_POINTER:
            raise ValueError(f"dst must be a device pointer in 1..2**64-1 or a CUDA array; got {int(dst)}")
        return int(dst)
    cai = getattr(dst, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"dst must be a device pointer or a CUDA array; got {type(dst).__name__} "
                        "(only device arrays may be used inside a capture)")
    shape, itemsize = tuple(cai["shape"]), np.dtype(cai["typestr"]).itemsize
    size = int(np.prod(shape, dtype=np.int64)) * itemsize
    strides = cai.get("strides")
    if strides is not None:
        expected = itemsize
        for dim, stride in zip(reversed(shape), reversed(strides), strict=False):
            if dim > 1 and stride != expected:
                raise ValueError(f"dst must be C-contiguous; got strides {strides}")
            expected *= dim
    if size < nbytes:
        raise ValueError(f"dst: the destination holds {size} bytes; the copy needs {nbytes}")
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
                 host_errors: collections.deque, reuse: list[PinnedBuffer] | None = None):
        self._driver, self._record, self._relaxed = driver, record, relaxed
        self._host_errors = host_errors
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
        buf = PinnedBuffer(self._driver, self.graph_id, shape, dtype, owner=self._record.owner)
        self._record.buffers.append(buf)  # registered first: a failure below cannot leak it
        return buf.allocate(relaxed=self._relaxed)

    def stage(self, data) -> PinnedBuffer:
        """A retained pinned copy of ``data`` (on eager replays: the first run's buffer, as is).

        ``data``: a C-contiguous numpy array (or anything ``np.asarray`` takes) of a fixed-size
        dtype with at least one element (a 0-d value is staged as shape ``(1,)``); object dtypes
        are a ``TypeError``, non-contiguous arrays and empty data a ``ValueError``.
        """
        self._check_open()
        if isinstance(data, np.ndarray) and not data.flags.c_contiguous:
            raise ValueError(f"data must be C-contiguous; got an array with strides {data.strides} "
                             "(pass np.ascontiguousarray(data))")
        try:
            data = np.atleast_1d(np.asarray(data))   # a 0-d value is one element, shape (1,)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"data must be a numpy array or array-like; got {type(data).__name__}") from exc
        if data.dtype.hasobject or data.dtype.itemsize == 0:
            raise TypeError(f"data must have a fixed-size dtype without Python objects; got {data.dtype}")
        if data.size == 0:
            raise ValueError(f"data must hold at least one element; got shape {data.shape}")
        reusing = self._reuse is not None
        buf = self.pinned(data.shape, data.dtype)
        if not reusing:
            buf.array[...] = data
        return buf

    def copy_to_device(self, dst, src: PinnedBuffer, nbytes: int | None = None) -> None:
        """Enqueue (capture) a host-to-device copy from the retained ``src`` into ``dst``.

        ``src`` must be a buffer of this graph id: a buffer of another graph could be freed while
        this graph still reads it. ``nbytes`` (default: all of ``src``) is an int in
        ``1..src.nbytes``; ``dst`` is a device pointer (an int in ``1..2**64-1``) or a C-contiguous
        CUDA array holding at least ``nbytes`` bytes. Every argument is checked, and a bad one is a
        ``TypeError``/``ValueError`` naming it, before anything is enqueued.
        """
        self._check_open()
        if not isinstance(src, PinnedBuffer):
            raise TypeError("src must be a PinnedBuffer from Capture.pinned()/stage(); "
                            f"got {type(src).__name__}")
        if src.owner is not self._record.owner:
            raise LifecycleError(f"pinned buffer of graph {src.graph_id} belongs to another provider and "
                                 f"cannot be read by graph {self.graph_id}: its own provider frees it")
        if src.freed or not any(buf is src for buf in self._record.buffers):
            raise LifecycleError(f"pinned buffer of graph {src.graph_id} cannot be read by graph "
                                 f"{self.graph_id}: it is freed with its own graph")
        if nbytes is None:
            nbytes = src.nbytes
        elif isinstance(nbytes, (bool, np.bool_)) or not isinstance(nbytes, (int, np.integer)):
            raise TypeError(f"nbytes must be an int (bytes to copy); got {type(nbytes).__name__}")
        nbytes = int(nbytes)
        if not 0 < nbytes <= src.nbytes:
            raise ValueError(f"nbytes must be in 1..{src.nbytes} (the source buffer's size: a copy past "
                             f"its end would read memory it does not own); got {nbytes}")
        self._driver.memcpy_htod_async(device_pointer(dst, nbytes), src.ptr, nbytes, self.stream)

    def host_func(self, fn: Callable[[], None]) -> None:
        """Enqueue (capture) ``fn()``; it runs on a driver thread at every replay.

        ``fn`` must not call CUDA and must not block without a bound; it may query the provider
        (``state``, ``graph_ids``, ``counters``). It stays callable until the graph is released
        (eager runs: until it has run). An exception it raises is kept and raised by the
        provider's next operation as a :class:`~lifecycle.errors.HostFunctionError`.
        """
        self._check_open()
        if not callable(fn):
            raise TypeError(f"fn must be callable; got {type(fn).__name__}")
        sink, graph_id = self._host_errors, self.graph_id

        def guarded():
            try:
                fn()
            except BaseException as exc:  # cannot propagate into a driver thread
                # Keep the traceback as text: its frames would keep the driver's keep-alive handle
                # (and so this function) referenced for as long as the caller keeps the error.
                exc.add_note("host function traceback:\n" + "".join(traceback.format_tb(exc.__traceback__)))
                sink.append((graph_id, exc.with_traceback(None)))

        if not self.eager:
            self._record.host_funcs.append(self._driver.launch_host_func(self.stream, guarded))
            return
        ran = []

        def once():
            try:
                guarded()
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

    def expire(self):
        """Called by the provider when the capture ends: the handle may no longer be used."""
        self._open = False

    def __repr__(self) -> str:
        mode = "eager" if self.eager else "graph"
        return f"Capture(graph {self.graph_id}, stream {self.stream:#x}, device {self.device}, {mode})"
