"""Which streams may be captured, raw ``CUstream`` handles of stream objects, and the process-wide
claims that keep waits and launches off streams lifecycle is capturing (callers wait their turn)."""

from __future__ import annotations

import collections
import contextlib
import threading
import time

import numpy as np

from .driver import STREAM_LEGACY, STREAM_PER_THREAD
from .errors import StreamError
from .threads import ThreadId, current

__all__ = ["stream_handle", "check_capture_stream", "check_wait_timeout", "StreamClaims", "claims",
           "synchronize", "DEFAULT_STREAM_WAIT_TIMEOUT"]

#: Seconds an operation waits for a stream another operation of lifecycle holds (a capture on it,
#: or a wait, launch or warm-up on it) before failing with a :class:`StreamError`. Long enough for
#: any capture body or GPU wait a notebook runs; short enough that a capture left open by an
#: interrupted cell turns into an error naming the stream instead of a hang.
DEFAULT_STREAM_WAIT_TIMEOUT = 30.0

#: A ``CUstream`` is a pointer: handles are in ``0 .. 2**64 - 1``.
_HANDLE_LIMIT = 1 << 64


def stream_handle(stream) -> int:
    """The raw handle of ``stream``: an int (Python or numpy, >= 0), a ``__cuda_stream__`` object
    (cuda.core, Numba), an object with ``cuda_stream`` (torch, CuPy) or a ``handle`` (Numba), or
    a ``cuda.bindings`` ``CUstream``.

    Anything else is a ``TypeError`` naming ``stream``, a negative or too large handle a
    ``ValueError``; nothing reaches the driver.
    """
    if isinstance(stream, (bool, np.bool_)):
        raise TypeError("stream must be a CUstream handle (int) or a stream object, not a bool")
    if isinstance(stream, (int, np.integer)):
        handle = int(stream)
    elif hasattr(stream, "__cuda_stream__"):
        handle = _as_handle(stream.__cuda_stream__()[1], stream)
    elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream, cupy.cuda.Stream
        handle = _as_handle(stream.cuda_stream, stream)
    elif hasattr(stream, "handle"):
        handle = _as_handle(stream.handle, stream)
    elif hasattr(stream, "getPtr"):  # cuda.bindings.driver.CUstream
        handle = _as_handle(stream, stream)
    else:
        raise TypeError(f"stream must be a CUstream handle (int) or a stream object (__cuda_stream__, "
                        f"torch/CuPy, Numba, a cuda.bindings CUstream); got {type(stream).__name__}")
    if not 0 <= handle < _HANDLE_LIMIT:
        raise ValueError(f"stream must be a CUstream handle in 0..2**64-1; got {handle}")
    return handle


def _as_handle(value, stream) -> int:
    """The int of a handle a stream object gave (None or a null pointer: 0)."""
    if value is None:
        return 0
    if isinstance(value, (bool, np.bool_, float, str, bytes)):
        raise TypeError(f"stream {type(stream).__name__} gave a handle of type {type(value).__name__}")
    inner = getattr(value, "value", value)  # ctypes.c_void_p
    try:
        return int(inner or 0)
    except (TypeError, ValueError):
        raise TypeError(f"stream {type(stream).__name__} gave a handle that is not an integer: "
                        f"{type(value).__name__}") from None


