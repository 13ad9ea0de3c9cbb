"""Freeing what a record owns only once its GPU work is over, and retrying what failed.

A record is *dropped* after its work was awaited (``GraphRecord.wait``). If waiting fails, nothing
is freed (the GPU may still read it): the record is kept as a *zombie*. If a destroy or free fails,
that step is kept as *pending*. ``retry()`` (called by ``close()``) handles both.
"""

from __future__ import annotations

from .driver import Driver
from .record import Action, GraphRecord, run_actions
from .staging import PinnedBuffer

__all__ = ["Disposal"]


class Disposal:
    """Pending cleanup steps and un-awaited records of one provider (not thread-safe by itself)."""

    def __init__(self, driver: Driver):
        self._driver = driver
        self.pending: list[Action] = []
        self.zombies: list[GraphRecord] = []

    def drop(self, record: GraphRecord, *, wait: bool = True) -> list[BaseException]:
        """Await ``record``'s work (unless ``wait`` is false: it never ran), then free everything it
        owns. Returns the errors; never raises."""
        if wait:
            try:
                record.wait(self._driver)
            except Exception as exc:
                self.zombies.append(record)
                return [exc]
        errors, failed = run_actions(record.teardown(self._driver))
        self.pending += failed
        return errors

    def retry(self) -> list[BaseException]:
        """Await and drop every zombie, rerun every pending step; returns the errors."""
        zombies, self.zombies = self.zombies, []
        errors = [e for record in zombies for e in self.drop(record)]
        steps, self.pending = self.pending, []
        more, failed = run_actions(steps)
        self.pending += failed
        return errors + more

    def __len__(self) -> int:
        return len(self.pending) + len(self.zombies)

    def buffers(self) -> list[PinnedBuffer]:
        """Staging buffers still allocated here."""
        held = [b for r in list(self.zombies) for b in list(r.buffers)]
        held += [a.buffer for a in list(self.pending) if a.buffer is not None]
        return [b for b in held if not b.freed]

    def host_funcs(self) -> int:
        return sum(len(r.host_funcs) for r in list(self.zombies))
