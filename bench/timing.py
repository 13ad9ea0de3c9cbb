"""Timing on the GPU with CUDA events, in the manner of ``triton.testing.do_bench``.

* :class:`GraphTimer`: ``launches`` calls of ``issue(i, stream_handle)`` captured into one torch
  CUDA graph, replayed; the per-launch time is a replay's event time divided by ``launches``, so
  launch cost from Python is excluded. Callers rotate ``i`` over copies of the weights totalling
  more than the L2 cache, so no launch finds its weight cached.
* :func:`eager_per_call`: the wall time per call of the same calls issued from Python (what a
  caller without graphs pays; the larger of host overhead and kernel time).
* :func:`time_replays`: event timing of a lifecycle-owned graph (see :mod:`bench.owned_graph`).
* :func:`copy_bandwidth`: device-to-device copy bandwidth (read + write bytes), the reference
  every kernel's bandwidth is reported against.

Note:
    ``CUDAGraph.replay()`` runs on the *current* torch stream, so replays and their events are
    issued inside ``torch.cuda.stream(stream)``. Capture is wrapped in
    ``numba.cuda.defer_cleanup()`` so Numba frees nothing while the stream captures.
torch and Numba are imported on first use.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "DEFAULT_REPLAYS",
    "DEFAULT_WARMUP",
    "MIN_LAUNCHES",
    "GraphTimer",
    "Timing",
    "copy_bandwidth",
    "eager_per_call",
    "time_replays",
]

DEFAULT_REPLAYS = 30   # timed replays (the median is reported); at least 20
DEFAULT_WARMUP = 3     # untimed replays first
MIN_LAUNCHES = 20      # launches per graph at least (amortizes the graph launch itself)


@dataclass(frozen=True)
class Timing:
    """Per-launch time: median and 10th/90th percentiles (µs) over ``replays`` replays."""

    us: float
    p10_us: float
    p90_us: float
    replays: int
    launches: int

    @classmethod
    def from_samples(cls, per_launch_us, launches):
        s = np.asarray(per_launch_us, np.float64)
        return cls(float(np.median(s)), float(np.percentile(s, 10)), float(np.percentile(s, 90)),
                   len(s), int(launches))

    def as_dict(self):
        return asdict(self)


class GraphTimer:
    """``issue(i, handle)`` for ``i < launches`` captured into one graph on torch ``stream``.

    Two eager calls run first (compile, module load, argument binding happen outside capture).
    ``issue`` must allocate nothing that outlives the capture and must not synchronize.
    """

    def __init__(self, issue, launches: int, stream):
        import torch
        from numba import cuda

        self.launches, self.stream = int(launches), stream
        handle = stream.cuda_stream
        with torch.cuda.stream(stream):
            for i in range(min(2, self.launches)):
                issue(i, handle)
        stream.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with cuda.defer_cleanup(), torch.cuda.graph(self.graph, stream=stream):
            for i in range(self.launches):
                issue(i, handle)
        stream.synchronize()

    def replay_and_wait(self):
        """One replay, waited for (what pytest-benchmark times)."""
        import torch

        with torch.cuda.stream(self.stream):
            self.graph.replay()
        self.stream.synchronize()

    def measure(self, replays: int = DEFAULT_REPLAYS, warmup: int = DEFAULT_WARMUP) -> Timing:
        """Median per-launch time over ``replays`` event-timed replays after ``warmup``."""
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        with torch.cuda.stream(self.stream):
            for _ in range(warmup):
                self.graph.replay()
            for _ in range(replays):
                start.record()
                self.graph.replay()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e3 / self.launches)
        return Timing.from_samples(samples, self.launches)

    def close(self):
        self.graph = None


def eager_per_call(issue, calls: int, stream, warm: int = 5) -> float:
    """Wall-clock µs per call of ``calls`` eager ``issue(i, handle)`` calls, ended by a sync."""
    import torch

    handle = stream.cuda_stream
    with torch.cuda.stream(stream):
        for i in range(warm):
            issue(i, handle)
        stream.synchronize()
        t0 = time.perf_counter()
        for i in range(calls):
            issue(i, handle)
        stream.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def time_replays(graphs, graph_id: int, replays: int = DEFAULT_REPLAYS,
                 warmup: int = DEFAULT_WARMUP) -> Timing:
    """Event timing of ``graphs.replay(graph_id)`` (a :class:`bench.owned_graph.GemvGraphs`) on
    the graph's own stream; one replay is one "launch"."""
    from numba import cuda

    stream = cuda.external_stream(graphs.stream)
    for _ in range(warmup):
        graphs.replay(graph_id)
    graphs.synchronize(graph_id)
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    samples = []
    for _ in range(replays):
        start.record(stream)
        graphs.replay(graph_id)
        end.record(stream)
        end.synchronize()
        samples.append(cuda.event_elapsed_time(start, end) * 1e3)
    return Timing.from_samples(samples, 1)


def copy_bandwidth(nbytes: int = 1 << 30, replays: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting read + write (``2 * nbytes`` per copy)."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(replays):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / float(np.median(samples))
