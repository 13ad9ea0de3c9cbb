"""Which streams may be captured, and turning stream objects into raw ``CUstream`` handles."""

from __future__ import annotations

from .driver import STREAM_LEGACY, STREAM_PER_THREAD
from .errors import StreamError

__all__ = ["stream_handle", "check_capture_stream"]


def stream_handle(stream) -> int:
    """The raw handle of an int, a ``__cuda_stream__`` object (cuda.core, Numba) or a Numba stream."""
    if isinstance(stream, bool):
        raise TypeError("stream must be a CUstream handle or a stream object, not a bool")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "handle"):
        return int(stream.handle or 0)
    return int(stream)


def check_capture_stream(handle: int, *, graphs_enabled: bool) -> None:
    """Refuse the legacy default stream always, and the per-thread default stream with graphs on."""
    if handle in (0, STREAM_LEGACY):
        raise StreamError("the legacy default stream (CU_STREAM_LEGACY or 0) cannot be captured: it "
                          "synchronizes with every blocking stream; pass a created stream")
    if handle == STREAM_PER_THREAD and graphs_enabled:
        raise StreamError("the per-thread default stream (CU_STREAM_PER_THREAD) is refused while graphs "
                          "are enabled: its handle names a different stream in every thread, so a replay "
                          "or release from another thread would use the wrong stream; pass a created "
                          "stream, or use GraphProvider(graphs=False) to run eagerly on it")
