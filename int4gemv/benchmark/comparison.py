"""``compare(shapes, tunings, peers)``: int4gemv tunings and peers timed over several shapes.

Each shape gets a random weight (:func:`~int4gemv.benchmark.weights.random_weight`, seeded) and one
:class:`~int4gemv.benchmark.gemv_timing.GemvBench`; every tuning and peer is timed on it. The result
is a :class:`~int4gemv.benchmark.table.Comparison` (print it, ``as_dicts()``, ``plot()``).
"""

from __future__ import annotations

from .gemv_timing import EAGER_CALLS, GemvBench
from .table import Comparison
from .timing import DEFAULT_REPLAYS
from .weights import ROTATE_BYTES, random_weight

__all__ = ["DEFAULT_TUNINGS", "compare", "resolve_shapes"]

DEFAULT_TUNINGS = ("default", "single_warp", "auto")


def resolve_shapes(shapes, workload=None) -> list:
    """``[(label, N, K)]`` for ``shapes``: ``(N, K)`` pairs, ``"NxK"`` strings, or projection or
    merged-group names of ``workload`` (default: the installed decode workload)."""
    from .workloads import bench_shapes, load_workload, select_shapes

    out, names = [], []
    for s in shapes:
        if isinstance(s, str) and "x" not in s:
            names.append(s)
            continue
        if isinstance(s, str):
            N, K = (int(v) for v in s.lower().split("x"))
        else:
            N, K = (int(v) for v in s)
        out.append((f"{N}x{K}", N, K))
    if names:
        for shape in select_shapes(bench_shapes(load_workload(workload)), names):
            out.append((shape.label, shape.N, shape.K))
    return out


def compare(shapes, tunings=DEFAULT_TUNINGS, peers=(), *, M: int = 1, block_size: int = 32,
            replays: int = DEFAULT_REPLAYS, eager_calls: int = EAGER_CALLS,
            rotate_bytes: int = ROTATE_BYTES, seed: int = 0, workload=None) -> Comparison:
    """Time every tuning and peer on a random weight of each shape; returns a :class:`Comparison`.

    ``shapes``: ``(N, K)`` pairs, ``"NxK"`` strings or names from the decode workload
    (``"q_proj"``, ``"lm_head"``, ``"qkv_proj"`` ...). ``tunings``: as for
    :func:`~int4gemv.benchmark.time_gemv`. ``peers``: names from
    :data:`~int4gemv.benchmark.peers.PEERS` (they need ``int4gemv[peers]``). On the simulator
    use tiny shapes; nothing is timed there and the table says so.
    """
    resolved = resolve_shapes(shapes, workload)
    rows, labels = [], {}
    for i, (label, N, K) in enumerate(resolved):
        labels[(N, K)] = label
        w = random_weight(N, K, block_size, rng=seed + i)
        with GemvBench(w, M, rotate_bytes=rotate_bytes, seed=seed + i) as bench:
            rows += [bench.time(t, replays=replays, eager_calls=eager_calls) for t in tunings]
            rows += [bench.time_peer(p, replays=replays, eager_calls=eager_calls, rotate_bytes=rotate_bytes)
                     for p in peers]
    return Comparison(rows, labels)


