"""What a provider owns per graph id, and the states it moves through.

``CAPTURING → READY → RELEASED`` on success; ``CAPTURING → DISCARDED`` on any capture failure.
A record in ``RELEASED``/``DISCARDED`` is no longer in the provider; its id may be captured again.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from .driver import STREAM_PER_THREAD, Driver
from .staging import PinnedBuffer

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
    """Everything owned for one graph id.

    ``eager`` records (graphs disabled, or a warm-up run) have no graph; ``events`` then mark the
    end of each run, keyed by stream (and by thread for the per-thread default stream), and
    ``unmarked`` says work was enqueued after the last successfully recorded event.
    """
    graph_id: int
    stream: int
    eager: bool
    state: GraphState = GraphState.CAPTURING
    graph: Any = None
    graph_exec: Any = None
    buffers: list[PinnedBuffer] = field(default_factory=list)
    host_funcs: list[object] = field(default_factory=list)
    retained: list[object] = field(default_factory=list)
    events: dict[tuple, int] = field(default_factory=dict)
    unmarked: bool = False
    step: Callable | None = None

    def mark_run(self, driver: Driver) -> None:
        """Eager records: record the end of the work just issued in an event any thread can wait on
        (the per-thread default stream names another stream in every thread)."""
        thread = threading.get_ident() if self.stream == STREAM_PER_THREAD else None
        event = self.events.get((self.stream, thread))
        if event is None:
            event = self.events[(self.stream, thread)] = driver.event_create()
        driver.event_record(event, self.stream)
        self.unmarked = False

    def wait(self, driver: Driver) -> None:
        """Wait for this record's own work: its stream (graphs) or its run events (eager).

        Never the caller's stream. Eager work whose event was not recorded is awaited on its stream,
        which is right from the thread that issued it.
        """
        if not self.eager:
            driver.stream_synchronize(self.stream)
            return
        if self.unmarked:
            driver.stream_synchronize(self.stream)
            self.unmarked = False
        for event in list(self.events.values()):
            driver.event_synchronize(event)

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
                actions.append(Action(f"free pinned buffer of graph {self.graph_id}", buf.free, buf))
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
