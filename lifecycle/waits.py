"""``synchronize`` and ``release``: wait for one graph's own work outside the provider's lock, then
(release) destroy it and free its staging buffers.

What lives how long, for ``release(graph_id)``: the graph's record stays in the provider, with its
executable graph, its staging buffers (memory and :class:`~lifecycle.staging.PinnedBuffer`
objects), its host functions and retained objects, until the wait for its work has ended. Then the
record leaves the provider, the handles are destroyed and the memory freed. The Python objects
(buffers, retained objects, host functions) stay referenced until ``release`` returns, on every
path; after that the provider holds none of them (a buffer the caller kept reports ``freed``).
"""

from __future__ import annotations

from .errors import attach_cleanup_errors
from .record import GraphState
from .registry import Registry
from .sessions import refuse_on_capturing_thread
from .streams import claims

__all__ = ["wait"]


def wait(reg: Registry, graph_id: int, op: str, *, release: bool) -> None:
    """Wait until graph ``graph_id``'s work issued so far has finished; with ``release`` then
    destroy and free what it owns (see the module docstring). Raises the errors host functions
    raised meanwhile."""
    refuse_on_capturing_thread(f"{op} graph {graph_id}")
    with reg.in_turn(graph_id, op, keep_claim=True) as record:
        with reg.ctx.current():
            reg.check_not_capturing(record.stream, f"{op} graph {graph_id}")
        steps = record.wait_steps(reg.driver)
        record.releasing = release  # a release refuses new work on the id from here on
        reg.hold(record)
        kept = (list(record.buffers), list(record.retained), list(record.host_funcs))  # see above
    try:  # the stream's use claim is held until the wait has ended (Registry.in_turn)
        _finish(reg, record, steps, graph_id, release=release)
    finally:
        claims.release(record.stream)
        kept = None  # noqa: F841  the objects outlived every step, on every path; now dropped


def _finish(reg: Registry, record, steps, graph_id: int, *, release: bool) -> None:
    counted = True
    try:
        with reg.ctx.current():
            for step in steps:
                step()
            with reg.lock:
                record.waiters -= 1
                counted = False
                reg.idle.notify_all()
                if release:
                    reg.wait_for(lambda: record.waiters == 0)  # other waits on it end: work is done
                    record.state = GraphState.RELEASED
                    del reg.records[graph_id]
            if release:
                errors = reg.disposal.drop(record, wait=False)
                if errors:
                    raise attach_cleanup_errors(errors[0], errors[1:])
    finally:
        with reg.lock:
            if counted:
                record.waiters -= 1
            if release and record.state is GraphState.READY:
                record.releasing = False  # nothing released: the id works as before
            reg.busy -= 1
            reg.idle.notify_all()
    with reg.lock:
        reg.surface_host_errors()
