"""The per-shape suite: every int4gemv method and every available peer on one shape.

Each shape gets a random weight (:func:`int4gemv.benchmark.weights.random_weight`) and one
:class:`int4gemv.benchmark.GemvBench` (rotated copies, input, float64 reference); every method and
peer is checked and timed on it. Rows are the library's :class:`~int4gemv.benchmark.GemvTiming`
as dicts, with the workload's shape label, names and per-step count added.
"""

from __future__ import annotations

from int4gemv.benchmark.gemv_timing import EAGER_CALLS, GemvBench
from int4gemv.benchmark.weights import random_weight

__all__ = ["add_speedups", "measure_shape", "triton_anchor"]


def _row(shape, timing) -> dict:
    row = timing.as_dict()
    row.update(shape=shape.label, names=list(shape.names), merged=shape.merged, per_step=shape.per_step)
    return row


def measure_shape(shape, methods, peers, *, replays, rotate_bytes, copy_bw=None, eager_calls=EAGER_CALLS,
                  block_size=32, progress=None, seed=0) -> list:
    """Rows for every method and peer on ``shape``; speed-ups against each peer filled in.
    ``peers``: peer descriptors (or names). A set-up failure (e.g. out of memory) is reported in
    every row of the shape and the run goes on."""
    labels = [m.name for m in methods] + [getattr(p, "name", p) for p in peers]
    try:
        bench = GemvBench(random_weight(shape.N, shape.K, block_size, rng=seed), 1,
                          rotate_bytes=rotate_bytes, copy_bw=copy_bw, seed=seed)
    except Exception as exc:  # noqa: BLE001 - every row reports it, the run goes on
        error = f"setting up {shape.label} failed: {exc!r}"[:400]
        rows = []
        for i, label in enumerate(labels):
            if progress:
                progress.step(f"{shape.label} {label}")
            family = "int4gemv" if i < len(methods) else "peer"
            rows.append(dict(shape=shape.label, names=list(shape.names), N=shape.N, K=shape.K, merged=shape.merged,
                             per_step=shape.per_step, family=family, method=label, error=error,
                             **({"ok": False} if family == "int4gemv" else {})))
        return rows
    rows = []
    with bench:
        for method in methods:
            if progress:
                progress.step(f"{shape.label} {method.name}")
            t = bench.time(method, replays=replays, eager_calls=eager_calls)
            rows.append(dict(_row(shape, t), variant=method.variant))
        for peer in peers:
            if progress:
                progress.step(f"{shape.label} {getattr(peer, 'name', peer)}")
            rows.append(_row(shape, bench.time_peer(peer, replays=replays, eager_calls=eager_calls,
                                                    rotate_bytes=rotate_bytes)))
    add_speedups(rows)
    return rows


def add_speedups(rows) -> None:
    """For each int4gemv row with a time: ``speedup[peer] = peer µs / row µs`` for each peer timed
    on the same shape."""
    peers: dict = {}
    for r in rows:
        if r["family"] == "peer" and r.get("us"):
            peers.setdefault(r["shape"], {})[r["method"]] = r["us"]
    for r in rows:
        if r["family"] == "int4gemv" and r.get("us"):
            r["speedup"] = {name: us / r["us"] for name, us in peers.get(r["shape"], {}).items()}


def triton_anchor(shape, *, seed=0) -> dict:
    """The default variant on one un-rotated weight timed by ``triton.testing.do_bench_cudagraph``
    and by the library's replay timer, as a cross-check of the timing method (use a shape much
    larger than L2, where rotation does not matter)."""
    try:
        import torch
        from triton.testing import do_bench_cudagraph
    except Exception as exc:  # noqa: BLE001 - triton or torch missing or broken: no cross-check
        return {"available": False, "reason": repr(exc)[:200]}
    from numba import cuda

    with GemvBench(random_weight(shape.N, shape.K, rng=seed), 1, rotate_bytes=1, seed=seed) as bench:
        issue = bench.launcher("default")
        mine = bench.time("default", replays=30, eager_calls=10)

        def fn():
            issue(0, torch.cuda.current_stream().cuda_stream)

        fn()
        torch.cuda.synchronize()
        with cuda.defer_cleanup():
            triton_ms = do_bench_cudagraph(fn, rep=100, return_mode="median")
    return {"available": True, "shape": shape.label, "method": "default",
            "graph_timer_us": mine.us, "do_bench_cudagraph_us": float(triton_ms) * 1e3}
