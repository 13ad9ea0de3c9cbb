"""Rows of a ``python -m bench.targets`` results file: the schema's fields and the error measure."""

from __future__ import annotations

import numpy as np

__all__ = ["MIN_LAUNCHES", "check_and_time", "norm_error", "result_row"]

#: Launches per timed graph at least (amortizes the graph launch itself).
MIN_LAUNCHES = 20


def norm_error(y, ref) -> float:
    """``‖y − ref‖ / ‖ref‖`` in float64; ``inf`` if ``y`` has a non-finite entry (unwritten)."""
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if not np.all(np.isfinite(y)):
        return float("inf")
    return float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-300))


def result_row(kind, variant, label, N, K, M, bs, zp, dtype, **extra) -> dict:
    """A row with every schema field (``None`` until measured) and ``extra`` fields."""
    row = dict(kind=kind, variant=variant, shape=label, N=N, K=K, M=M, bs=bs, zp=zp, dtype=dtype,
               us=None, floor_us=None, pct_floor=None, tinygemm_us=None, error=None)
    row.update(extra)
    return row


def check_and_time(row, bound, kernel, out, ref, copies, timer, replays, floor, nbytes, pct):
    """A probe's measurement into ``row``: the output poisoned, one launch checked against ``ref``
    (norm-wise, ``ok`` at <= 1e-2), then ``bound[i % copies]`` (launches over the rotated weight
    copies) timed in graph replays; the kernel's registers and local memory. Returns the timing."""
    import torch

    out.fill_(float("nan"))
    torch.cuda.synchronize()
    bound[0].launch(0)
    torch.cuda.synchronize()
    err = norm_error(out.double().cpu().numpy(), ref)
    t = timer(lambda i, h: bound[i % copies].launch(h), max(copies, MIN_LAUNCHES), replays)
    first = lambda v: next(iter(v.values())) if isinstance(v, dict) else v  # noqa: E731
    row.update(us=t.us, p10_us=t.p10_us, p90_us=t.p90_us, pct_floor=100 * floor / t.us, error=err,
               ok=err <= 1e-2, pct_copy=pct(nbytes, t.us),
               regs=first(kernel.get_regs_per_thread()), local=first(kernel.get_local_mem_per_thread()))
    return t
