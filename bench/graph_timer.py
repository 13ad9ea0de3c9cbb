"""Time a launch inside a torch CUDA graph: the one timer the GPU probes of ``bench/`` share.

``issue(i, handle)`` launches copy ``i`` of the work on the raw stream ``handle``; it runs twice
eagerly (compile, load), then ``launches`` times inside one captured graph (Numba frees held, so no
``cuMemFree`` lands in the capture), and the graph's replays are timed with
:func:`int4gemv.benchmark.timing.measure_replays` (events, median per launch). Needs torch with CUDA.
"""

from __future__ import annotations

__all__ = ["capture_in_torch_graph", "time_in_torch_graph"]

WARMUP_CALLS = 2  # eager calls before the capture: the first compiles, the second runs warm


def capture_in_torch_graph(issue, stream, launches: int):
    """A ``torch.cuda.CUDAGraph`` of ``launches`` calls of ``issue`` on torch stream ``stream``
    (after :data:`WARMUP_CALLS` eager calls)."""
    import torch
    from numba import cuda

    handle = stream.cuda_stream
    with torch.cuda.stream(stream):
        for i in range(min(WARMUP_CALLS, launches)):
            issue(i, handle)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with cuda.defer_cleanup(), torch.cuda.graph(graph, stream=stream):
        for i in range(launches):
            issue(i, handle)
    return graph


def time_in_torch_graph(issue, stream, launches: int, replays: int):
    """A :class:`~int4gemv.benchmark.timing.Timing` of one launch, from ``replays`` replays of a
    graph of ``launches`` calls of ``issue`` on torch stream ``stream``."""
    import torch

    from int4gemv.benchmark.timing import measure_replays

    graph = capture_in_torch_graph(issue, stream, launches)

    def replay():
        with torch.cuda.stream(stream):
            graph.replay()
    return measure_replays(replay, stream, launches=launches, replays=replays)
