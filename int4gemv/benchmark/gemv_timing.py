"""Timing one weight: :func:`time_gemv` (the one-call API) and :class:`GemvBench` under it.

:class:`GemvBench` holds the device state of one weight: copies of it rotated through
:data:`~int4gemv.benchmark.weights.ROTATE_BYTES`, one fp16 input ``[M, K]``, an output. For each
tuning it checks one launch (output poisoned with NaN first) against the float64 reference, captures
``max(copies, MIN_LAUNCHES)`` launches cycling through the copies into one graph owned by
``lifecycle.numba_provider``, times its replays (:func:`~int4gemv.benchmark.timing.measure_replays`)
and the same calls issued eagerly (:func:`~int4gemv.benchmark.timing.time_eager`). Peers
(:mod:`int4gemv.benchmark.peers`) are timed the same way on the same input. The floor (the
``stream`` peer, :mod:`int4gemv.benchmark.stream`: a read-only stream of the same rotated weight
bytes) is timed once per bench, and every int4gemv row carries ``floor_us`` and ``pct_floor``.

On Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the check runs (keep shapes tiny: each
simulated launch runs every GPU thread in Python) and nothing is timed: the result says
``simulated`` and its times are ``None``.
"""

from __future__ import annotations

import warnings

import numpy as np

from .peers import check_peers
from .selection import check_tunings, gemv_options, tuning_label
from .table import Comparison
from .timing_row import GemvTiming
from .timing import DEFAULT_REPLAYS, MIN_LAUNCHES, copy_bandwidth, measure_replays, time_eager
from .weights import REL_ERR_OK, ROTATE_BYTES, reference, relative_error, rotated_copies

__all__ = ["EAGER_CALLS", "GemvBench", "SIM_WARN_ELEMENTS", "simulated", "time_gemv"]

EAGER_CALLS = 100
#: On the simulator, weights above this many elements get a warning (they take minutes).
SIM_WARN_ELEMENTS = 1 << 16


