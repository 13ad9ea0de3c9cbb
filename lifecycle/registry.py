"""The record registry: everything one provider owns, looked up by graph id under one lock.

A :class:`Registry` never references its :class:`~lifecycle.provider.GraphProvider`, so a provider
dropped without ``close()`` can be finalized from it. Its lock guards the records, the open capture
session and the counters; nobody waits on the GPU while holding it (waits run outside, counted in
``busy`` and in the record's ``waiters`` so that release and close never free what a wait uses).
"""

from __future__ import annotations

import collections
import contextlib
import threading
from dataclasses import dataclass

import numpy as np

from .context import ContextBinding
from .disposal import Disposal
from .driver import CaptureStatus, Driver
from .errors import (
    ClosedError,
    DeviceMismatchError,
    GraphStateError,
    HostFunctionError,
    StreamError,
    UnknownGraphError,
)
from .record import GraphRecord, GraphState
from .streams import DEFAULT_STREAM_WAIT_TIMEOUT, claims, stream_handle

__all__ = ["Registry", "Counters", "check_graph_id"]


def check_graph_id(graph_id) -> int:
    """The one rule for graph ids: a Python or numpy integer >= 0 (bools are refused)."""
    if isinstance(graph_id, (bool, np.bool_)) or not isinstance(graph_id, (int, np.integer)):
        raise TypeError(f"graph_id must be an int (Python or numpy integer, not bool); "
                        f"got {type(graph_id).__name__}")
    if graph_id < 0:
        raise ValueError(f"graph_id must be >= 0; got {int(graph_id)}")
    return int(graph_id)


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