def check_wait_timeout(timeout) -> float:
    """The one rule for ``stream_wait_timeout``: a real number of seconds > 0 (``inf``: no bound)."""
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise TypeError(f"stream_wait_timeout must be a number of seconds; got {type(timeout).__name__}")
    if not timeout > 0:  # also refuses NaN
        raise ValueError(f"stream_wait_timeout must be > 0 seconds; got {timeout}")
    return float(timeout)


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
    window between the check and the call. So a capture claims its stream alone, and uses share it.
    A caller that needs a stream another thread holds **waits** for it, up to ``timeout`` seconds;
    only a wait past the bound is a :class:`StreamError`, naming the stream and its holder. A
    waiting capture goes before new uses (so a stream of steady replays cannot starve it), except
    uses by a thread that already uses the stream. A caller whose own thread holds the stream in
    the conflicting way is refused at once (it would wait for itself). Never call these while
    holding a provider's lock: holders may need it to finish. Captures begun outside lifecycle are
    detected separately, with ``cuStreamIsCapturing``.
    """

    def __init__(self):
        self._cv = threading.Condition(threading.Lock())
        self._capturing: dict[int, tuple[int, ThreadId]] = {}   # stream -> (graph id, thread)
        self._users: dict[int, collections.Counter] = {}   # stream -> {thread: uses}
        self._queued: collections.Counter = collections.Counter()  # stream -> captures waiting

    @contextlib.contextmanager
    def use(self, handle: int, op: str, timeout: float = DEFAULT_STREAM_WAIT_TIMEOUT):
        """Use ``handle`` for the block, after any capture on it ended (waiting up to ``timeout``)."""
        self.acquire(handle, op, timeout)
        try:
            yield
        finally:
            self.release(handle)

    def acquire(self, handle: int, op: str, timeout: float = DEFAULT_STREAM_WAIT_TIMEOUT) -> None:
        """Start using ``handle`` (see :meth:`use`); pair with :meth:`release`."""
        if handle in (0, STREAM_LEGACY, STREAM_PER_THREAD):  # never captured (refused), or per-thread
            return
        me = current()

        def free() -> bool:
            holder = self._capturing.get(handle)
            if holder is not None and holder[1] is me:
                raise StreamError(f"cannot {op}: stream {handle:#x} is being captured for graph {holder[0]} "
                                  "by this thread; its work would be captured into that graph (end the "
                                  "capture first, or use another stream)")
            mine = self._users.get(handle, {}).get(me, 0)
            return holder is None and (not self._queued[handle] or mine > 0)

        with self._cv:
            self._wait(free, handle, op, timeout)
            self._users.setdefault(handle, collections.Counter())[me] += 1

    def release(self, handle: int) -> None:
        if handle in (0, STREAM_LEGACY, STREAM_PER_THREAD):
            return
        me = current()
        with self._cv:
            users = self._users[handle]
            users[me] -= 1
            if users[me] <= 0:
                del users[me]
            if not users:
                del self._users[handle]
            self._cv.notify_all()

    def claim_capture(self, handle: int, graph_id: int, timeout: float = DEFAULT_STREAM_WAIT_TIMEOUT) -> None:
        """Claim ``handle`` for a capture, once no other capture and no use holds it (waiting up to
        ``timeout``)."""
        me, op = current(), f"capture graph {graph_id}"

        def free() -> bool:
            holder = self._capturing.get(handle)
            if holder is not None and holder[1] is me:
                raise StreamError(f"cannot {op}: stream {handle:#x} is being captured for graph "
                                  f"{holder[0]} by this thread")
            if self._users.get(handle, {}).get(me, 0):
                raise StreamError(f"cannot {op}: this thread is using stream {handle:#x} (a wait, launch "
                                  "or warm-up on it is in progress in this thread)")
            return holder is None and not self._users.get(handle)

        with self._cv:
            self._queued[handle] += 1
            try:
                self._wait(free, handle, op, timeout)
            finally:
                self._queued[handle] -= 1
                if not self._queued[handle]:
                    del self._queued[handle]
                self._cv.notify_all()
            self._capturing[handle] = (graph_id, me)

    def release_capture(self, handle: int) -> None:
        with self._cv:
            self._capturing.pop(handle, None)
            self._cv.notify_all()

    def holders(self, handle: int) -> tuple[int | None, int, int]:
        """``(graph id being captured or None, uses in progress, captures waiting)`` on ``handle``
        right now (diagnostics and tests)."""
        with self._cv:
            capture = self._capturing.get(handle)
            return (None if capture is None else capture[0], sum(self._users.get(handle, {}).values()),
                    self._queued[handle])

    def _wait(self, free, handle: int, op: str, timeout: float) -> None:
        """Under the condition's lock: wait until ``free()``; past ``timeout`` raise naming the holder."""
        deadline = time.monotonic() + timeout
        while not free():
            left = deadline - time.monotonic()
            if left <= 0:
                raise StreamError(f"cannot {op}: waited {timeout:g} s for stream {handle:#x}, which is "
                                  f"still {self._holder(handle)} (the bound is "
                                  "GraphProvider(stream_wait_timeout=...))")
            self._cv.wait(left)

    def _holder(self, handle: int) -> str:
        capture = self._capturing.get(handle)
        if capture is not None:
            return f"being captured for graph {capture[0]} by thread {capture[1]}"
        threads = sorted(self._users.get(handle, {}), key=lambda t: t.ident)
        if threads:
            return f"in use by a wait, launch or warm-up in thread(s) {', '.join(map(str, threads))}"
        return "wanted by a capture that is waiting for it"


#: The process-wide claims (every provider shares them).
claims = StreamClaims()


def synchronize(driver, handle: int, timeout: float = DEFAULT_STREAM_WAIT_TIMEOUT) -> None:
    """``cuStreamSynchronize(handle)`` under a use claim (see :class:`StreamClaims`)."""
    with claims.use(handle, f"synchronize stream {handle:#x}", timeout):
        driver.stream_synchronize(handle)