def simulated() -> bool:
    """Whether Numba runs kernels on its CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


class GemvBench:
    """Device state for timing weight ``w`` with ``M`` input rows; a context manager.

    Args:
        w: a :class:`~int4gemv.QuantizedWeight` with host arrays (copies are made from them).
        M: input rows (1 for a decode GEMV).
        rotate_bytes: bytes of weight copies a timed graph cycles through (GPU only).
        copy_bw: device-to-device copy bandwidth in bytes/s (default: measured once per process).
        seed: for the random input.
    """

    def __init__(self, w, M: int = 1, *, rotate_bytes: int = ROTATE_BYTES, copy_bw=None, seed: int = 0):
        from int4gemv.backend import require_gpu

        if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < 1:
            raise ValueError(f"M must be a positive int; got {M!r}")
        require_gpu("int4gemv.benchmark")
        from numba import cuda

        self.w, self.M, self.simulated = w, int(M), simulated()
        if self.simulated and w.N * w.K > SIM_WARN_ELEMENTS:
            warnings.warn(f"simulator: a {w.N}x{w.K} weight runs every GPU thread in Python and takes "
                          f"minutes; use tiny shapes (N*K <= {SIM_WARN_ELEMENTS})", RuntimeWarning, stacklevel=3)
        self.weights = [w.to_device()] if self.simulated else rotated_copies(w, rotate_bytes)
        self.copy_bw = None if self.simulated else (copy_bw or copy_bandwidth())
        self.x = (np.random.default_rng(seed).standard_normal((self.M, w.K)) * 0.5).astype(np.float16)
        self.x_dev = cuda.to_device(self.x)
        self.out = cuda.device_array((self.M, w.N), np.float16)
        self._ref = self._floor = None
        self._provider = self._torch_stream = None
        self._graph_ids = 0

    # -- pieces ------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        return self.w.nbytes

    @property
    def ref(self) -> np.ndarray:
        """The float64 reference ``[M, N]`` (computed once)."""
        if self._ref is None:
            self._ref = reference(self.x, self.w)
        return self._ref

    def _row(self, method, family, nbytes, **extra) -> GemvTiming:
        w = self.w
        return GemvTiming(method=method, family=family, N=w.N, K=w.K, M=self.M, block_size=w.block_size,
                          bytes=nbytes, simulated=self.simulated,
                          copy_gbs=None if self.copy_bw is None else self.copy_bw / 1e9, **extra)

    def _fill(self, row, timing, eager) -> GemvTiming:
        row.us, row.p10_us, row.p90_us = timing.us, timing.p10_us, timing.p90_us
        row.replays, row.launches = timing.replays, timing.launches
        row.gbs = row.bytes / timing.us / 1e3
        row.pct_copy = 100 * row.bytes / (timing.us * 1e-6) / self.copy_bw
        row.eager_us = None if eager is None else eager.complete_us
        return row

    def launcher(self, tuning):
        """``issue(i, stream)``: one ``int4gemv.gemv`` of copy ``i`` (mod copies) with ``tuning``."""
        import int4gemv

        options = gemv_options(tuning)
        weights, x, out = self.weights, self.x_dev, self.out

        def issue(i, stream):
            int4gemv.gemv(x, weights[i % len(weights)], out=out, stream=stream, **options)
        return issue

    def check(self, issue) -> tuple:
        """``(rel_err, all_written)`` of one launch on copy 0 into an output full of NaN."""
        from numba import cuda

        self.out.copy_to_device(np.full((self.M, self.w.N), np.nan, np.float16))
        cuda.synchronize()
        issue(0, 0)
        cuda.synchronize()
        y = self.out.copy_to_host()
        return relative_error(y, self.ref), bool(np.all(np.isfinite(y)))

    def _owned_graph(self, issue, launches):
        import lifecycle

        if self._provider is None:
            self._provider = lifecycle.numba_provider(0)
        self._graph_ids += 1
        graph_id, provider = self._graph_ids, self._provider
        provider.record(graph_id, lambda cap: [issue(i, cap.stream) for i in range(launches)])
        return graph_id

    # -- measurements ----------------------------------------------------------------------------
    def time(self, tuning=None, *, replays: int = DEFAULT_REPLAYS, eager_calls: int = EAGER_CALLS,
             label: str | None = None) -> GemvTiming:
        """Check and time ``int4gemv.gemv`` with ``tuning`` (see :mod:`~int4gemv.benchmark.selection`).
        An unknown tuning raises ``ValueError`` (``TypeError`` for a wrong type) before anything
        runs; a failure after that (launch error) gives a row with ``error`` and ``ok=False``."""
        import int4gemv

        method = label or tuning_label(tuning)
        gemv_options(tuning)  # an unknown tuning is the caller's ValueError/TypeError, not a row
        try:
            plan = int4gemv.explain(self.x_dev, self.w, **gemv_options(tuning, launch=False))
            issue = self.launcher(tuning)
            rel_err, written = self.check(issue)
        except Exception as exc:  # noqa: BLE001 - reported in the row, the run goes on
            return self._row(method, "int4gemv", self.nbytes, ok=False, error=repr(exc)[:400])
        row = self._row(method, "int4gemv", self.nbytes, kernel=plan.kernel, cols=plan.cols, unroll=plan.unroll,
                        grid=list(plan.grid), copies=len(self.weights), rel_err=rel_err,
                        ok=written and rel_err <= REL_ERR_OK)
        if self.simulated:
            return row
        launches = max(len(self.weights), MIN_LAUNCHES)
        graph_id = self._owned_graph(issue, launches)
        try:
            stream = self._provider.stream
            timing = measure_replays(lambda: self._provider.replay(graph_id), stream, launches=launches,
                                     replays=replays)
        finally:
            self._provider.release(graph_id)
        counter = iter(range(1 << 62))
        eager = time_eager(lambda: issue(next(counter), stream), lambda: self._sync(stream), calls=eager_calls)
        return self._with_floor(self._fill(row, timing, eager))

    @staticmethod
    def _sync(stream):
        from numba import cuda

        cuda.external_stream(stream).synchronize()

    def time_peer(self, peer, *, replays: int = DEFAULT_REPLAYS, eager_calls: int = EAGER_CALLS,
                  rotate_bytes: int = ROTATE_BYTES) -> GemvTiming:
        """Time a peer (a name in :data:`~int4gemv.benchmark.peers.PEERS` or a descriptor) on this
        input. Unavailable peers and failures give a row with ``error``."""
        from .peers import PEERS, require_torch, torch_graph

        peer = PEERS[check_peers(peer)[0]] if isinstance(peer, str) else peer
        row = self._row(peer.name, "peer", None, description=peer.description)
        ok, why = peer.available()   # first: a missing torch says what to install, GPU or not
        if not ok:
            row.error = f"unavailable: {why}"
            return row
        if self.simulated:
            row.error = "not run on the simulator (peers are timed on a GPU)"
            return row
        try:
            torch = require_torch()
            if self._torch_stream is None:
                self._torch_stream = torch.cuda.Stream()
            stream = self._torch_stream
            prepared = peer.prepare(self.w.N, self.w.K, x=self.x, shared=self.weights, rotate_bytes=rotate_bytes)
            try:
                row.bytes, row.copies = prepared.nbytes, prepared.copies
                row.rel_err = prepared.check() if prepared.check else None
                launches = max(prepared.copies, MIN_LAUNCHES)
                replay, graph = torch_graph(prepared.issue, launches, stream)
                timing = measure_replays(replay, stream.cuda_stream, launches=launches, replays=replays)
                del graph
                counter = iter(range(1 << 62))
                with torch.cuda.stream(stream):
                    eager = time_eager(lambda: prepared.issue(next(counter)), stream.synchronize, calls=eager_calls)
            finally:
                prepared.keep.clear()
        except Exception as exc:  # noqa: BLE001 - a failing peer is reported, not fatal
            row.error = repr(exc)[:400]
            return row
        return self._fill(row, timing, eager)

    def graph_timer(self, issue, launches: int, replays: int):
        """:class:`~int4gemv.benchmark.timing.Timing` of ``issue(i, stream)`` for ``i < launches``
        captured into one lifecycle-owned graph (GPU only)."""
        graph_id = self._owned_graph(issue, launches)
        try:
            return measure_replays(lambda: self._provider.replay(graph_id), self._provider.stream,
                                   launches=launches, replays=replays)
        finally:
            self._provider.release(graph_id)

    def floor(self, *, replays: int = DEFAULT_REPLAYS) -> GemvTiming:
        """The ``stream`` peer on this bench's rotated weights (:mod:`~int4gemv.benchmark.stream`):
        checked (every byte read once), and on the GPU timed with the configuration
        :func:`~int4gemv.benchmark.stream.choose` picks. Measured once per bench."""
        if self._floor is not None:
            return self._floor
        from numba import cuda

        from .stream import SIM_CONFIG, StreamPeer, choose

        row = self._row("stream", "floor", self.nbytes, description=StreamPeer.description,
                        copies=len(self.weights))
        try:
            if self.simulated:
                peer = StreamPeer(self.weights, SIM_CONFIG, 1)
            else:
                dev = cuda.get_current_device()
                sms = dev.MULTIPROCESSOR_COUNT
                config = choose(self.weights, self.graph_timer, device_key=(dev.id, dev.name), multiprocessors=sms)
                peer = StreamPeer(self.weights, config, sms)
            row.ok = peer.check()
            row.kernel, row.grid = f"stream {peer.config}", [peer.grid, 1, 1]
            if not row.ok:
                row.error = "the stream kernel's checksum differs from the weight's bytes"
            elif not self.simulated:
                self._fill(row, peer.time(self.graph_timer, replays=replays), None)
        except Exception as exc:  # noqa: BLE001 - reported in the row; rows then carry no floor
            row.ok, row.error = False, repr(exc)[:400]
        self._floor = row
        return row

    def _with_floor(self, row: GemvTiming) -> GemvTiming:
        floor = self.floor()
        if row.us and floor.us:
            row.floor_us, row.pct_floor = floor.us, 100 * floor.us / row.us
        return row

    def close(self) -> None:
        """Release the graph provider and the device arrays."""
        if self._provider is not None:
            self._provider.close()
            self._provider = None
        self.weights = self.x_dev = self.out = None
        import gc

        gc.collect()

    def __enter__(self) -> GemvBench:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


def time_gemv(w, M: int = 1, tuning=None, *, peers=(), replays: int = DEFAULT_REPLAYS,
              eager_calls: int = EAGER_CALLS, rotate_bytes: int = ROTATE_BYTES, seed: int = 0):
    """Check and time ``int4gemv.gemv`` on weight ``w`` with ``M`` input rows and ``tuning``.

    ``tuning``: ``None`` (the environment decides), ``"default"``, ``"single_warp"``, ``"auto"``
    (optionally ``"+pdl"``/``"+pdl+l2"``), or an object with ``.variant/.pdl/.prefetch`` such as
    ``int4gemv.Tuning``. Returns a :class:`GemvTiming` (print it, or read ``.us``, ``.gbs``,
    ``.pct_copy``); with ``peers`` (names from :data:`~int4gemv.benchmark.peers.PEERS`), a
    :class:`~int4gemv.benchmark.table.Comparison` (a printable table): int4gemv first, then
    each peer on the same input. On the simulator nothing is timed and the
    result says so.

    Raises ``ValueError`` for an unknown tuning or peer (listing the accepted ones) before
    anything runs, and :class:`int4gemv.NoGPUError` without a GPU or the simulator.

    Example (GPU)::

        from int4gemv.benchmark import time_gemv, random_weight
        print(time_gemv(random_weight(2048, 2048), tuning="auto"))
    """
    peers = check_peers(peers)
    check_tunings([tuning])
    with GemvBench(w, M, rotate_bytes=rotate_bytes, seed=seed) as bench:
        result = bench.time(tuning, replays=replays, eager_calls=eager_calls)
        if not peers:
            return result
        rows = [result] + [bench.time_peer(p, replays=replays, eager_calls=eager_calls,
                                           rotate_bytes=rotate_bytes) for p in peers]
        return Comparison(rows, {(w.N, w.K): f"{w.N}x{w.K}"})
