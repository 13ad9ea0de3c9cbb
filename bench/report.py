"""Reporting a run: the terminal table and summary, and the JSON / PNG / text files.

A run is one dict (the "results document", see :func:`bench.results_io.load`): ``rows`` (one per
shape and method), ``decode_step``, ``copy_bandwidth_gbs``, ``peers`` and the run's metadata.
:func:`write_files` writes ``<device>-<date>.json``, the same name ``.png`` (the chart of
:func:`bench.chart.plot`) and ``.txt`` (the table) into the output folder.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

__all__ = ["file_stem", "format_summary", "format_table", "write_files"]

_DASH = "—"


def _num(value, fmt):
    if value is None or (isinstance(value, float) and not math.isfinite(value) and fmt != "e"):
        return _DASH
    return format(value, fmt)


def _bytes(n):
    return f"{n / 1e9:.3f} GB" if n >= 1e8 else f"{n} bytes"


def _short(label, width=24):
    return label if len(label) <= width else label[: width - 1] + "…"


def _peer_names(doc):
    return [name for name, p in doc.get("peers", {}).items() if p.get("available")]


def format_table(doc) -> str:
    """One line per shape and method: µs, GB/s, % of copy bandwidth, % of floor (the ``stream``
    peer, same bytes, same run), eager µs, error, speed-ups."""
    peers = _peer_names(doc)
    head = (f"{'shape':24} {'N x K':>13} {'method':12} {'µs':>8} {'GB/s':>7} {'%copy':>6} {'%floor':>6} {'eager µs':>9} "
            f"{'rel err':>8} " + " ".join(f"{'x ' + p:>12}" for p in peers))
    lines = [head, "-" * len(head)]
    last = None
    for r in doc["rows"]:
        shape = _short(r["shape"]) if r["shape"] != last else ""
        last = r["shape"]
        speed = r.get("speedup", {})
        err = r.get("rel_err")
        nk = f"{r['N']}x{r['K']}" if shape else ""
        line = (f"{shape:24} {nk:>13} {r['method']:12} "
                f"{_num(r.get('us'), '8.2f'):>8} {_num(r.get('gbs'), '7.0f'):>7} "
                f"{_num(r.get('pct_copy'), '6.1f'):>6} {_num(r.get('pct_floor'), '6.1f'):>6} "
                f"{_num(r.get('eager_us'), '9.1f'):>9} "
                f"{_num(err, '8.1e'):>8} " + " ".join(f"{_num(speed.get(p), '12.2f'):>12}" for p in peers))
        if r.get("error"):
            line += f"  ERROR {r['error'][:80]}"
        elif r.get("ok") is False:
            line += "  WRONG"
        lines.append(line.rstrip())
    return "\n".join(lines)


def _best(rows, shape):
    mine = [r for r in rows if r["shape"] == shape and r["family"] == "int4gemv" and r.get("us")
            and r.get("method") != "auto"]
    return min(mine, key=lambda r: r["us"]) if mine else None


def format_summary(doc) -> str:
    """A short summary: banner, per-shape best against each peer, the decode step."""
    dev = doc["device"]
    lines = []
    if not doc.get("timed"):
        lines.append("SIMULATOR RUN (NUMBA_ENABLE_CUDASIM=1): kernels ran at tiny sizes for correctness; "
                     "nothing was timed.")
    else:
        lines.append(f"{dev['name']}: device-to-device copy {doc['copy_bandwidth_gbs']:.0f} GB/s; each kernel "
                     f"timed in graph replays (median of {doc['method']['replays']}), weights rotated over "
                     f"{doc['method']['rotate_bytes'] / 2**20:.0f} MB")
        peers = _peer_names(doc)
        for shape in dict.fromkeys(r["shape"] for r in doc["rows"]):
            best = _best(doc["rows"], shape)
            if best is None:
                lines.append(f"  {_short(shape):24} no int4gemv timing")
                continue
            vs = ", ".join(f"{best['speedup'][p]:.2f}x {p}" for p in peers if p in best.get("speedup", {}))
            lines.append(f"  {_short(shape):24} best {best['method']:12} {best['us']:8.2f} µs {best['pct_copy']:5.1f}% "
                         f"of copy; {vs}")
    off: dict = {}
    for name, p in doc.get("peers", {}).items():
        if not p.get("available"):
            off.setdefault(p.get("reason", ""), []).append(name)
    if off:
        lines.append("peers not measured: " + "; ".join(f"{', '.join(n)} ({why})" for why, n in off.items()))
    step = doc.get("decode_step")
    if step and step.get("error"):
        lines.append(f"decode step FAILED: {step['error']}")
    elif step:
        floor = step.get("floor_us")
        lines.append(f"decode step ({step['workload']}): {step['launches']['separate']} launches separate, "
                     f"{step['launches']['merged']} merged, {_bytes(step['bytes'])}"
                     + (f", byte floor {floor:.1f} µs" if floor else "") + f"; graphs owned by {step['owner']}")
        for c in step["configs"]:
            timing = (f"{c['us']:8.1f} µs ({c['pct_copy']:.1f}% of copy, {c['x_floor']:.2f}x floor), "
                      f"eager {c['eager_us']:.0f} µs" if c.get("us") else "not timed")
            diff = c.get("max_abs_diff_vs_separate")
            launches = step["launches"].get(c["layout"], c["launches"])
            lines.append(f"  {c['layout']:8} {c['variant']:12} {launches:4} launches: {timing}; "
                         f"rel err {c['max_rel_err']:.1e}" + ("" if diff is None else f", vs separate {diff:.1e}"))
    for problem in doc.get("problems", []):
        lines.append(f"PROBLEM: {problem}")
    return "\n".join(lines)


def file_stem(doc) -> str:
    """``<device slug>-<UTC date and time>``, e.g. ``nvidia-h200-20250101T120000``."""
    slug = re.sub(r"[^a-z0-9]+", "-", doc["device"]["name"].lower()).strip("-")
    stamp = re.sub(r"[^0-9T]", "", doc["date"].split("+")[0])
    return f"{slug}-{stamp}"


def write_files(doc, out_dir) -> dict:
    """Write the JSON, the text table and (for timed runs) the PNG chart; returns their paths.

    Without matplotlib the chart is skipped and ``doc["notes"]`` says so (the JSON comes first).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = file_stem(doc)
    paths = {"json": out / f"{stem}.json", "txt": out / f"{stem}.txt"}
    paths["json"].write_text(json.dumps(doc, indent=1, default=_jsonable) + "\n")
    paths["txt"].write_text(format_table(doc) + "\n\n" + format_summary(doc) + "\n")
    if doc.get("timed"):
        try:
            from .chart import plot

            fig = plot(doc)
        except ImportError as exc:
            doc.setdefault("notes", []).append(f"no chart: {exc} (pip install matplotlib; then "
                                               f"bench.chart.plot(bench.results_io.load(PATH)))")
        else:
            paths["png"] = out / f"{stem}.png"
            fig.savefig(paths["png"], dpi=120, bbox_inches="tight")
    return paths


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
