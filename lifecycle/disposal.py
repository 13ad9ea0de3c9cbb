"""Freeing what a record owns only once its GPU work is over, and retrying what failed.

A record is *dropped* after its work was awaited (``GraphRecord.wait``). If waiting fails, nothing
is freed (the GPU may still read it): the record is kept as a *zombie*. If a destroy or free fails,
that step is kept as *pending*. ``retry()`` (called by ``close()``) handles both, from any thread.
"""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING

from .driver import Driver
from .errors import CaptureError, UnclosedProviderWarning
from .record import Action, GraphRecord, GraphState, run_actions
from .staging import PinnedBuffer
from .threads import current

if TYPE_CHECKING:
    from .registry import Registry

__all__ = ["Disposal", "teardown", "finalize"]


class Disposal:
    """Pending cleanup steps and un-awaited records of one provider. Thread-safe; it never waits
    while holding its own lock."""

    def __init__(self, driver: Driver):
        self._driver = driver
        self._lock = threading.Lock()
        self._pending: list[Action] = []
        self._zombies: list[GraphRecord] = []

    def drop(self, record: GraphRecord, *, wait: bool = True) -> list[BaseException]:
        """Await ``record``'s work (unless ``wait`` is false: it never ran, or was awaited), then
        free everything it owns. Returns the errors; never raises."""
        if wait:
            try:
                record.wait(self._driver)
            except Exception as exc:
                with self._lock:
                    self._zombies.append(record)
                return [exc]
        errors, failed = run_actions(record.teardown(self._driver))
        with self._lock:
            self._pending += failed
        return errors

    def retry(self) -> list[BaseException]:
        """Await and drop every zombie, rerun every pending step; returns the errors."""
        with self._lock:
            zombies, self._zombies = self._zombies, []
        errors = [e for record in zombies for e in self.drop(record)]
        with self._lock:
            steps, self._pending = self._pending, []
        more, failed = run_actions(steps)
        with self._lock:
            self._pending += failed
        return errors + more

    def zombies(self) -> int:
        """Records whose work could not be awaited yet (they may still use their stream)."""
        with self._lock:
            return len(self._zombies)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending) + len(self._zombies)

    def buffers(self) -> list[PinnedBuffer]:
        """Staging buffers still allocated here."""
        with self._lock:
            held = [b for r in self._zombies for b in list(r.buffers)]
            held += [a.buffer for a in self._pending if a.buffer is not None]
        return [b for b in held if not b.freed]

    def host_funcs(self) -> int:
        with self._lock:
            return sum(len(r.host_funcs) for r in self._zombies)


def teardown(reg: "Registry") -> list[BaseException]:
    """Close ``reg``: refuse new work, let operations in flight finish, await and free every graph,
    retry failed cleanup, then destroy the provider's own stream and release its context.

    Safe to retry after a failure, from any thread: the own stream is destroyed only once no
    record or zombie can still need it, external buffers stay registered and the context retained
    until everything else is released. Returns the errors; raises only :class:`CaptureError`
    (nothing changed) while a capture is open (``close()`` first discards one its own thread left
    open, so this names the other thread that owns it).
    """
    with reg.close_lock:
        with reg.lock:
            if reg.session is not None:
                raise CaptureError(f"cannot close the provider from thread {current()}: "
                                   f"{reg.owner_hint()}")
            reg.closed = True
            reg.wait_for(lambda: reg.busy == 0)
            if not reg.ctx_retained:
                return []
            records = [reg.records[gid] for gid in sorted(reg.records)]
            for record in records:
                record.releasing = True
            reg.hold()
        errors: list[BaseException] = []
        try:
            with reg.ctx.current():
                for record in records:
                    try:
                        record.wait(reg.driver)
                    except Exception as exc:  # kept (and still owned) for the next close()
                        errors.append(exc)
                        continue
                    with reg.lock:
                        record.state = GraphState.RELEASED
                        del reg.records[record.graph_id]
                    errors += reg.disposal.drop(record, wait=False)
                errors += reg.disposal.retry()
                if reg.own_stream is not None and not reg.records and not reg.disposal.zombies():
                    reg.driver.stream_destroy(reg.own_stream)
                    reg.own_stream = None
        except Exception as exc:
            errors.append(exc)
        finally:
            reg.unhold()
        if not errors and not reg.records and not len(reg.disposal) and reg.own_stream is None:
            reg.external.clear()
            try:
                reg.driver.primary_ctx_release(reg.device)
                reg.ctx_retained = False
            except Exception as exc:
                errors.append(exc)
        return errors


def finalize(reg: "Registry", description: str) -> None:
    """The finalizer of a provider dropped without ``close()``: warn, then tear ``reg`` down on a
    fresh thread (the collecting thread may be capturing, or hold locks the teardown needs)."""
    if reg.closed and not reg.ctx_retained:
        return
    reg.dropped = True   # a capture it left open is discarded by its thread's next lifecycle call
    warnings.warn(f"{description} was garbage-collected without close(); its graphs and pinned "
                  "memory are released by a finalizer once their streams drain", UnclosedProviderWarning,
                  stacklevel=2)
    teardown_later(reg)


def teardown_later(reg: "Registry") -> None:
    """Tear a dropped provider's ``reg`` down on a fresh thread (tried 3 times). An open capture
    stops it: only its thread may end it (``lifecycle.sessions.discard_dropped`` does, then calls
    this again)."""
    def run():
        for _ in range(3):
            try:
                if not teardown(reg):
                    return
            except Exception:  # an open capture: its thread still owns it; nothing to free safely
                return

    threading.Thread(target=run, name="lifecycle-finalizer", daemon=True).start()
