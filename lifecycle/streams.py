"""Which streams may be captured, raw ``CUstream`` handles of stream objects, and the process-wide
claims that keep waits and launches off streams lifecycle is capturing."""

from __future__ import annotations

import collections
import contextlib
import threading

from .driver import STREAM_LEGACY, STREAM_PER_THREAD
from .errors import StreamError

__all__ = ["stream_handle", "check_capture_stream", "StreamClaims", "claims", "synchronize"]


def stream_handle(stream) -> int:
    """The raw handle of an int, a ``__cuda_stream__`` object (cuda.core, Numba) or a Numba stream."""
    if isinstance(stream, bool):
        raise TypeError("stream must be a CUstream handle or a stream object, not a bool")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "handle"):
        return int(stream.handle or 0)
    return int(stream)


def check_capture_stream(handle: int, *, graphs_enabled: bool) -> None:
    """Refuse the legacy default stream always, and the per-thread default stream with graphs on."""
    if handle in (0, STREAM_LEGACY):
        raise StreamError("the legacy default stream (CU_STREAM_LEGACY or 0) cannot be captured: it "
                          "synchronizes with every blocking stream; pass a created stream")
    if handle == STREAM_PER_THREAD and graphs_enabled:
        raise StreamError("the per-thread default stream (CU_STREAM_PER_THREAD) is refused while graphs "
                          "are enabled: its handle names a different stream in every thread, so a replay "
                          "or release from another thread would use the wrong stream; pass a created "
                          "stream, or use GraphProvider(graphs=False) to run eagerly on it")


class StreamClaims:
    """Which streams lifecycle is capturing, and which it is using (waiting on, launching on,
    warming up on), across every provider of the process.

    Synchronizing a stream that another thread is capturing invalidates that capture, and a launch
    on it would be captured into the wrong graph; ``cuStreamIsCapturing`` alone cannot close the
    window between the check and the call. So a capture claims its stream, a use counts on it, and
    each refuses the other with a :class:`StreamError` (documented, nothing changed). Captures
    begun outside lifecycle are detected separately, with ``cuStreamIsCapturing``.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._capturing: dict[int, int] = {}   # stream -> graph id
        self._users: collections.Counter = collections.Counter()

    @contextlib.contextmanager
    def use(self, handle: int, op: str):
        """Use ``handle`` for the block; refused while lifecycle captures on it."""
        self.acquire(handle, op)
        try:
            yield
        finally:
            self.release(handle)

    def acquire(self, handle: int, op: str) -> None:
        """Start using ``handle`` (see :meth:`use`); pair with :meth:`release`."""
        if handle in (0, STREAM_LEGACY, STREAM_PER_THREAD):  # never captured (refused), or per-thread
            return
        with self._lock:
            if handle in self._capturing:
                raise StreamError(f"cannot {op}: stream {handle:#x} is being captured for graph "
                                  f"{self._capturing[handle]} (of this or another provider); retry after "
                                  "that capture ends")
            self._users[handle] += 1

    def release(self, handle: int) -> None:
        if handle in (0, STREAM_LEGACY, STREAM_PER_THREAD):
            return
        with self._lock:
            self._users[handle] -= 1
            if not self._users[handle]:
                del self._users[handle]

    def claim_capture(self, handle: int, graph_id: int) -> None:
        """Claim ``handle`` for a capture; refused while it is captured or in use."""
        with self._lock:
            if handle in self._capturing:
                raise StreamError(f"cannot capture graph {graph_id}: stream {handle:#x} is being captured "
                                  f"for graph {self._capturing[handle]} (of this or another provider)")
            if self._users[handle]:
                raise StreamError(f"cannot capture graph {graph_id}: stream {handle:#x} is in use by another "
                                  "operation (a wait, launch or warm-up on it); retry when it returns")
            self._capturing[handle] = graph_id

    def release_capture(self, handle: int) -> None:
        with self._lock:
            self._capturing.pop(handle, None)


#: The process-wide claims (every provider shares them).
claims = StreamClaims()


def synchronize(driver, handle: int) -> None:
    """``cuStreamSynchronize(handle)`` under a use claim (see :class:`StreamClaims`)."""
    with claims.use(handle, f"synchronize stream {handle:#x}"):
        driver.stream_synchronize(handle)
