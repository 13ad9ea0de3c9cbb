"""The chart of a results document: bandwidth per shape for every method with the copy-bandwidth
roofline, and the decode step against its byte floor.

matplotlib is imported on first use; :func:`plot` builds a standalone Figure (no pyplot state).
"""

from __future__ import annotations

__all__ = ["plot"]

#: Series drawn by :func:`plot`, in order: (label, how rows are picked).
_SERIES = ("default", "single_warp", "best tuning", "auto")


def _series(rows, shapes):
    """``{label: [GB/s or None per shape]}`` for int4gemv series and each peer."""
    out = {}
    for label in _SERIES:
        values = []
        for shape in shapes:
            mine = [r for r in rows if r["shape"] == shape and r["family"] == "int4gemv" and r.get("gbs")]
            if label == "best tuning":
                tuned = [r for r in mine if r.get("kernel") == "single_warp" and r["method"] != "auto"]
                pick = max(tuned, key=lambda r: r["gbs"]) if tuned else None
            else:
                pick = next((r for r in mine if r["method"] == label), None)
            values.append(pick["gbs"] if pick else None)
        out[label] = values
    for peer in dict.fromkeys(r["method"] for r in rows if r["family"] == "peer"):
        out[peer] = [next((r.get("gbs") for r in rows if r["shape"] == s and r["method"] == peer), None)
                     for s in shapes]
    return {k: v for k, v in out.items() if any(x is not None for x in v)}


def plot(doc):
    """A matplotlib Figure of ``doc``: bandwidth vs shape with the roofline, and the decode step.

    Returns ``None`` for ``None`` or an untimed (simulator) document.
    """
    if doc is None or not doc.get("timed"):
        return None
    from matplotlib.figure import Figure

    rows = doc["rows"]
    shapes = sorted(dict.fromkeys(r["shape"] for r in rows),
                    key=lambda s: next(r["bytes"] for r in rows if r["shape"] == s and r.get("bytes")))
    step = doc.get("decode_step") or {}
    fig = Figure(figsize=(13, 5.2), layout="constrained")
    ax, ax2 = fig.subplots(1, 2, width_ratios=(2.2, 1))
    x = list(range(len(shapes)))
    for label, values in _series(rows, shapes).items():
        pts = [(i, v) for i, v in zip(x, values, strict=True) if v is not None]
        style = "-o" if label in _SERIES else "--s"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label, markersize=5)
    copy = doc["copy_bandwidth_gbs"]
    ax.axhline(copy, color="black", linestyle=":", label=f"roofline: D2D copy {copy:.0f} GB/s (read + write)")
    labels = []
    for s in shapes:
        r = next(r for r in rows if r["shape"] == s)
        labels.append(f"{s}\n{r['N']}x{r['K']}\n{r['bytes'] / 1e6:.1f} MB" if r.get("bytes") else s)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("GB/s (weight bytes / kernel time)")
    top = max([copy] + [r["gbs"] for r in rows if r.get("gbs")])
    ax.set_ylim(0, top * 1.1)
    ax.set_title(f"INT4 GEMV bandwidth per shape, {doc['device']['name']} (graph replays, rotated weights)",
                 fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    configs = [c for c in step.get("configs", []) if c.get("us")]
    if configs:
        names = [f"{c['layout']}\n{c['variant']}" for c in configs]
        bars = ax2.bar(range(len(configs)), [c["us"] for c in configs],
                       color=["tab:blue" if c["layout"] == "separate" else "tab:orange" for c in configs])
        launches = [step["launches"].get(c["layout"], c["launches"]) for c in configs]
        ax2.bar_label(bars, [f"{c['us']:.0f} µs\n{n} launches" for c, n in zip(configs, launches, strict=True)],
                      fontsize=7)
        ax2.axhline(step["floor_us"], color="black", linestyle=":",
                    label=f"byte floor {step['floor_us']:.0f} µs")
        ax2.set_xticks(range(len(configs)), names, fontsize=7)
        ax2.set_ylim(0, max([c["us"] for c in configs] + [step["floor_us"]]) * 1.18)
        ax2.set_ylabel("µs per decode step (one graph replay)")
        ax2.set_title(f"Decode step: {step['launches']['separate']} vs {step['launches']['merged']} launches, "
                      f"{step['bytes'] / 1e9:.2f} GB", fontsize=10)
        ax2.legend(fontsize=7)
        ax2.grid(alpha=0.3, axis="y")
    else:
        ax2.set_axis_off()
    return fig
