"""Per-shape measurements on a GPU: every int4gemv method and every available peer.

For one shape: int4gemv's rotated random device weights (:func:`bench.device_weights.rotated_weights`,
shared with the ``dequant+mv`` peer), one fp16 input, a float64 reference. Each method is checked
(relative error of a launch into an output pre-filled with NaN), then timed by
:class:`bench.timing.GraphTimer` (a graph of ``max(copies, MIN_LAUNCHES)`` launches cycling through
the copies, median of the replays) and by :func:`bench.timing.eager_per_call`. Rows are plain dicts
(see :func:`measure_shape`); a method that raises gives a row with ``error`` and no timing.
"""

from __future__ import annotations

import gc

import numpy as np

from .device_weights import relative_error, rotated_weights, torch_reference
from .timing import MIN_LAUNCHES, GraphTimer, eager_per_call
from .workloads import weight_bytes

__all__ = ["EAGER_CALLS", "REL_ERR_OK", "ShapeSetup", "measure_shape"]

#: A relative error above this marks a row as wrong (fp16 outputs of random data are ~1e-3).
REL_ERR_OK = 1e-2
EAGER_CALLS = 100


class ShapeSetup:
    """The device state of one shape: rotated weights, input, output, reference, torch stream."""

    def __init__(self, shape, *, block_size=32, rotate_bytes, seed=0):
        import torch
        from numba import cuda

        self.shape, self.block_size = shape, block_size
        self.weights = rotated_weights(shape.N, shape.K, block_size, rotate_bytes=rotate_bytes, seed=seed)
        self.x = (np.random.default_rng(seed).standard_normal(shape.K) * 0.5).astype(np.float16)
        self.x_dev = cuda.to_device(self.x)
        self.out = cuda.device_array(shape.N, np.float16)
        self.ref = torch_reference(self.weights[0], self.x)
        self.stream = torch.cuda.Stream()
        self.nbytes = weight_bytes(shape.N, shape.K, block_size)

    def issue_for(self, method):
        import int4gemv

        weights, x, out, variant = self.weights, self.x_dev, self.out, method.variant

        def issue(i, handle):
            int4gemv.gemv(x, weights[i % len(weights)], out=out, stream=handle, variant=variant)
        return issue

    def check(self, issue):
        """``(rel_err, all_written)`` of one launch on copy 0 into an output full of NaN."""
        from numba import cuda

        self.out.copy_to_device(np.full(self.shape.N, np.nan, np.float16))
        cuda.synchronize()  # a pageable copy may still be in flight when it returns
        issue(0, self.stream.cuda_stream)
        self.stream.synchronize()
        y = self.out.copy_to_host()
        return relative_error(y, self.ref), bool(np.all(np.isfinite(y)))

    def close(self):
        import torch

        self.weights = self.x_dev = self.out = None
        gc.collect()
        torch.cuda.empty_cache()


def _timed(issue, copies, stream, replays, eager_calls):
    timer = GraphTimer(issue, max(copies, MIN_LAUNCHES), stream)
    try:
        t = timer.measure(replays)
    finally:
        timer.close()
    return t, eager_per_call(issue, eager_calls, stream)


def _row(shape, nbytes, copy_bw, t, eager_us, **extra):
    row = dict(shape=shape.label, names=list(shape.names), N=shape.N, K=shape.K, merged=shape.merged,
               per_step=shape.per_step, bytes=nbytes, **extra)
    if t is not None:
        row.update(t.as_dict(), gbs=nbytes / t.us / 1e3, pct_copy=100 * nbytes / (t.us * 1e-6) / copy_bw,
                   eager_us=eager_us)
    return row


def _int4gemv_row(setup, method, copy_bw, replays, eager_calls):
    import int4gemv

    with method.env():
        plan = int4gemv.explain(setup.x_dev, setup.weights[0], variant=method.variant)
        issue = setup.issue_for(method)
        rel_err, written = setup.check(issue)
        t, eager_us = _timed(issue, len(setup.weights), setup.stream, replays, eager_calls)
    return _row(setup.shape, setup.nbytes, copy_bw, t, eager_us, family="int4gemv", method=method.name,
                variant=method.variant, kernel=plan.kernel, cols=plan.cols, unroll=plan.unroll,
                resident=getattr(plan, "resident", None), grid=list(plan.grid), copies=len(setup.weights),
                rel_err=rel_err, all_written=written, ok=written and rel_err <= REL_ERR_OK)


