"""The exceptions lifecycle raises.

Every error a caller can provoke by misuse (wrong owner, unknown id, refused stream) is a
:class:`LifecycleError` raised *before* any state changes. Every CUDA failure is a
:class:`DriverError` naming the driver call and the ``CUresult``.
"""

from __future__ import annotations

__all__ = [
    "LifecycleError", "DriverError", "CaptureError", "GraphStateError", "UnknownGraphError",
    "StreamError", "DeviceMismatchError", "ClosedError", "HostFunctionError", "UnclosedProviderWarning",
    "attach_cleanup_errors",
]


class LifecycleError(RuntimeError):
    """Base class of every error lifecycle raises."""


class DriverError(LifecycleError):
    """A CUDA driver call failed.

    Attributes:
        call: the driver function, e.g. ``"cuStreamEndCapture"``.
        code: the ``CUresult`` as an int.
        name: the ``CUresult`` name, e.g. ``"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"``.
        injected: ``True`` when a :class:`~lifecycle.testing.faults.FaultInjectingDriver` made it up.
    """

    def __init__(self, call: str, code: int, name: str, *, injected: bool = False, detail: str = ""):
        self.call, self.code, self.name, self.injected = call, int(code), name, injected
        tag = " (injected)" if injected else ""
        more = f": {detail}" if detail else ""
        super().__init__(f"{call} failed: {name} ({int(code)}){tag}{more}")


class CaptureError(LifecycleError):
    """Capture ownership was violated: a second capture while one is open, an end (or a
    release/close) from a thread that does not own the open capture, or use of an ended capture."""


class GraphStateError(LifecycleError):
    """The graph id exists but is in the wrong state for the operation (or already exists)."""


class UnknownGraphError(GraphStateError, KeyError):
    """No graph with this id is owned by the provider (never captured, released or discarded)."""

    def __str__(self) -> str:  # KeyError would add quotes
        return str(self.args[0]) if self.args else ""


class StreamError(LifecycleError):
    """The stream cannot be used for this operation (legacy or per-thread default stream, or a
    stream that is being captured)."""


class DeviceMismatchError(LifecycleError):
    """A context, stream or graph belongs to a different device than the provider."""


class ClosedError(LifecycleError):
    """The provider was closed (or its ``close()`` began): every method but ``close()``,
    ``closed`` and ``counters`` raises it."""


class HostFunctionError(LifecycleError):
    """A host function enqueued with ``Capture.host_func`` raised on its driver thread.

    Raised by the provider's next operation (capture, record, replay, synchronize, release or
    close) after the failure was seen. ``errors`` lists ``(graph_id, exception)`` for every failure
    collected; the first exception is also the ``__cause__``.
    """

    def __init__(self, errors):
        self.errors = list(errors)
        graph_id, first = self.errors[0]
        more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        super().__init__(f"a host function of graph {graph_id} raised {type(first).__name__}: {first}{more}")


class UnclosedProviderWarning(UserWarning):
    """A provider was garbage-collected without ``close()``; a finalizer releases what it held.

    A ``UserWarning`` (not a ``ResourceWarning``, which Python hides by default) so a notebook shows
    it; Python's default filter shows it once per process."""


def attach_cleanup_errors(error: BaseException, cleanup_errors) -> BaseException:
    """Record ``cleanup_errors`` on ``error`` without replacing it; returns ``error``.

    Each cleanup error becomes a note (shown in the traceback) and the list is kept as
    ``error.cleanup_errors`` so tests and callers can inspect it.
    """
    cleanup_errors = [e for e in cleanup_errors if e is not None and e is not error]
    if not cleanup_errors:
        return error
    try:
        existing = list(getattr(error, "cleanup_errors", ()))
        error.cleanup_errors = existing + cleanup_errors
    except AttributeError:  # exceptions with __slots__
        pass
    for extra in cleanup_errors:
        note = f"during cleanup: {type(extra).__name__}: {extra}"
        if hasattr(error, "add_note"):
            error.add_note(note)
    return error
