"""Rows of a ``python -m bench.targets`` results file: the schema's fields and the error measure."""

from __future__ import annotations

import numpy as np

__all__ = ["MIN_LAUNCHES", "norm_error", "result_row"]

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
