"""``compare(shapes, tunings, peers)``: int4gemv tunings and peers timed over several shapes.

Each shape gets a random weight (:func:`~int4gemv.benchmark.weights.random_weight`, seeded) and one
:class:`~int4gemv.benchmark.gemv_timing.GemvBench`; every tuning and peer is timed on it. The result
is a :class:`~int4gemv.benchmark.table.Comparison` (print it, ``as_dicts()``, ``plot()``).
"""

from __future__ import annotations

import re

from .gemv_timing import EAGER_CALLS, GemvBench
from .peers import check_peers
from .selection import check_tunings
from .table import Comparison
from .timing import DEFAULT_REPLAYS
from .weights import ROTATE_BYTES, random_weight

__all__ = ["DEFAULT_TUNINGS", "compare", "resolve_shapes"]

DEFAULT_TUNINGS = ("default", "single_warp", "auto")

_NXK = re.compile(r"\d+x\d+")


def resolve_shapes(shapes, workload=None) -> list:
    """``[(label, N, K)]`` for ``shapes``: ``(N, K)`` pairs, ``"NxK"`` strings, or projection or
    merged-group names of ``workload`` (default: the installed decode workload). ``ValueError``
    for an unknown name (listing the workload's names) or a malformed shape."""
    from .workloads import bench_shapes, load_workload, select_shapes

    out, names = [], []
    if isinstance(shapes, str) or (isinstance(shapes, tuple) and len(shapes) == 2
                                   and all(isinstance(v, int) for v in shapes)):
        shapes = [shapes]
    for s in shapes:
        if isinstance(s, str) and not _NXK.fullmatch(s.lower()):
            names.append(s)
            continue
        try:
            N, K = (int(v) for v in (s.lower().split("x") if isinstance(s, str) else s))
        except (TypeError, ValueError):
            raise ValueError(f"shape {s!r}: expected an (N, K) pair of ints, an 'NxK' string or a "
                             f"workload name") from None
        if N < 1 or K < 8 or K % 8:
            raise ValueError(f"shape {s!r}: N must be >= 1 and K a positive multiple of 8")
        out.append((f"{N}x{K}", N, K))
    if names:
        try:
            selected = select_shapes(bench_shapes(load_workload(workload)), names)
        except ValueError as exc:
            raise ValueError(f"{exc}; or any (N, K) pair or 'NxK' string") from None
        for shape in selected:
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

    Every argument is checked before anything runs: an unknown shape name, tuning or peer is a
    ``ValueError`` listing what is accepted.
    """
    peers = check_peers(peers)       # every argument checked before anything runs
    tunings = check_tunings(tunings)
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


