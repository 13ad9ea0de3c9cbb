"""``GraphProvider``: CUDA graphs owned by integer graph id, on one device.

The main door is the context manager::

    with GraphProvider(device=0) as graphs:
        with graphs.capture(7, stream=s) as cap:      # begin capture ... end + instantiate
            buf = cap.stage(x)                         # pinned, retained for graph 7
            cap.copy_to_device(d_x, buf)               # captured H2D copy reads buf at replay
            launch_kernels(cap.stream)                 # Numba launches on the same stream
        graphs.replay(7)                               # cuGraphLaunch on graph 7's stream
        graphs.release(7)                              # waits for graph 7's work, frees its buffers

The provider is a thin door over three rooms: :mod:`lifecycle.sessions` (capture sessions and the
warm-up run), :mod:`lifecycle.registry` (the records, by id) and :mod:`lifecycle.disposal`
(freeing, retrying, closing, finalizing).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Callable, ContextManager

import numpy as np

from . import eager_runs, sessions, waits
from .capture import Capture
from .context import ContextBinding
from .disposal import finalize, teardown
from .driver import Driver, is_driver
from .errors import CaptureError, attach_cleanup_errors
from .record import GraphState
from .registry import Counters, Registry, check_graph_id
from .streams import DEFAULT_STREAM_WAIT_TIMEOUT, check_wait_timeout

__all__ = ["GraphProvider", "Counters"]


class GraphProvider:
    """Owns CUDA graphs by integer id on one device; thread-safe.

    Args:
        driver: a :class:`~lifecycle.driver.Driver`; default a new
            :class:`~lifecycle.real_driver.RealDriver`.
        device: the device ordinal (an int >= 0 and below the driver's device count, else a
            ValueError naming it). Its primary context is retained until ``close()`` and made
            current in the calling thread for every operation (the caller's context is restored,
            on error paths too).
        graphs: ``False`` runs capture bodies eagerly (no graph), e.g. on the per-thread default
            stream; ``record``-ed steps then re-run on ``replay``.
        capture_guard: a zero-argument callable returning a context manager held from just before
            begin-capture until the capture is instantiated or discarded; for Numba,
            :func:`lifecycle.numba_glue.hold_deallocations`. If its exit raises after a capture
            that succeeded, that error is raised and the graph is kept (``READY``).
        stream_wait_timeout: seconds (> 0; ``float("inf")`` for no bound) an operation waits for a
            stream another operation holds (a capture on it in another thread, or a wait, launch or
            warm-up on it while this one wants to capture there); default
            :data:`~lifecycle.streams.DEFAULT_STREAM_WAIT_TIMEOUT` (30 s). Only a wait past the
            bound fails, with a :class:`~lifecycle.errors.StreamError` naming the stream.

    Wrong argument types are a ``TypeError`` naming the argument. Graph ids are Python or numpy
    integers >= 0 everywhere (bools refused).

    Note:
        One capture may be open per provider, and one per thread across providers (a nested
        capture is refused up front: see the README). Callers wait their turn for a stream (see
        ``stream_wait_timeout``). No lock is held while waiting on the GPU or for a stream, so
        queries answer during a long ``synchronize`` and host functions may query the provider.
        A provider dropped without ``close()`` is finalized (with an
        :class:`~lifecycle.errors.UnclosedProviderWarning`) once its streams drain.
    """

    def __init__(self, driver: Driver | None = None, *, device: int = 0, graphs: bool = True,
                 capture_guard: Callable[[], ContextManager] | None = None,
                 stream_wait_timeout: float = DEFAULT_STREAM_WAIT_TIMEOUT):
        if isinstance(driver, type):
            raise TypeError(f"driver must be a Driver instance; got the class {driver.__name__} "
                            f"(pass {driver.__name__}(), an instance)")
        if driver is None:
            from .real_driver import RealDriver
            driver = RealDriver()
        elif not is_driver(driver):
            raise TypeError(f"driver must be a lifecycle Driver (RealDriver, SimDriver, FaultInjectingDriver); "
                            f"got {type(driver).__name__}")
        if isinstance(device, (bool, np.bool_)) or not isinstance(device, (int, np.integer)):
            raise TypeError(f"device must be an int ordinal; got {type(device).__name__}")
        if device < 0:
            raise ValueError(f"device must be >= 0; got {device}")
        if not isinstance(graphs, (bool, np.bool_)):
            raise TypeError(f"graphs must be a bool; got {type(graphs).__name__}")
        if capture_guard is not None and not callable(capture_guard):
            raise TypeError(f"capture_guard must be a callable returning a context manager; "
                            f"got {type(capture_guard).__name__}")
        stream_wait_timeout = check_wait_timeout(stream_wait_timeout)
        self.device = int(device)
        self.graphs_enabled = bool(graphs)
        self._guard = capture_guard or contextlib.nullcontext
        driver.init()
        count = driver.device_count()
        if self.device >= count:
            raise ValueError(f"device must be < {count}, the number of devices the driver sees; "
                             f"got {self.device}")
        ctx = ContextBinding(driver, driver.primary_ctx_retain(self.device), self.device)
        self._reg = Registry(driver, ctx, self.device, self.graphs_enabled, stream_wait_timeout)
        self._finalizer = weakref.finalize(self, finalize, self._reg, f"GraphProvider(device {self.device})")
        self._finalizer.atexit = False  # at exit the driver frees everything with the process

    @property
    def stream(self) -> int:
        """The provider's own non-blocking stream (created on first use), used when ``stream=None``."""
        with self._reg.lock:
            self._reg.check_open()
            return self._reg.resolve_stream(None)

    # -- capture ---------------------------------------------------------------------------------
    def capture(self, graph_id: int, *, stream=None) -> ContextManager[Capture]:
        """Capture the body's work on ``stream`` as graph ``graph_id``; yields a :class:`Capture`.

        On exit the capture is ended and instantiated. If the body raises (``KeyboardInterrupt``
        included), or ending or instantiating fails, the capture is discarded (stream out of
        capture, partial graph and its staging buffers freed, the id free again) and the original
        error propagates with cleanup errors attached. With graphs disabled the body runs eagerly
        and the id cannot be replayed (see :meth:`record`).
        """
        return self._capture(check_graph_id(graph_id), stream, None)

    @contextlib.contextmanager
    def _capture(self, graph_id, stream, step):
        cap = sessions.begin(self._reg, graph_id, stream, step, self._guard)
        try:
            yield cap
        except BaseException as exc:
            sessions.abort(self._reg, cap, exc)
            raise
        sessions.end(self._reg, cap)

    def begin_capture(self, graph_id: int, *, stream=None) -> Capture:
        """Low level: open a capture owned by the calling thread. Prefer :meth:`capture`.

        Raises :class:`CaptureError` if a capture is open (on this provider, or on this thread),
        :class:`GraphStateError` if the id exists, :class:`StreamError` for a refused stream; none
        of them changes any state.
        """
        return sessions.begin(self._reg, check_graph_id(graph_id), stream, None, self._guard)

    def end_capture(self, capture: Capture) -> None:
        """Low level: end and instantiate the open capture (owner thread only); a failure discards
        it and is raised."""
        sessions.end(self._reg, capture)

    def abort_capture(self, capture: Capture, error: BaseException) -> None:
        """Low level: discard the open capture because of ``error`` (which gets cleanup errors
        attached); the caller re-raises ``error``."""
        sessions.abort(self._reg, capture, error)

    def discard_capture(self, graph_id: int) -> None:
        """The way out of a capture whose :class:`Capture` object was lost (e.g. a notebook cell
        raised between ``begin_capture`` and ``end_capture``): discard the open capture of
        ``graph_id`` from the thread that began it.

        The stream's capture is ended, the partial graph and its staging buffers are freed, the id
        is free again and the thread may capture, release and close again. Raises
        :class:`CaptureError` (changing nothing) if this provider has no open capture of
        ``graph_id``, or if another thread began it (CUDA lets only that thread end it). A failed
        cleanup step is raised after the capture was discarded (kept for ``close()`` to retry).
        """
        graph_id = check_graph_id(graph_id)
        notice = CaptureError(f"the capture of graph {graph_id} was discarded")
        sessions.discard_open(self._reg, graph_id, notice)
        errors = getattr(notice, "cleanup_errors", [])
        if errors:
            raise attach_cleanup_errors(errors[0], errors[1:])

    def record(self, graph_id: int, step: Callable[[Capture], None], *, stream=None,
               warmup: bool = True) -> None:
        """Capture ``step(capture)`` as ``graph_id``, after one eager warm-up run.

        The warm-up compiles and loads every kernel ``step`` launches (loading is not allowed
        during capture); its staging buffers are freed once it finished, so ``step`` runs one
        extra time. With graphs disabled ``step`` runs eagerly now and again at every ``replay``.
        An exception ``step`` raises reaches the caller unchanged (cleanup errors attached).
        """
        graph_id = check_graph_id(graph_id)
        if not callable(step):
            raise TypeError(f"step must be callable; got {type(step).__name__}")
        if not isinstance(warmup, (bool, np.bool_)):
            raise TypeError(f"warmup must be a bool; got {type(warmup).__name__}")
        if self.graphs_enabled and warmup:
            eager_runs.warm_up(self._reg, graph_id, step, stream)
        with self._capture(graph_id, stream, None if self.graphs_enabled else step) as cap:
            step(cap)

    # -- replay, synchronize, release -------------------------------------------------------------
    def replay(self, graph_id: int) -> None:
        """Launch graph ``graph_id`` on its own stream (asynchronous).

        With graphs disabled, re-runs the recorded step eagerly on the stream.
        """
        graph_id, reg = check_graph_id(graph_id), self._reg
        with reg.in_turn(graph_id, "replay") as record, reg.ctx.current():
            reg.check_not_capturing(record.stream, f"replay graph {graph_id}")
            if record.eager:
                eager_runs.run_eager(reg, record)
            else:
                reg.driver.graph_launch(record.graph_exec, record.stream)

    def synchronize(self, graph_id: int) -> None:
        """Wait until the work of graph ``graph_id`` issued so far has finished (outside the
        provider's lock); then raise any error a host function of the provider raised."""
        waits.wait(self._reg, check_graph_id(graph_id), "synchronize", release=False)

    def release(self, graph_id: int) -> None:
        """Wait for graph ``graph_id``'s own work, then destroy it and free its staging buffers.

        Other graphs are untouched. While it waits the id refuses new work. If waiting fails
        nothing is released. If a destroy or free fails, the id is still released, the step is kept
        for ``close()`` to retry, and the error is raised.
        """
        waits.wait(self._reg, check_graph_id(graph_id), "release", release=True)

    # -- external buffers, introspection ----------------------------------------------------------
    def register_external(self, obj):
        """Retain a caller-owned buffer (e.g. one a graph reads) until the provider is closed."""
        with self._reg.lock:
            self._reg.check_open()
            if not any(kept is obj for kept in self._reg.external):
                self._reg.external.append(obj)
            return obj

    def graph_ids(self) -> tuple[int, ...]:
        with self._reg.lock:
            self._reg.check_open()
            return tuple(sorted(self._reg.records))

    def state(self, graph_id: int) -> GraphState:
        """``CAPTURING`` or ``READY``; raises :class:`UnknownGraphError` for other ids."""
        graph_id = check_graph_id(graph_id)
        with self._reg.lock:
            return self._reg.lookup(graph_id).state

    def buffers(self, graph_id: int) -> tuple:
        """The staging buffers retained for ``graph_id``, in acquisition order."""
        graph_id = check_graph_id(graph_id)
        with self._reg.lock:
            return tuple(self._reg.lookup(graph_id).buffers)

    @property
    def counters(self) -> Counters:
        """A snapshot of what the provider holds, without the provider's lock (exact whenever no
        other thread is mid-operation). Works after ``close()`` too (all zero once clean)."""
        return self._reg.counters()

    @property
    def closed(self) -> bool:
        return self._reg.closed

    # -- teardown ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Release every graph (after its work), free every buffer, drop external buffers, destroy
        the provider's stream, release the context.

        A capture of this provider left open by the calling thread (a ``begin_capture`` whose
        ``end_capture`` never came) is discarded first, as by :meth:`discard_capture`.

        Idempotent: a second call does nothing, or retries whatever failed, from any thread.
        Raises :class:`CaptureError` (changing nothing) while another thread has a capture of this
        provider open (naming that thread, the only one that can end it), or from a thread that has
        another provider's capture open.
        """
        errors = sessions.discard_own(self._reg)
        sessions.refuse_on_capturing_thread("close the provider")
        errors += teardown(self._reg)
        if errors:
            raise attach_cleanup_errors(errors[0], errors[1:])
        self._reg.surface_host_errors()

    def __enter__(self) -> "GraphProvider":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.close()
            return False
        try:
            self.close()
        except BaseException as cleanup:  # the user's exception stays the one raised
            attach_cleanup_errors(exc, [cleanup])
        return False

    def __repr__(self) -> str:
        c = self.counters
        mode = "graphs" if self.graphs_enabled else "eager"
        return (f"GraphProvider(device {self.device}, {mode}, {c.graphs_alive} graphs, "
                f"{c.pinned_bytes} pinned bytes{', closed' if self.closed else ''})")
