"""Eager runs of a capture body: the warm-up run before a capture, and the re-runs of a recorded
step on ``replay`` when graphs are disabled."""

from __future__ import annotations

import time
from typing import Callable

from .capture import Capture
from .errors import GraphStateError, attach_cleanup_errors
from .record import GraphRecord
from .registry import Registry
from .sessions import refuse_on_capturing_thread, wait_for_no_session
from .streams import check_capture_stream, claims

__all__ = ["warm_up", "run_eager"]


def warm_up(reg: Registry, graph_id: int, step: Callable[[Capture], None], stream) -> None:
    """Run ``step`` once eagerly on the capture stream (compiling and loading its kernels), wait for
    it outside the lock, and free its staging buffers."""
    with reg.lock:
        reg.entry()
        refuse_on_capturing_thread(f"warm up graph {graph_id}")
        wait_for_no_session(reg, f"warm up graph {graph_id}", time.monotonic() + reg.stream_wait_timeout)
        if graph_id in reg.records:
            raise GraphStateError(f"cannot capture graph {graph_id}: it already exists")
        handle = reg.resolve_stream(stream)
        check_capture_stream(handle, graphs_enabled=True)
        reg.hold()
    try:
        with reg.ctx.current(), claims.use(handle, f"warm up graph {graph_id}", reg.stream_wait_timeout):
            reg.check_stream(handle, f"warm up graph {graph_id}")  # before the step touches it
            scratch = GraphRecord(graph_id, handle, eager=True, owner=reg.token,  # never registered
                                  wait_timeout=reg.stream_wait_timeout)
            scratch.mark_issuing()
            cap = Capture(reg.driver, scratch, reg.device, relaxed=False, host_errors=reg.host_errors)
            try:
                step(cap)
            except BaseException as exc:
                cap.expire()
                attach_cleanup_errors(exc, reg.disposal.drop(scratch))
                raise
            cap.expire()
            errors = reg.disposal.drop(scratch)  # waits for the run, frees its buffers
            if errors:
                raise attach_cleanup_errors(errors[0], errors[1:])
    finally:
        reg.unhold()


def run_eager(reg: Registry, record: GraphRecord) -> None:
    """Graphs disabled: run a recorded step again, eagerly, reusing its first run's staging buffers.
    An exception the step raises reaches the caller unchanged (cleanup errors attached)."""
    if record.step is None:
        raise GraphStateError(f"graph {record.graph_id} ran eagerly (graphs disabled) from a capture "
                              "block and has nothing to replay; use record(graph_id, step) instead")
    cap = Capture(reg.driver, record, reg.device, relaxed=False, host_errors=reg.host_errors,
                  reuse=record.buffers)
    with claims.use(record.stream, f"replay graph {record.graph_id} eagerly", reg.stream_wait_timeout):
        record.mark_issuing()
        try:
            record.step(cap)
        except BaseException as exc:
            cap.expire()
            try:
                record.mark_run(reg.driver)
            except Exception as cleanup:
                attach_cleanup_errors(exc, [cleanup])
            raise
        cap.expire()
        record.mark_run(reg.driver)
