"""What a provider owns per graph id, and the states it moves through.

``CAPTURING → READY → RELEASED`` on success; ``CAPTURING → DISCARDED`` on any capture failure.
A record in ``RELEASED``/``DISCARDED`` is no longer in the provider; its id may be captured again.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import Any, Callable

from . import streams
from .driver import STREAM_PER_THREAD, Driver
from .staging import PinnedBuffer
from .threads import current

__all__ = ["GraphState", "GraphRecord", "Action", "run_actions"]


class GraphState(enum.Enum):
    CAPTURING = "capturing"
    READY = "ready"
    RELEASED = "released"
    DISCARDED = "discarded"


@dataclass
class Action:
    """One cleanup step; ``run()`` is retried later if it raised. ``buffer``: the buffer it frees."""
    what: str
    run: Callable[[], None]
    buffer: PinnedBuffer | None = None


def run_actions(actions: list[Action]) -> tuple[list[BaseException], list[Action]]:
    """Run every action, never stopping early. Returns ``(errors, actions that failed)``."""
    errors, failed = [], []
    for action in actions:
        try:
            action.run()
        except Exception as exc:
            errors.append(exc)
            failed.append(action)
    return errors, failed


@dataclass(eq=False)
class GraphRecord:
    """Everything owned for one graph id by the provider whose token is ``owner``.

    ``eager`` records (graphs disabled, or a warm-up run) have no graph; ``events`` then mark the
    end of each run, keyed by ``(stream, thread)`` (the thread only for the per-thread default
    stream, which names another stream in every thread), and ``unmarked`` holds the keys whose
    latest work was issued without its event being recorded. ``waiters`` counts threads waiting on
    the record outside the provider's lock; ``releasing`` refuses new work while it is released;
    ``wait_timeout`` (the provider's ``stream_wait_timeout``) bounds waits for a stream another
    operation holds.
    """
    graph_id: int
    stream: int
    eager: bool
    owner: object = None
    state: GraphState = GraphState.CAPTURING
    graph: Any = None
    graph_exec: Any = None
    buffers: list[PinnedBuffer] = field(default_factory=list)
    host_funcs: list[object] = field(default_factory=list)
    retained: list[object] = field(default_factory=list)
    events: dict[tuple, int] = field(default_factory=dict)
    unmarked: set = field(default_factory=set)
    step: Callable | None = None
    waiters: int = 0
    releasing: bool = False
    wait_timeout: float = streams.DEFAULT_STREAM_WAIT_TIMEOUT  #: bound on waiting for a stream's claim

    def _key(self) -> tuple:
        thread = current() if self.stream == STREAM_PER_THREAD else None
        return (self.stream, thread)

    def mark_issuing(self) -> None:
        """Eager records: the calling thread is about to issue work on the record's stream."""
        self.unmarked.add(self._key())

    def mark_run(self, driver: Driver) -> None:
        """Eager records: record the end of the work just issued in an event any thread can wait on.
        If recording fails the work stays *unmarked* (see :meth:`wait_steps`)."""
        key = self._key()
        event = self.events.get(key)
        if event is None:
            event = self.events[key] = driver.event_create()
        driver.event_record(event, self.stream)
        self.unmarked.discard(key)

    def wait_steps(self, driver: Driver) -> list[Callable[[], None]]:
        """The waits that cover this record's own work so far (take them under the provider's lock,
        run them outside it): its stream (graphs), or its run events (eager).

        Never the caller's stream: eager work whose event was not recorded is awaited on its stream
        from the thread that issued it, and with ``cuCtxSynchronize`` (the provider's context) from
        any other thread, which cannot name another thread's per-thread default stream.
        """
        if not self.eager:
            return [functools.partial(streams.synchronize, driver, self.stream, self.wait_timeout)]
        me, steps, foreign = current(), [], False
        for stream, thread in sorted(self.unmarked, key=repr):
            if thread is None or thread is me:
                steps.append(functools.partial(streams.synchronize, driver, stream, self.wait_timeout))
            else:
                foreign = True
        if foreign:
            steps.append(driver.ctx_synchronize)
        steps += [functools.partial(driver.event_synchronize, event) for event in self.events.values()]
        return steps

    def wait(self, driver: Driver) -> None:
        """Run :meth:`wait_steps` now (for records no other thread can touch)."""
        for step in self.wait_steps(driver):
            step()

    def teardown(self, driver: Driver) -> list[Action]:
        """Cleanup steps that destroy every handle and free every buffer of this record.

        Call only once the record's GPU work is finished (or never ran). Each step forgets its
        handle on success, so a failed step can be retried alone.
        """
        actions = []
        if self.graph_exec is not None:
            actions.append(Action(f"destroy executable graph {self.graph_id}", self._drop_exec(driver)))
        if self.graph is not None:
            actions.append(Action(f"destroy graph {self.graph_id}", self._drop_graph(driver)))
        for key in list(self.events):
            actions.append(Action(f"destroy event of graph {self.graph_id}", self._drop_event(driver, key)))
        for buf in self.buffers:
            if not buf.freed:
                actions.append(Action(f"free pinned buffer of graph {self.graph_id}",
                                      functools.partial(buf.free, self.owner), buf))
        self.buffers = []  # the actions (or the provider's pending list) hold them now
        self.host_funcs.clear()  # safe: the stream is idle, no call can be in flight
        self.retained.clear()
        self.step = None
        return actions

    def _drop_exec(self, driver):
        exe = self.graph_exec

        def run():
            driver.graph_exec_destroy(exe)
            self.graph_exec = None
        return run

    def _drop_graph(self, driver):
        graph = self.graph

        def run():
            driver.graph_destroy(graph)
            self.graph = None
        return run

    def _drop_event(self, driver, key):
        event = self.events[key]

        def run():
            driver.event_destroy(event)
            self.events.pop(key, None)
        return run