class Registry:
    """The state of one provider (see the module docstring). ``token`` tags its staging buffers."""

    def __init__(self, driver: Driver, ctx: ContextBinding, device: int, graphs_enabled: bool,
                 stream_wait_timeout: float = DEFAULT_STREAM_WAIT_TIMEOUT):
        self.driver, self.ctx, self.device, self.graphs_enabled = driver, ctx, device, graphs_enabled
        self.stream_wait_timeout = stream_wait_timeout
        self.lock = threading.RLock()
        self.idle = threading.Condition(self.lock)  # notified whenever busy or a waiter count drops
        self.close_lock = threading.Lock()          # one close (or finalizer) at a time
        self.records: dict[int, GraphRecord] = {}
        self.session = None                         # the open capture session, if any
        self.external: list[object] = []
        self.disposal = Disposal(driver)
        self.own_stream: int | None = None
        self.closed = False
        self.dropped = False                        # the provider was garbage-collected unclosed
        self.ctx_retained = True
        self.busy = 0
        self.host_errors: collections.deque = collections.deque()
        self.token = object()

    # -- checks (call under the lock) ----------------------------------------------------------
    def check_open(self) -> None:
        if self.closed:
            raise ClosedError("the graph provider is closed")

    def surface_host_errors(self) -> None:
        """Raise what host functions raised since the last call, once."""
        errors = []
        while self.host_errors:
            errors.append(self.host_errors.popleft())
        if errors:
            raise HostFunctionError(errors) from errors[0][1]

    def entry(self) -> None:
        """The checks every operation starts with."""
        self.check_open()
        self.surface_host_errors()

    def lookup(self, graph_id: int) -> GraphRecord:
        self.check_open()
        record = self.records.get(graph_id)
        if record is None:
            raise UnknownGraphError(f"no graph {graph_id}")
        return record

    def ready(self, graph_id: int, op: str) -> GraphRecord:
        """The READY record ``op`` may use: not being released."""
        self.entry()
        record = self.records.get(graph_id)
        if record is None:
            raise UnknownGraphError(f"cannot {op} graph {graph_id}: no such graph (never captured, "
                                    "released, or its capture failed)")
        if record.state is not GraphState.READY:
            raise GraphStateError(f"cannot {op} graph {graph_id}: it is {record.state.value}")
        if record.releasing:
            raise GraphStateError(f"cannot {op} graph {graph_id}: it is being released")
        return record  # (a capture on its stream is waited for through the stream claims)

    # -- streams ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def in_turn(self, graph_id: int, op: str, *, keep_claim: bool = False):
        """Yield READY record ``graph_id`` with its stream's use claim and the lock held.

        The claim is taken first, outside the lock, waiting (up to ``stream_wait_timeout``) while
        another thread captures on the stream (see :class:`~lifecycle.streams.StreamClaims`); the
        record is checked again under the lock. Both are released on exit, except that with
        ``keep_claim`` a block that ends without an exception hands the claim to the caller, who
        must ``claims.release(record.stream)`` (a wait that follows holds the stream throughout:
        no other thread's capture slips in between the check and the wait)."""
        while True:
            with self.lock:
                stream = self.ready(graph_id, op).stream
            claims.acquire(stream, f"{op} graph {graph_id}", self.stream_wait_timeout)
            kept = False
            try:
                with self.lock:
                    record = self.ready(graph_id, op)
                    if record.stream == stream:
                        yield record
                        kept = keep_claim
                        return
            finally:
                if not kept:
                    claims.release(stream)
            # released and captured again on another stream while this call waited: once more

    def resolve_stream(self, stream) -> int:
        """The raw handle of ``stream``; ``None`` is the provider's own stream (made on first use)."""
        if stream is not None:
            return stream_handle(stream)
        if self.own_stream is None:
            with self.ctx.current():
                self.own_stream = self.driver.stream_create()
        return self.own_stream

    def check_stream(self, handle: int, op: str) -> None:
        """With the provider's context current: ``handle`` belongs to it and is not being captured
        by anyone (a capture begun outside this provider would swallow or be invalidated by ``op``)."""
        if self.driver.stream_get_ctx(handle) != self.ctx.ctx:
            raise DeviceMismatchError(f"stream {handle:#x} belongs to another context than the "
                                      f"provider's (device {self.device})")
        self.check_not_capturing(handle, op)

    def check_not_capturing(self, handle: int, op: str) -> None:
        if self.driver.stream_capture_status(handle) is not CaptureStatus.NONE:
            raise StreamError(f"cannot {op}: stream {handle:#x} is being captured outside this provider's "
                              "control (another provider or a direct cuStreamBeginCapture); its work would "
                              "be captured into that graph, or invalidate it")

    def owner_hint(self) -> str:
        """Which thread must end the open capture, and how (for refusals made in other threads)."""
        session = self.session
        gid = session.record.graph_id
        if not session.thread.alive():
            return (f"graph {gid} was begun by thread {session.thread}, which has exited without ending "
                    "it; CUDA lets only the capturing thread end a capture, so no thread can end this "
                    "one and the provider cannot be closed (its stream stays in capture until the "
                    "process exits). End or discard a capture in the thread that began it before that "
                    "thread returns (`with provider.capture(...)` does)")
        who = f"thread {session.thread} ({session.thread.name})"
        return (f"graph {gid} is being captured by {who}; CUDA lets only that thread end its capture: "
                f"call end_capture(capture), discard_capture({gid}) or close() there")

    # -- work outside the lock -------------------------------------------------------------------
    def hold(self, record: GraphRecord | None = None) -> None:
        """Under the lock: count an operation about to run outside it (waits, warm-ups)."""
        self.busy += 1
        if record is not None:
            record.waiters += 1

    def unhold(self) -> None:
        """The operation counted by :meth:`hold` is over (its record's waiter count is dropped by
        the operation itself, as soon as its wait ends)."""
        with self.lock:
            self.busy -= 1
            self.idle.notify_all()

    def wait_for(self, predicate) -> None:
        """Under the lock: wait (releasing it meanwhile) until ``predicate()`` holds."""
        while not predicate():
            self.idle.wait()

    # -- introspection -----------------------------------------------------------------------------
    def counters(self) -> Counters:
        """A snapshot without the lock (exact whenever no other thread is mid-operation)."""
        records = list(self.records.values())
        buffers = [b for r in records for b in list(r.buffers) if not b.freed] + self.disposal.buffers()
        return Counters(
            graphs_alive=len(records),
            capturing=int(self.session is not None),
            pinned_buffers=len(buffers),
            pinned_bytes=sum(b.nbytes for b in buffers),
            external_buffers=len(self.external),
            host_funcs=sum(len(r.host_funcs) for r in records) + self.disposal.host_funcs(),
            pending_cleanup=len(self.disposal),
        )
