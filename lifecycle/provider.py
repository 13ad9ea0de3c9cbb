"""``GraphProvider``: CUDA graphs owned by integer graph id, on one device.

The main door is the context manager::

    with GraphProvider(device=0) as graphs:
        with graphs.capture(7, stream=s) as cap:      # begin capture ... end + instantiate
            buf = cap.stage(x)                         # pinned, retained for graph 7
            cap.copy_to_device(d_x, buf)               # captured H2D copy reads buf at replay
            launch_kernels(cap.stream)                 # Numba launches on the same stream
        graphs.replay(7)                               # cuGraphLaunch on graph 7's stream
        graphs.release(7)                              # waits for that stream, frees 7's buffers

``begin_capture``/``end_capture`` are the low-level halves of ``capture``; ``record`` captures a
callable after a warm-up run (compile and load kernels before capture).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from .capture import Capture, end_abandoned_capture, exit_guard
from .context import ContextBinding
from .disposal import Disposal
from .driver import Driver
from .errors import (
    CaptureError,
    ClosedError,
    DeviceMismatchError,
    GraphStateError,
    StreamError,
    UnknownGraphError,
    attach_cleanup_errors,
)
from .record import GraphRecord, GraphState
from .streams import check_capture_stream, stream_handle

__all__ = ["GraphProvider", "Counters"]


@dataclass(frozen=True)
class Counters:
    """A snapshot of what a provider holds (all zero after ``close()``)."""
    graphs_alive: int        #: graph ids owned (ready or capturing)
    capturing: int           #: 1 while a capture is open
    pinned_buffers: int      #: staging buffers still allocated (retained or awaiting cleanup)
    pinned_bytes: int        #: their bytes
    external_buffers: int    #: caller-owned objects registered with ``register_external``
    host_funcs: int          #: host functions kept callable for captured graphs
    pending_cleanup: int     #: failed cleanup steps and un-awaited records, retried by ``close()``


@dataclass
class _Owner:
    thread: int
    capture: Capture
    record: GraphRecord
    prev_ctx: int
    guard: Any


def _graph_id(graph_id) -> int:
    if isinstance(graph_id, bool) or not isinstance(graph_id, int):
        raise TypeError(f"graph_id must be an int; got {type(graph_id).__name__}")
    return int(graph_id)


class GraphProvider:
    """Owns CUDA graphs by integer id on one device; thread-safe.

    Args:
        driver: a :class:`~lifecycle.driver.Driver`; default a new
            :class:`~lifecycle.real_driver.RealDriver`.
        device: the device ordinal. Its primary context is retained until ``close()`` and made
            current in the calling thread for every operation (the caller's context is restored).
        graphs: ``False`` runs capture bodies eagerly (no graph), e.g. on the per-thread default
            stream; ``record``-ed steps then re-run on ``replay``.
        capture_guard: a zero-argument callable returning a context manager held from just before
            begin-capture until the capture is instantiated or discarded; for Numba,
            :func:`lifecycle.numba_glue.hold_deallocations` (see :func:`lifecycle.numba_glue.numba_provider`).

    Note:
        Operations are serialized by one lock. Only one capture may be open per provider; its body
        runs outside the lock, so other threads may replay and release other graphs meanwhile.

    Warning:
        Only device arrays may be used inside a capture, kernels must have been compiled and
        loaded before (``record(..., warmup=True)`` does it), and anything that allocates,
        frees or synchronizes in the capturing thread invalidates the capture.
    """

    def __init__(self, driver: Driver | None = None, *, device: int = 0, graphs: bool = True,
                 capture_guard: Callable[[], ContextManager] | None = None):
        if driver is None:
            from .real_driver import RealDriver
            driver = RealDriver()
        self._driver = driver
        self.device = int(device)
        self.graphs_enabled = bool(graphs)
        self._guard = capture_guard or contextlib.nullcontext
        self._lock = threading.RLock()
        self._records: dict[int, GraphRecord] = {}
        self._owner: _Owner | None = None
        self._external: list[object] = []
        self._disposal = Disposal(driver)
        self._own_stream: int | None = None
        self._closed = False
        driver.init()
        self._ctx = ContextBinding(driver, driver.primary_ctx_retain(self.device), self.device)
        self._ctx_retained = True

    # -- checks ----------------------------------------------------------------------------------
    def _check_open(self):
        if self._closed:
            raise ClosedError("the graph provider is closed")

    def _ready(self, graph_id: int, what: str) -> GraphRecord:
        record = self._records.get(graph_id)
        if record is None:
            raise UnknownGraphError(f"cannot {what} graph {graph_id}: no such graph (never captured, "
                                    "released, or its capture failed)")
        if record.state is not GraphState.READY:
            raise GraphStateError(f"cannot {what} graph {graph_id}: it is {record.state.value}")
        return record

    def _check_not_capturing(self, record: GraphRecord, what: str):
        owner = self._owner
        if owner is None or not self.graphs_enabled:
            return
        if what != "replay" and owner.thread == threading.get_ident():
            raise CaptureError(f"cannot {what} graph {record.graph_id} while this thread is capturing graph "
                               f"{owner.record.graph_id}: it would synchronize or free inside the capture")
        if owner.record.stream == record.stream and not record.eager:
            raise StreamError(f"cannot {what} graph {record.graph_id}: its stream {record.stream:#x} is being "
                              f"captured for graph {owner.record.graph_id}")

    def _resolve_stream(self, stream) -> int:
        if stream is not None:
            return stream_handle(stream)
        if self._own_stream is None:
            with self._ctx.current():
                self._own_stream = self._driver.stream_create()
        return self._own_stream

    @property
    def stream(self) -> int:
        """The provider's own non-blocking stream (created on first use), used when ``stream=None``."""
        with self._lock:
            self._check_open()
            return self._resolve_stream(None)

    # -- capture ---------------------------------------------------------------------------------
    def capture(self, graph_id: int, *, stream=None) -> ContextManager[Capture]:
        """Capture the body's work on ``stream`` as graph ``graph_id``; yields a :class:`Capture`.

        On exit the capture is ended and instantiated. If the body raises, or ending or
        instantiating fails, the capture is discarded (stream out of capture, partial graph and
        its staging buffers freed) and the original error propagates with cleanup errors attached.
        With graphs disabled the body runs eagerly and the id cannot be replayed (see :meth:`record`).
        """
        return self._capture(graph_id, stream, None)

    @contextlib.contextmanager
    def _capture(self, graph_id, stream, step):
        cap = self._begin(graph_id, stream, step)
        try:
            yield cap
        except BaseException as exc:
            self.abort_capture(cap, exc)
            raise
        self.end_capture(cap)

    def begin_capture(self, graph_id: int, *, stream=None) -> Capture:
        """Low level: open a capture owned by the calling thread. Prefer :meth:`capture`.

        Raises :class:`CaptureError` if a capture is open, :class:`GraphStateError` if the id
        exists, :class:`StreamError` for a refused stream; none of them changes any state.
        """
        return self._begin(graph_id, stream, None)

    def _begin(self, graph_id, stream, step) -> Capture:
        graph_id = _graph_id(graph_id)
        with self._lock:
            self._check_open()
            if self._owner is not None:
                raise CaptureError(f"cannot capture graph {graph_id}: graph {self._owner.record.graph_id} is "
                                   f"being captured (thread {self._owner.thread}); one capture at a time")
            if graph_id in self._records:
                raise GraphStateError(f"cannot capture graph {graph_id}: it already exists "
                                      f"({self._records[graph_id].state.value}); release it first")
            handle = self._resolve_stream(stream)
            check_capture_stream(handle, graphs_enabled=self.graphs_enabled)
            prev = self._ctx.enter()
            guard = self._guard()
            entered = False
            try:
                if self._driver.stream_get_ctx(handle) != self._ctx.ctx:
                    raise DeviceMismatchError(f"stream {handle:#x} belongs to another context than "
                                              f"the provider's (device {self.device})")
                guard.__enter__()
                entered = True
                if self.graphs_enabled:
                    self._driver.stream_begin_capture(handle)
            except BaseException as exc:
                errors = []
                if entered:
                    errors += exit_guard(guard, exc)
                attach_cleanup_errors(exc, errors)
                self._ctx.restore(prev, exc)
                raise
            record = GraphRecord(graph_id, handle, eager=not self.graphs_enabled, step=step,
                                 unmarked=not self.graphs_enabled)
            cap = Capture(self._driver, record, self.device, relaxed=self.graphs_enabled)
            self._records[graph_id] = record
            self._owner = _Owner(threading.get_ident(), cap, record, prev, guard)
            return cap

    def _check_owner(self, capture: Capture, what: str) -> _Owner:
        owner = self._owner
        if owner is None or owner.capture is not capture:
            raise CaptureError(f"cannot {what} the capture of graph {capture.graph_id}: it is not the open "
                               "capture of this provider")
        if owner.thread != threading.get_ident():
            raise CaptureError(f"cannot {what} the capture of graph {capture.graph_id} from thread "
                               f"{threading.get_ident()}: it was begun by thread {owner.thread} "
                               "(thread-local capture ends in its own thread)")
        return owner

    def end_capture(self, capture: Capture) -> None:
        """Low level: end and instantiate the open capture (owner thread only).

        A failure to end or instantiate discards the capture and is raised. (Should only exiting
        the capture guard or restoring the caller's context fail, the graph is ready and that
        error is raised.)
        """
        with self._lock:
            owner = self._check_owner(capture, "end")
            record = owner.record
            try:
                if record.eager:
                    record.mark_run(self._driver)
                else:
                    record.graph = self._driver.stream_end_capture(record.stream)
                    record.graph_exec = self._driver.graph_instantiate(record.graph)
            except BaseException as exc:
                self._discard(owner, exc)
                raise
            record.state = GraphState.READY
            self._finish(owner, None)

    def abort_capture(self, capture: Capture, error: BaseException) -> None:
        """Low level: discard the open capture because of ``error`` (which gets cleanup errors
        attached); the caller re-raises ``error``."""
        with self._lock:
            try:
                owner = self._check_owner(capture, "abort")
            except CaptureError as exc:
                attach_cleanup_errors(error, [exc])
                return
            self._discard(owner, error)

    def _discard(self, owner: _Owner, error: BaseException) -> None:
        record, errors = owner.record, []
        if not record.eager:
            errors += end_abandoned_capture(self._driver, record)
        record.state = GraphState.DISCARDED
        del self._records[record.graph_id]
        # Captured work never ran: nothing to await. Eager work is awaited from the owner thread,
        # which issued it (right even for the per-thread default stream).
        errors += self._disposal.drop(record, wait=record.eager)
        attach_cleanup_errors(error, errors)
        self._finish(owner, error)

    def _finish(self, owner: _Owner, error: BaseException | None) -> None:
        owner.capture._close()
        self._owner = None
        errors = exit_guard(owner.guard, error)
        if error is not None:
            attach_cleanup_errors(error, errors)
            self._ctx.restore(owner.prev_ctx, error)
            return
        self._ctx.restore(owner.prev_ctx, None)
        if errors:
            raise errors[0]

    # -- record (warm-up, then capture) ----------------------------------------------------------
    def record(self, graph_id: int, step: Callable[[Capture], None], *, stream=None,
               warmup: bool = True) -> None:
        """Capture ``step(capture)`` as ``graph_id``, after one eager warm-up run.

        The warm-up compiles and loads every kernel ``step`` launches (loading is not allowed
        during capture) and its staging buffers are freed once it finished, so ``step`` runs one
        extra time. With graphs disabled ``step`` runs eagerly now and again at every ``replay``.
        """
        graph_id = _graph_id(graph_id)
        if self.graphs_enabled and warmup:
            self._warm_up(graph_id, step, stream)
        with self._capture(graph_id, stream, None if self.graphs_enabled else step) as cap:
            step(cap)

    def _warm_up(self, graph_id, step, stream):
        with self._lock:
            self._check_open()
            if self._owner is not None:
                raise CaptureError(f"cannot warm up graph {graph_id}: graph {self._owner.record.graph_id} is "
                                   "being captured")
            if graph_id in self._records:
                raise GraphStateError(f"cannot capture graph {graph_id}: it already exists")
            handle = self._resolve_stream(stream)
            check_capture_stream(handle, graphs_enabled=True)
            scratch = GraphRecord(graph_id, handle, eager=True, unmarked=True)  # never registered
            with self._ctx.current():
                cap = Capture(self._driver, scratch, self.device, relaxed=False)
                try:
                    step(cap)
                except BaseException as exc:
                    cap._close()
                    attach_cleanup_errors(exc, self._disposal.drop(scratch))
                    raise
                cap._close()
                errors = self._disposal.drop(scratch)  # waits for the run, frees its buffers
                if errors:
                    raise attach_cleanup_errors(errors[0], errors[1:])

    # -- replay, synchronize, release -------------------------------------------------------------
    def replay(self, graph_id: int) -> None:
        """Launch graph ``graph_id`` on its own stream (asynchronous).

        With graphs disabled, re-runs the recorded step eagerly on the stream.
        """
        with self._ready_record(graph_id, "replay") as record:
            if record.eager:
                self._run_eager(record)
            else:
                self._driver.graph_launch(record.graph_exec, record.stream)

    @contextlib.contextmanager
    def _ready_record(self, graph_id, op: str):
        """Under the lock, with the provider's context current: the READY record of
        ``graph_id`` that ``op`` may use (its stream not capturing another graph)."""
        graph_id = _graph_id(graph_id)
        with self._lock:
            self._check_open()
            record = self._ready(graph_id, op)
            self._check_not_capturing(record, op)
            with self._ctx.current():
                yield record

    def _run_eager(self, record: GraphRecord):
        if record.step is None:
            raise GraphStateError(f"graph {record.graph_id} ran eagerly (graphs disabled) from a capture "
                                  "block and has nothing to replay; use record(graph_id, step) instead")
        cap = Capture(self._driver, record, self.device, relaxed=False, reuse=record.buffers)
        record.unmarked = True
        try:
            record.step(cap)
        finally:
            cap._close()
            record.mark_run(self._driver)

    def synchronize(self, graph_id: int) -> None:
        """Wait until the work of graph ``graph_id`` issued so far has finished."""
        with self._ready_record(graph_id, "synchronize") as record:
            record.wait(self._driver)

    def release(self, graph_id: int) -> None:
        """Wait for graph ``graph_id``'s own stream, then destroy it and free its staging buffers.

        Other graphs are untouched. If waiting fails nothing is released. If a destroy or free
        fails, the id is still released, the step is kept for ``close()`` to retry, and the
        error is raised.
        """
        with self._ready_record(graph_id, "release") as record:
            record.wait(self._driver)  # on failure nothing changes
            self._dispose(record)

    def _dispose(self, record: GraphRecord):
        """Forget an idle record and free what it owns; raise the first cleanup error."""
        record.state = GraphState.RELEASED
        del self._records[record.graph_id]
        errors = self._disposal.drop(record, wait=False)
        if errors:
            raise attach_cleanup_errors(errors[0], errors[1:])

    # -- external buffers, introspection ----------------------------------------------------------
    def register_external(self, obj):
        """Retain a caller-owned buffer (e.g. one a graph reads) until the provider closes."""
        with self._lock:
            self._check_open()
            if not any(kept is obj for kept in self._external):
                self._external.append(obj)
            return obj

    def graph_ids(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(sorted(self._records))

    def state(self, graph_id: int) -> GraphState:
        """``CAPTURING`` or ``READY``; raises :class:`UnknownGraphError` for other ids."""
        with self._lock:
            record = self._records.get(_graph_id(graph_id))
            if record is None:
                raise UnknownGraphError(f"no graph {graph_id}")
            return record.state

    def buffers(self, graph_id: int) -> tuple:
        """The staging buffers retained for ``graph_id``, in acquisition order."""
        with self._lock:
            record = self._records.get(_graph_id(graph_id))
            if record is None:
                raise UnknownGraphError(f"no graph {graph_id}")
            return tuple(record.buffers)

    @property
    def counters(self) -> Counters:
        """A snapshot of what the provider holds. Does not take the provider's lock (so a notebook
        can look while a release waits); exact whenever no other thread is mid-operation."""
        records = list(self._records.values())
        buffers = [b for r in records for b in list(r.buffers) if not b.freed] + self._disposal.buffers()
        return Counters(
            graphs_alive=len(records),
            capturing=int(self._owner is not None),
            pinned_buffers=len(buffers),
            pinned_bytes=sum(b.nbytes for b in buffers),
            external_buffers=len(self._external),
            host_funcs=sum(len(r.host_funcs) for r in records) + self._disposal.host_funcs(),
            pending_cleanup=len(self._disposal),
        )

    @property
    def closed(self) -> bool:
        return self._closed

    # -- teardown ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Release every graph, free every buffer, drop external buffers, release the context.

        Idempotent: a second call does nothing, or retries whatever failed the first time.
        Raises :class:`CaptureError` (changing nothing) while a capture is open.
        """
        with self._lock:
            if self._owner is not None:
                raise CaptureError(f"cannot close while graph {self._owner.record.graph_id} is being captured")
            self._closed = True
            if not self._ctx_retained:
                return
            errors: list[BaseException] = []
            try:
                with self._ctx.current():
                    for graph_id in sorted(self._records):
                        record = self._records[graph_id]
                        try:
                            record.wait(self._driver)
                            self._dispose(record)
                        except Exception as exc:  # a failed wait keeps the record: retried next time
                            errors.append(exc)
                    errors += self._disposal.retry()
                    if self._own_stream is not None and not self._records:
                        self._driver.stream_destroy(self._own_stream)
                        self._own_stream = None
            except Exception as exc:
                errors.append(exc)
            self._external.clear()
            if not errors and not self._records and not len(self._disposal) and self._own_stream is None:
                try:
                    self._driver.primary_ctx_release(self.device)
                    self._ctx_retained = False
                except Exception as exc:
                    errors.append(exc)
            if errors:
                raise attach_cleanup_errors(errors[0], errors[1:])

    def __enter__(self) -> "GraphProvider":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.close()
            return False
        try:
            self.close()
        except Exception as cleanup:
            attach_cleanup_errors(exc, [cleanup])
        return False

    def __repr__(self) -> str:
        c = self.counters
        mode = "graphs" if self.graphs_enabled else "eager"
        return (f"GraphProvider(device {self.device}, {mode}, {c.graphs_alive} graphs, "
                f"{c.pinned_bytes} pinned bytes{', closed' if self._closed else ''})")

