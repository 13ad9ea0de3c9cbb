"""A table of :class:`~int4gemv.benchmark.timing_row.GemvTiming` rows: text, dicts and a chart.

:class:`Comparison` is what :func:`~int4gemv.benchmark.compare` (and ``time_gemv(..., peers=...)``)
return: it prints as a table, gives its rows as dicts (for pandas: ``DataFrame(c.as_dicts())``) and
draws a bandwidth chart with :meth:`Comparison.plot` (matplotlib, imported on use).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Comparison", "format_rows"]

_DASH = "—"


def _num(value, fmt):
    if value is None or (isinstance(value, float) and not math.isfinite(value) and fmt[-1] != "e"):
        return _DASH
    return format(value, fmt)


def format_rows(rows, shapes=None) -> str:
    """A text table of :class:`GemvTiming` rows: µs, GB/s, % of copy, % of floor (the ``stream``
    peer's time for the same bytes / the row's), eager µs, error and, for int4gemv rows, the
    speed-up over each peer timed on the same shape."""
    peers = list(dict.fromkeys(r.method for r in rows if r.family == "peer" and r.us))
    speed = {}
    for r in rows:
        if r.family == "int4gemv" and r.us:
            speed[id(r)] = {p.method: p.us / r.us for p in rows
                            if p.family == "peer" and p.us and (p.N, p.K, p.M) == (r.N, r.K, r.M)}
    head = (f"{'shape':16} {'M':>2} {'method':16} {'µs':>8} {'GB/s':>7} {'%copy':>6} {'%floor':>6} {'eager µs':>9} {'rel err':>8} "
            + " ".join(f"{'x ' + p:>12}" for p in peers))
    lines = [head.rstrip(), "-" * len(head.rstrip())]
    labels = shapes or {}
    for r in rows:
        shape = labels.get((r.N, r.K), f"{r.N}x{r.K}")
        line = (f"{shape[:16]:16} {r.M:>2} {r.method[:16]:16} {_num(r.us, '8.2f'):>8} {_num(r.gbs, '7.0f'):>7} "
                f"{_num(r.pct_copy, '6.1f'):>6} {_num(r.pct_floor, '6.1f'):>6} {_num(r.eager_us, '9.1f'):>9} {_num(r.rel_err, '8.1e'):>8} "
                + " ".join(f"{_num(speed.get(id(r), {}).get(p), '12.2f'):>12}" for p in peers))
        if r.error:
            line += f"  {r.error[:70]}"
        elif r.ok is False:
            line += "  WRONG"
        lines.append(line.rstrip())
    if any(r.simulated for r in rows):
        lines.append("simulated (Numba CUDA simulator, NUMBA_ENABLE_CUDASIM=1): results checked, nothing timed")
    elif rows and rows[0].copy_gbs:
        lines.append(f"% copy: against the device-to-device copy bandwidth, {rows[0].copy_gbs:.0f} GB/s")
    return "\n".join(lines)


@dataclass
class Comparison:
    """The rows of :func:`compare` (``rows``: :class:`GemvTiming`) with their shape labels."""

    rows: list
    labels: dict

    def __str__(self) -> str:
        return format_rows(self.rows, self.labels)

    def as_dicts(self) -> list:
        """Each row as a plain dict (JSON- and pandas-ready), with its ``shape`` label."""
        return [dict(r.as_dict(), shape=self.labels.get((r.N, r.K), f"{r.N}x{r.K}")) for r in self.rows]

    def plot(self, ax=None):
        """Bars of GB/s per shape and method, with the copy bandwidth as a line; returns the
        matplotlib Figure (``None`` when nothing was timed, e.g. on the simulator)."""
        timed = [r for r in self.rows if r.gbs]
        if not timed:
            return None
        if ax is None:
            from matplotlib.figure import Figure

            fig = Figure(figsize=(9, 4), layout="constrained")
            ax = fig.subplots()
        else:
            fig = ax.figure
        shapes = list(dict.fromkeys((r.N, r.K) for r in timed))
        methods = list(dict.fromkeys(r.method for r in timed))
        width = 0.8 / len(methods)
        for j, method in enumerate(methods):
            values = [next((r.gbs for r in timed if (r.N, r.K) == s and r.method == method), 0) for s in shapes]
            ax.bar([i + j * width for i in range(len(shapes))], values, width, label=method)
        copy = timed[0].copy_gbs
        if copy:
            ax.axhline(copy, color="black", linestyle=":", label=f"D2D copy {copy:.0f} GB/s")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))],
                      [self.labels.get(s, f"{s[0]}x{s[1]}") for s in shapes], fontsize=8)
        ax.set_ylabel("GB/s (weight bytes / time)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, axis="y")
        return fig
