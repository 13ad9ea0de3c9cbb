"""Timing on the GPU: event-timed graph replays, eager calls from Python, copy bandwidth.

* :func:`measure_replays`: the one graph-replay timer. ``replay()`` enqueues one replay of a graph
  of ``launches`` launches on ``stream``; the timed replays are queued back to back behind an
  untimed one, with a CUDA event between each two, so an event is recorded by a GPU that is still
  busy and a sample holds one replay's GPU time (replay time / ``launches``), not the time the host
  took to queue it: with an event recorded on an idle GPU before each replay (the manner of
  ``triton.testing.do_bench_cudagraph``), the host's graph launch, slower when other processes
  load the CPU, lay inside the sample. Callers rotate their launches over copies of the weights
  totalling more than the L2 cache (see :mod:`int4gemv.benchmark.weights`).
* :func:`time_eager`: the one eager timer: wall time per call of ``calls`` calls issued back to
  back from Python, then to completion after ``sync()``.
* :func:`copy_bandwidth`: device-to-device copy bandwidth (read + write bytes), the reference
  every kernel's bandwidth is reported against; measured once per device and process.

Numba's CUDA driver is imported on first use, never at import time; torch is not needed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..backend import require_gpu

__all__ = [
    "DEFAULT_REPLAYS",
    "DEFAULT_WARMUP",
    "DEFAULT_WARMUP_S",
    "MIN_LAUNCHES",
    "EagerTiming",
    "Timing",
    "copy_bandwidth",
    "measure_replays",
    "time_eager",
]

DEFAULT_REPLAYS = 30   # timed replays (the median is reported); at least 20 in the bench
DEFAULT_WARMUP = 3     # untimed replays first, at least
#: Seconds of untimed replays first, at least: a GPU left idle (while the next kernel compiles)
#: drops its clocks, and 3 replays did not bring them back: an H100 timed the first 20 replays
#: of lm_head after a compile at p10 63.2 / median 71.0 µs, and 1500 replays of the same graph
#: with no idle gap at 63.5 / 63.7 (bench/NOTES.md, session 16). Same as :data:`COPY_WARMUP_S`.
DEFAULT_WARMUP_S = 0.25
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

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class EagerTiming:
    """Eager calls from Python: µs per call to issue them, and to their completion (medians)."""

    issue_us: float
    complete_us: float
    calls: int
    runs: int

    def as_dict(self) -> dict:
        return asdict(self)


def measure_replays(replay, stream, *, launches: int = 1, replays: int = DEFAULT_REPLAYS,
                    warmup: int = DEFAULT_WARMUP, warmup_s: float = DEFAULT_WARMUP_S) -> Timing:
    """Event timing of ``replay()`` on ``stream`` (a raw ``CUstream`` int or an object with
    ``.cuda_stream``); ``launches`` kernel launches per replay. Median of ``replays`` after
    untimed replays: at least ``warmup`` (and at least one) of them, and until the GPU has run
    them for ``warmup_s`` seconds (each but the last waited for, so that the time is the GPU's;
    the timed replays are queued behind the last, see the module's docstring)."""
    from numba import cuda

    from ..device import stream_handle

    if replays < 1 or launches < 1:
        raise ValueError(f"replays and launches must be >= 1; got {replays}, {launches}")
    if warmup < 0 or not warmup_s >= 0:
        raise ValueError(f"warmup and warmup_s must be >= 0; got {warmup}, {warmup_s}")
    require_gpu("int4gemv.benchmark.measure_replays")
    handle = stream_handle(stream)
    s = cuda.external_stream(handle) if handle else cuda.default_stream()
    done, warm_until = 0, time.perf_counter() + warmup_s
    while True:
        replay()
        done += 1
        if done >= warmup and time.perf_counter() >= warm_until:
            break       # the last untimed replay still runs while the timed ones are queued
        s.synchronize()
    events = [cuda.event(timing=True) for _ in range(replays + 1)]
    events[0].record(s)
    for event in events[1:]:
        replay()
        event.record(s)
    events[-1].synchronize()
    samples = [cuda.event_elapsed_time(a, b) * 1e3 / launches for a, b in zip(events, events[1:])]
    return Timing.from_samples(samples, launches)


def time_eager(call, sync, *, calls: int = 100, runs: int = 5) -> EagerTiming:
    """``call()`` issued ``calls`` times back to back, ``runs`` times (after one untimed run);
    ``sync()`` waits for the work. Keep ``calls`` below what the launch queue holds (~1000), so
    the issue time is the cost in Python and the driver."""
    if calls < 1 or runs < 1:
        raise ValueError(f"calls and runs must be >= 1; got {calls}, {runs}")
    issue, complete = [], []
    for _ in range(runs + 1):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        issue.append((t1 - t0) / calls * 1e6)
        complete.append((t2 - t0) / calls * 1e6)
    return EagerTiming(statistics.median(issue[1:]), statistics.median(complete[1:]), calls, runs)


_COPY_BANDWIDTH: dict = {}

#: Seconds of back-to-back copies before each copy method is timed.
COPY_WARMUP_S = 0.25


def _median_seconds(copy, stream, replays: int) -> float:
    """Median of ``replays`` event-timed ``copy()`` calls on the Numba ``stream``, after
    :data:`COPY_WARMUP_S` seconds of copies."""
    warm_until = time.perf_counter() + COPY_WARMUP_S
    while time.perf_counter() < warm_until:
        for _ in range(8):
            copy()
        stream.synchronize()
    return measure_replays(copy, stream, replays=replays, warmup=0, warmup_s=0).us * 1e-6


def _torch_copy_seconds(device_id: int, nbytes: int, replays: int):
    """Median seconds of torch's ``copy_`` of ``nbytes`` on device ``device_id`` (three warm-up
    copies), or ``None`` without torch or CUDA in torch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    with torch.cuda.device(device_id):
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
    return float(np.median(samples))


def copy_bandwidth(nbytes: int = 1 << 30, replays: int = 20, *, remeasure: bool = False) -> float:
    """Device-to-device copy bandwidth of the current device in bytes/s, counting read + write
    (``2 * nbytes`` per copy): the fastest of the driver's memcpy, a Numba streaming copy kernel
    and, where torch has CUDA, torch's ``copy_``; each the median of ``replays`` event-timed
    copies after warm-up. (On an H200 the memcpy read 2.8-3.5 TB/s, the Numba kernel 3.65 and
    torch 4.17-4.20 in one process; bench/NOTES.md.) ``nbytes`` is rounded down to whole 8-byte
    words. Measured once per device and process unless ``remeasure``. Needs a GPU (the
    simulator has no timing events)."""
    require_gpu("int4gemv.benchmark.copy_bandwidth")
    from numba import cuda

    from ..kernels.copy import copy_words

    device = cuda.get_current_device()
    key = device.id
    if key in _COPY_BANDWIDTH and not remeasure:
        return _COPY_BANDWIDTH[key]
    words = max(1, nbytes // 8)
    src = cuda.to_device(np.frombuffer(np.random.default_rng(0).bytes(8 * words), np.uint64))
    dst = cuda.device_array_like(src)
    stream = cuda.stream()
    kernel = copy_words[8 * device.MULTIPROCESSOR_COUNT, 256, stream]
    streamed = _median_seconds(lambda: kernel(dst, src), stream, replays)   # first: dst is unwritten
    if not all(np.array_equal(dst[s].copy_to_host(stream=stream), src[s].copy_to_host(stream=stream))
               for s in (slice(0, 4), slice(-4, None))):
        raise RuntimeError("copy_bandwidth: the copy kernel did not copy its buffer")
    memcpy = _median_seconds(lambda: dst.copy_to_device(src, stream=stream), stream, replays)
    del src, dst
    seconds = [memcpy, streamed, _torch_copy_seconds(key, 8 * words, replays)]
    _COPY_BANDWIDTH[key] = bw = 2 * 8 * words / min(t for t in seconds if t is not None)
    return bw