def _peer_row(setup, peer, copy_bw, replays, eager_calls, rotate_bytes):
    prepared = peer.prepare(setup.shape.N, setup.shape.K, shared=setup.weights, x=setup.x, ref=setup.ref,
                            rotate_bytes=rotate_bytes)
    try:
        rel_err = prepared.check() if prepared.check else None
        t, eager_us = _timed(prepared.issue, prepared.copies, setup.stream, replays, eager_calls)
    finally:
        prepared.keep.clear()
    return _row(setup.shape, prepared.nbytes, copy_bw, t, eager_us, family="peer", method=peer.name,
                description=peer.description, copies=prepared.copies, rel_err=rel_err)


def measure_shape(shape, methods, peers, *, copy_bw, replays, rotate_bytes, eager_calls=EAGER_CALLS,
                  progress=None, seed=0) -> list:
    """Rows for every method and peer on ``shape``; speed-ups against each peer filled in."""
    rows = []
    try:
        setup = ShapeSetup(shape, rotate_bytes=rotate_bytes, seed=seed)
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: every row reports it, the run goes on
        error = f"setting up {shape.label} failed: {exc!r}"[:400]
        for m in list(methods) + list(peers):
            if progress:
                progress.step(f"{shape.label} {m.name}")
            family = "peer" if m in peers else "int4gemv"
            rows.append(_row(shape, None, copy_bw, None, None, family=family, method=m.name, error=error,
                             **({"ok": False} if family == "int4gemv" else {})))
        return rows
    try:
        for method in methods:
            if progress:
                progress.step(f"{shape.label} {method.name}")
            try:
                rows.append(_int4gemv_row(setup, method, copy_bw, replays, eager_calls))
            except Exception as exc:  # noqa: BLE001 - reported in the row and the table; the run goes on
                rows.append(_row(shape, setup.nbytes, copy_bw, None, None, family="int4gemv",
                                 method=method.name, variant=method.variant, error=repr(exc)[:400], ok=False))
        for peer in peers:
            if progress:
                progress.step(f"{shape.label} {peer.name}")
            try:
                rows.append(_peer_row(setup, peer, copy_bw, replays, eager_calls, rotate_bytes))
            except Exception as exc:  # noqa: BLE001 - a failing peer is reported, not fatal
                rows.append(_row(shape, None, copy_bw, None, None, family="peer", method=peer.name,
                                 description=peer.description, error=repr(exc)[:400]))
    finally:
        setup.close()
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
    and by :class:`bench.timing.GraphTimer`, as a cross-check of the timing method (use a shape
    much larger than L2, where rotation does not matter)."""
    import torch
    from numba import cuda

    import int4gemv

    try:
        from triton.testing import do_bench_cudagraph
    except Exception as exc:  # noqa: BLE001 - triton missing or broken: no cross-check
        return {"available": False, "reason": repr(exc)[:200]}
    setup = ShapeSetup(shape, rotate_bytes=1, seed=seed)
    try:
        w, x, out = setup.weights[0], setup.x_dev, setup.out

        def fn():
            int4gemv.gemv(x, w, out=out, stream=torch.cuda.current_stream().cuda_stream, variant="default")

        def issue(i, handle):
            int4gemv.gemv(x, w, out=out, stream=handle, variant="default")

        fn()
        torch.cuda.synchronize()
        with cuda.defer_cleanup():
            triton_ms = do_bench_cudagraph(fn, rep=100, return_mode="median")
        t, _ = _timed(issue, 1, setup.stream, 30, 10)
        return {"available": True, "shape": shape.label, "method": "default",
                "graph_timer_us": t.us, "do_bench_cudagraph_us": float(triton_ms) * 1e3}
    finally:
        setup.close()
