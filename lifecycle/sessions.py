"""Capture sessions: begin, end or discard one capture per provider, and the eager warm-up run.

A session is owned by the thread that began it. Sessions of every provider that really capture
(graphs enabled) are tracked per thread, so that a second capture, or a synchronizing call, on a
thread that already has a capture open is refused up front (see :func:`refuse_on_capturing_thread`):
in CUDA's thread-local capture mode those calls would fail and invalidate the open capture.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from .capture import Capture
from .disposal import teardown_later
from .driver import CaptureMode, CaptureStatus, Driver
from .errors import CaptureError, GraphStateError, attach_cleanup_errors
from .record import GraphRecord, GraphState
from .registry import Registry
from .streams import check_capture_stream, claims
from .threads import ThreadId, current

__all__ = ["Session", "begin", "end", "abort", "discard_open", "discard_own", "wait_for_no_session",
           "refuse_on_capturing_thread", "discard_dropped", "end_abandoned_capture", "exit_guard"]

_thread = threading.local()  # .open: the sessions that really capture, opened by this thread


@dataclass
class Session:
    thread: ThreadId
    capture: Capture
    record: GraphRecord
    prev_ctx: int
    guard: Any
    claimed: str | None  # "capture" (graphs) or "use" (eager) on the record's stream, until closed
    reg: Registry | None = None  # the provider's registry (to discard the capture if it is dropped)


def _open_here() -> list[Session]:
    return getattr(_thread, "open", [])


def refuse_on_capturing_thread(op: str) -> None:
    """Raise :class:`CaptureError` if the calling thread has a lifecycle capture open (of any
    provider): ``op`` would make a call CUDA forbids there (allocation, instantiation, free,
    synchronization) and that would invalidate the open capture.

    A capture left open by a provider that was garbage-collected (a notebook cell re-run with
    ``p = GraphProvider(...)`` after an interrupted ``begin_capture``) is discarded here first, on
    the thread that began it: no one else could end it, and it would wedge the thread."""
    discard_dropped()
    sessions = _open_here()
    if sessions:
        graph_id = sessions[-1].record.graph_id
        raise CaptureError(f"cannot {op} while this thread is capturing graph {graph_id}: while a graph "
                           "is being captured on a thread, the synchronizing, allocating, instantiating "
                           "or freeing calls this needs would fail there and invalidate that capture; "
                           f"end it first (its provider's end_capture(capture), discard_capture({graph_id}) "
                           "or close()), or use another thread")


def discard_dropped() -> None:
    """Discard the calling thread's captures whose provider was dropped without ``close()`` (the
    caller's context is kept), then let the finalizer tear that provider down. Cleanup errors are
    dropped with the provider: no caller owns them."""
    for session in [s for s in _open_here() if s.reg is not None and s.reg.dropped]:
        reg = session.reg
        prev = reg.driver.ctx_get_current()
        notice = CaptureError(f"graph {session.record.graph_id}'s capture was left open by a provider "
                              "that was garbage-collected; it was discarded")
        try:
            _discard(reg, session, notice)
        except CaptureError:  # already discarded
            pass
        finally:
            reg.driver.ctx_set_current(prev)
        teardown_later(reg)


def wait_for_no_session(reg: Registry, op: str, deadline: float | None) -> None:
    """Under the lock: one capture at a time per provider. Wait (releasing the lock) until the
    provider has no open capture, up to ``deadline`` (``time.monotonic()``; ``None``: do not wait);
    refuse at once when the calling thread owns the open capture."""
    while reg.session is not None:
        session = reg.session
        left = 0.0 if deadline is None else deadline - time.monotonic()
        mine = session.thread is current()
        if mine or left <= 0:
            waited = "" if deadline is None or mine else f"waited {reg.stream_wait_timeout:g} s: "
            raise CaptureError(f"cannot {op}: {waited}graph {session.record.graph_id} is being captured "
                               f"(thread {session.thread}); one capture at a time per provider")
        reg.idle.wait(left)
        reg.check_open()


def _check_can_begin(reg: Registry, graph_id: int, deadline: float | None) -> None:
    """Under the lock: the refusals of :func:`begin` (nothing changes); waits for another thread's
    open capture of this provider until ``deadline`` (``None``: refuse at once)."""
    reg.entry()
    refuse_on_capturing_thread(f"capture graph {graph_id}")
    wait_for_no_session(reg, f"capture graph {graph_id}", deadline)
    if graph_id in reg.records:
        raise GraphStateError(f"cannot capture graph {graph_id}: it already exists "
                              f"({reg.records[graph_id].state.value}); release it first")


def begin(reg: Registry, graph_id: int, stream, step, guard_factory) -> Capture:
    """Open a capture of ``graph_id`` owned by the calling thread; no state changes on failure.

    Waits its turn (up to the provider's ``stream_wait_timeout`` each): for another thread's open
    capture of this provider (one at a time), then, outside the lock, for the stream (operations
    of other threads on it); the refusals are checked before each wait and again after it."""
    deadline = time.monotonic() + reg.stream_wait_timeout
    while True:
        with reg.lock:
            _check_can_begin(reg, graph_id, deadline)
            handle = reg.resolve_stream(stream)
            check_capture_stream(handle, graphs_enabled=reg.graphs_enabled)
        if reg.graphs_enabled:
            claims.claim_capture(handle, graph_id, reg.stream_wait_timeout)
            claimed = "capture"
        else:  # eager work must not land in (or invalidate) someone else's capture of the stream
            claims.acquire(handle, f"run graph {graph_id} eagerly", reg.stream_wait_timeout)
            claimed = "use"
        try:
            with reg.lock:
                if reg.session is None or reg.session.thread is current():
                    _check_can_begin(reg, graph_id, None)  # again: the wait let other callers in
                    return _open(reg, graph_id, handle, step, guard_factory, claimed)
        except BaseException:
            _unclaim(handle, claimed)
            raise
        _unclaim(handle, claimed)  # another thread's capture began meanwhile: wait for it unclaimed


def _open(reg: Registry, graph_id: int, handle: int, step, guard_factory, claimed: str) -> Capture:
    """Under the lock, with ``handle`` claimed: begin the capture (or the eager run)."""
    prev = reg.ctx.enter()
    guard, entered = None, False
    try:
        guard = guard_factory()  # inside the try: a failing guard still restores the context
        reg.check_stream(handle, f"capture graph {graph_id}")
        guard.__enter__()
        entered = True
        if reg.graphs_enabled:
            reg.driver.stream_begin_capture(handle, CaptureMode.THREAD_LOCAL)
    except BaseException as exc:
        attach_cleanup_errors(exc, exit_guard(guard, exc) if entered else [])
        reg.ctx.restore(prev, exc)
        raise
    record = GraphRecord(graph_id, handle, eager=not reg.graphs_enabled, owner=reg.token, step=step,
                         wait_timeout=reg.stream_wait_timeout)
    if record.eager:
        record.mark_issuing()
    cap = Capture(reg.driver, record, reg.device, relaxed=reg.graphs_enabled, host_errors=reg.host_errors)
    session = Session(current(), cap, record, prev, guard, claimed, reg)
    reg.records[graph_id] = record
    reg.session = session
    if reg.graphs_enabled:
        _thread.open = _open_here() + [session]
    return cap


def _unclaim(handle: int, claimed: str | None) -> None:
    if claimed == "capture":
        claims.release_capture(handle)
    elif claimed == "use":
        claims.release(handle)


def _owned(reg: Registry, capture: Capture, what: str) -> Session:
    session = reg.session
    if session is None or session.capture is not capture:
        raise CaptureError(f"cannot {what} the capture of graph {capture.graph_id}: it is not the open "
                           "capture of this provider")
    if session.thread is not current():
        raise CaptureError(f"cannot {what} the capture of graph {capture.graph_id} from thread "
                           f"{current()}: it was begun by thread {session.thread} "
                           "(thread-local capture ends in its own thread)")
    return session


def end(reg: Registry, capture: Capture) -> None:
    """End and instantiate the open capture (owner thread only); a failure discards it."""
    with reg.lock:
        session = _owned(reg, capture, "end")
        record = session.record
        try:
            reg.ctx.make_current()  # the body may have switched contexts
            if record.eager:
                record.mark_run(reg.driver)
            else:
                record.graph = reg.driver.stream_end_capture(record.stream)
                _close_session(session)  # this thread has no capture open from here on
                record.graph_exec = reg.driver.graph_instantiate(record.graph)
        except BaseException as exc:
            failure = exc
        else:
            record.state = GraphState.READY
            _finish(reg, session, None)
            return
    _discard(reg, session, failure)
    raise failure


def abort(reg: Registry, capture: Capture, error: BaseException) -> None:
    """Discard the open capture because of ``error`` (which gets cleanup errors attached)."""
    with reg.lock:
        try:
            session = _owned(reg, capture, "abort")
        except CaptureError as exc:
            attach_cleanup_errors(error, [exc])
            return
    _discard(reg, session, error)


def discard_open(reg: Registry, graph_id: int, error: BaseException) -> None:
    """Discard this provider's open capture of ``graph_id`` (owner thread only) because of
    ``error``, which gets the cleanup errors attached. Raises :class:`CaptureError`, changing
    nothing, when there is no such capture or another thread owns it."""
    with reg.lock:
        session = reg.session
        if session is None or session.record.graph_id != graph_id:
            what = "no capture is open" if session is None else \
                f"the open capture is of graph {session.record.graph_id}"
            raise CaptureError(f"cannot discard the capture of graph {graph_id}: {what} on this provider")
        if session.thread is not current():
            raise CaptureError(f"cannot discard the capture of graph {graph_id} from thread "
                               f"{current()}: {reg.owner_hint()}")
    _discard(reg, session, error)


def discard_own(reg: Registry) -> list[BaseException]:
    """``close()``: discard the provider's open capture if the calling thread owns it (a capture
    abandoned by an interrupted caller); returns the cleanup errors. Never raises for captures of
    other threads (``teardown`` refuses those, naming the owner)."""
    with reg.lock:
        session = reg.session
        if session is None or session.thread is not current():
            return []
    notice = CaptureError(f"the capture of graph {session.record.graph_id} was still open when the "
                          "provider was closed; it was discarded")
    try:
        _discard(reg, session, notice)
    except CaptureError:  # discarded meanwhile by this thread (cannot happen from another)
        return []
    return list(getattr(notice, "cleanup_errors", []))


def _discard(reg: Registry, session: Session, error: BaseException) -> None:
    record, errors = session.record, []
    with reg.lock:
        try:
            reg.ctx.make_current()
        except Exception as exc:
            errors.append(exc)
        if not record.eager:
            errors += end_abandoned_capture(reg.driver, record)
            _close_session(session)  # (an eager session keeps its stream claimed through the wait)
        record.state = GraphState.DISCARDED
        del reg.records[record.graph_id]
        reg.hold()
    try:
        # Captured work never ran: nothing to await. Eager work is awaited from the owner thread,
        # which issued it (right even for the per-thread default stream), outside the lock.
        errors += reg.disposal.drop(record, wait=record.eager)
    finally:
        reg.unhold()
    attach_cleanup_errors(error, errors)
    _finish(reg, session, error)


def _close_session(session: Session) -> None:
    """The capture is over (ended or abandoned): off this thread's list, its stream unclaimed.
    Idempotent."""
    if any(s is session for s in _open_here()):
        _thread.open = [s for s in _open_here() if s is not session]
    claimed, session.claimed = session.claimed, None
    _unclaim(session.record.stream, claimed)


def _finish(reg: Registry, session: Session, error: BaseException | None) -> None:
    _close_session(session)
    session.capture.expire()
    with reg.lock:
        reg.session = None
        reg.idle.notify_all()  # a capture of another thread may be waiting its turn
    errors = exit_guard(session.guard, error)
    if error is not None:
        attach_cleanup_errors(error, errors)
        reg.ctx.restore(session.prev_ctx, error)
        return
    reg.ctx.restore(session.prev_ctx, None)
    if errors:
        raise errors[0]


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
