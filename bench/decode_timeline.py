"""The per-kernel timeline of a replayed decode step: measured, summarized, printed and drawn.

:func:`measure_timeline` captures the stamped form of a chain (``DecodeChain(timeline=True)``,
per-block ``%globaltimer`` stamps) into an owned graph, replays it ``replays`` times and keeps,
per launch, the median over replays of each span field (:func:`int4gemv.decode.timeline.kernel_spans`).
:func:`kind_summary` reduces the 28 layers to one row per kernel kind, with each kernel's
:func:`handoffs`; :func:`overlap_bound` is the step those hand-offs allow at best; :func:`plot`
draws the step kernel by kernel against the byte floor (matplotlib, imported on first use).
:func:`measure_phases` and :func:`print_phases` do the same for the persistent chain's phases
(:func:`int4gemv.decode.timeline.phase_spans`: barrier, staging, work and tail of each phase).

``python -m bench.decode_timeline RESULTS.json --png OUT.png`` redraws the figure from a results
file (for a device without matplotlib).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

__all__ = ["measure_timeline", "kind_summary", "handoffs", "overlap_bound", "measure_phases", "phase_kinds",
           "print_phases", "print_timeline", "plot", "main"]

#: Span fields whose median over replays the timeline keeps.
FIELDS = ("start", "last_entry", "first_exit", "end", "overlap", "adds")
#: Phase fields (persistent chain) whose median over replays the timeline keeps.
PHASE_FIELDS = ("barrier", "stage", "work", "tail", "adds")
#: Kernel kinds in step order, and their colours in the figure.
COLOURS = {"qkv": "tab:blue", "q": "tab:blue", "k": "tab:cyan", "v": "tab:cyan", "o": "tab:orange",
           "gate_up": "tab:green", "gate": "tab:green", "up": "tab:olive", "silu_mul": "tab:red",
           "down": "tab:purple", "lm_head": "tab:brown"}


def measure_timeline(chain, provider, graph_id: int, x, copy_bw: float, replays: int = 15) -> dict:
    """Capture the stamped ``chain`` as ``graph_id``, replay it ``replays`` times with input
    ``x`` and return ``{"granularity_ns", "spans", "layers", "logits"}``; the graph is released."""
    from int4gemv.decode.timeline import kernel_spans, layer_totals, stamp_granularity

    graph = chain.capture(provider, graph_id, x)
    try:
        runs, granularity = [], float("inf")
        for _ in range(replays):
            logits = graph(x)
            stamps = chain.stamps.copy_to_host()
            granularity = min(granularity, stamp_granularity(stamps))
            runs.append(kernel_spans(stamps, chain.kernels, copy_bw))
    finally:
        graph.release()
    spans = []
    for i, first in enumerate(runs[0]):
        row = dict(first)
        for f in FIELDS:
            row[f] = round(float(np.median([r[i][f] for r in runs])), 4)
        row["x_floor"] = round(row["adds"] / row["floor"], 3) if row["floor"] else None
        row["floor"] = round(row["floor"], 4)
        spans.append(row)
    return dict(granularity_ns=granularity, spans=spans, layers=layer_totals(spans), logits=logits)


def kind_summary(spans) -> list:
    """One row per kernel kind (in step order): launches, and the median over them of ``span``
    (end − start), ``resident`` (last entry − start), ``overlap``, ``adds``, ``floor``, ``adds /
    floor``, ``handoff`` and ``drain`` (:func:`handoffs`); ``adds_total``. Pure."""
    kinds = {}
    for r, (handoff, drain) in zip(spans, handoffs(spans)):
        kinds.setdefault(r["name"], []).append(dict(r, handoff=handoff, drain=drain))
    out = []
    for name, rows in kinds.items():
        med = lambda key: float(np.median([key(r) for r in rows]))  # noqa: E731
        floor = med(lambda r: r["floor"])
        adds = med(lambda r: r["adds"])
        out.append(dict(kind=name, launches=len(rows), span=med(lambda r: r["end"] - r["start"]),
                        resident=med(lambda r: r["last_entry"] - r["start"]), overlap=med(lambda r: r["overlap"]),
                        adds=adds, floor=floor, x_floor=adds / floor if floor else None,
                        handoff=med(lambda r: r["handoff"]), drain=med(lambda r: r["drain"]),
                        adds_total=float(sum(r["adds"] for r in rows))))
    return out


def handoffs(spans) -> list:
    """Per launch ``(handoff, drain)`` in µs, which split what it adds: ``handoff`` = its first
    block's exit − the previous launch's last exit (the dependency's latency plus the quickest
    block's work after it: for a kernel whose weights were all loaded before its wait, the
    hand-off alone), ``drain`` = its last exit − its first exit (how spread its blocks' ends
    are). The first launch has no predecessor: its ``handoff`` counts from its own start. Pure."""
    out, prev_end = [], None
    for r in spans:
        out.append((r["first_exit"] - (r["start"] if prev_end is None else prev_end), r["end"] - r["first_exit"]))
        prev_end = r["end"]
    return out


def overlap_bound(spans) -> dict:
    """The step this boundary mechanism allows at best: every kernel's bytes streamed behind its
    predecessor, so that each launch adds only ``max(floor, h)``, where ``h`` is the smallest
    per-kind median ``handoff`` the timeline measured (``kind``: whose), and ``drained_us`` with
    ``h + d``, that kind's median ``drain`` added. A bound, not a prediction: a chain on these
    hand-offs cannot beat ``ideal_us``; to beat it the hand-off itself must get cheaper. Pure."""
    kinds = kind_summary(spans)
    best = min(kinds, key=lambda k: k["handoff"])
    h, d = best["handoff"], best["drain"]
    return dict(kind=best["kind"], handoff=h, drain=d, ideal_us=float(sum(max(r["floor"], h) for r in spans)),
                drained_us=float(sum(max(r["floor"], h + d) for r in spans)),
                floor_us=float(sum(r["floor"] for r in spans)))


def measure_phases(chain, provider, graph_id: int, x, copy_bw: float, replays: int = 15) -> dict:
    """The persistent chain's :func:`measure_timeline`: ``chain`` is a ``PersistentChain(
    timeline=True)``; returns ``{"phases": [...], "kinds": [...], "logits"}`` with, per phase,
    the median over replays of each of :data:`PHASE_FIELDS`, and per kind their sums over the
    step (µs); the graph is released."""
    from int4gemv.decode.timeline import phase_spans

    graph = chain.capture(provider, graph_id, x)
    try:
        runs = []
        for _ in range(replays):
            logits = graph(x)
            runs.append(phase_spans(chain.stamps.copy_to_host(), chain.kernels, copy_bw))
    finally:
        graph.release()
    phases = [dict(first, **{f: round(float(np.median([r[i][f] for r in runs])), 4) for f in PHASE_FIELDS})
              for i, first in enumerate(runs[0])]
    return dict(phases=phases, kinds=phase_kinds(phases), logits=logits)


def phase_kinds(phases) -> list:
    """Per kind of phase (in step order): ``phases`` (its count), and the sums of ``floor`` and
    of each of :data:`PHASE_FIELDS` over its phases. Pure."""
    kinds = {}
    for r in phases:
        k = kinds.setdefault(r["name"], dict(kind=r["name"], phases=0, floor=0.0, **{f: 0.0 for f in PHASE_FIELDS}))
        k["phases"] += 1
        k["floor"] += r["floor"]
        for f in PHASE_FIELDS:
            k[f] += r[f]
    return list(kinds.values())


def print_phases(row: dict, out=sys.stdout) -> None:
    """The per-kind table of a persistent configuration's phases (µs summed over the step)."""
    t = row["phases"]
    print(f"\nphases {row['label']}: stamped step {t['us_per_step']:.1f} µs (unstamped {row['us_per_step']:.1f}); "
          f"µs summed over each kind's phases", file=out)
    print(f"{'kind':9}{'n':>4}" + "".join(f"{f:>9}" for f in PHASE_FIELDS) + f"{'floor':>9}{'×floor':>8}", file=out)
    for k in t["kinds"]:
        print(f"{k['kind']:9}{k['phases']:>4}" + "".join(f"{k[f]:>9.1f}" for f in PHASE_FIELDS)
              + f"{k['floor']:>9.1f}{k['adds'] / k['floor']:>8.2f}", file=out)


def print_timeline(row: dict, out=sys.stdout) -> None:
    """The per-kind table of one configuration's timeline (µs; medians over layers), then the
    step's :func:`overlap_bound` against the configuration's floor."""
    t = row["timeline"]
    print(f"\ntimeline {row['layout']} {row['label']}: stamped step {t['us_per_step']:.1f} µs "
          f"(unstamped {row['us_per_step']:.1f}), clock granularity {t['granularity_ns']:.0f} ns", file=out)
    print(f"{'kind':9}{'n':>4}{'span':>8}{'resident':>9}{'overlap':>9}{'adds':>8}{'handoff':>9}{'drain':>7}"
          f"{'floor':>8}{'×floor':>8}{'Σ adds':>9}", file=out)
    for k in kind_summary(t["spans"]):
        xf = f"{k['x_floor']:.2f}" if k["x_floor"] else "-"
        print(f"{k['kind']:9}{k['launches']:>4}{k['span']:>8.2f}{k['resident']:>9.2f}{k['overlap']:>9.2f}"
              f"{k['adds']:>8.2f}{k['handoff']:>9.2f}{k['drain']:>7.2f}{k['floor']:>8.2f}{xf:>8}"
              f"{k['adds_total']:>9.1f}", file=out)
    layers = [x for x in t["layers"] if x["layer"] >= 0]
    if layers:
        us = np.median([x["us"] for x in layers])
        fl = np.median([x["floor"] for x in layers])
        print(f"layer (median of {len(layers)}): {us:.2f} µs against a {fl:.2f} µs floor ({us / fl:.2f}×)", file=out)
    b = overlap_bound(t["spans"])
    print(f"bound with every kernel's bytes behind its predecessor and {b['kind']}'s hand-off ({b['handoff']:.2f} µs) "
          f"at each boundary: {b['ideal_us']:.1f} µs ({b['ideal_us'] / row['floor_us']:.2f}× the floor); "
          f"with its drain ({b['drain']:.2f}): {b['drained_us']:.1f} µs ({b['drained_us'] / row['floor_us']:.2f}×)",
          file=out)


def plot(report: dict, path, configs=None, zoom_layers=(1, 2)) -> None:
    """Draw each configuration's timeline (one row each): left the whole step, right layers
    ``zoom_layers`` (first to last, inclusive). A bar per kernel from its first block's entry to its
    last block's exit (light: before the previous kernel's end, i.e. resident and waiting; dark:
    what it adds), coloured by kind; the black staircase is the byte floor (where each kernel
    would end if the step streamed its bytes at the copy bandwidth)."""
    from matplotlib.figure import Figure

    rows = [r for r in report["configs"] if r.get("timeline") and (configs is None or r["label"] in configs)]
    if not rows:
        raise ValueError("no configuration in the report has a timeline")
    fig = Figure(figsize=(13, 2.8 * len(rows) + 0.6), layout="constrained")
    axes = fig.subplots(len(rows), 2, squeeze=False, width_ratios=(3, 2))
    for (full, zoom), r in zip(axes, rows):
        spans = r["timeline"]["spans"]
        floor_end = np.cumsum([s["floor"] for s in spans])
        first = next(i for i, s in enumerate(spans) if s["layer"] == zoom_layers[0])
        last = max(i for i, s in enumerate(spans) if s["layer"] == zoom_layers[1])
        for ax, lo, hi in ((full, 0, len(spans)), (zoom, first, last + 1)):
            prev_end = spans[lo - 1]["end"] if lo else spans[0]["start"]
            for i in range(lo, hi):
                s = spans[i]
                colour = COLOURS.get(s["name"], "grey")
                split = min(max(prev_end, s["start"]), s["end"])
                ax.barh(i, split - s["start"], left=s["start"], height=0.85, color=colour, alpha=0.3, linewidth=0)
                ax.barh(i, s["end"] - split, left=split, height=0.85, color=colour, linewidth=0)
                prev_end = s["end"]
            base = spans[lo]["start"] - (floor_end[lo - 1] if lo else 0.0)
            ax.step(base + floor_end[lo:hi], np.arange(lo, hi), where="post", color="black", linewidth=1)
            ax.set_ylim(hi - 0.5, lo - 0.5)
        full.set_title(f"{r['layout']} {r['label']}\n{r['us_per_step']:.0f} µs/step = {r['x_floor']:.2f}× the "
                       f"{r['floor_us']:.0f} µs floor, {r['launches']} launches", fontsize=9)
        zoom.set_title(f"layers {zoom_layers[0]}–{zoom_layers[1]} (stamped step {r['timeline']['us_per_step']:.0f} µs)",
                       fontsize=9)
        full.set_ylabel("launch")
        kinds = list(dict.fromkeys(s["name"] for s in spans))
        zoom.legend(handles=[_line()] + [_patch(k) for k in kinds], fontsize=7, loc="upper right", ncol=2)
    axes[-1, 0].set_xlabel("µs from the step's first block")
    axes[-1, 1].set_xlabel("µs")
    fig.savefig(path, dpi=110)


def _line():
    from matplotlib.lines import Line2D

    return Line2D([], [], color="black", linewidth=1, label="byte floor at copy bandwidth")


def _patch(kind):
    from matplotlib.patches import Patch

    return Patch(color=COLOURS.get(kind, "grey"), label=kind)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.decode_timeline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="a decode-chain results JSON with timelines")
    p.add_argument("--png", type=Path, required=True)
    p.add_argument("--configs", nargs="+", help="labels to draw (default: every timeline)")
    args = p.parse_args(argv)
    report = json.loads(args.results.read_text())
    plot(report, args.png, args.configs)
    for row in report["configs"]:
        if row.get("timeline"):
            print_timeline(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
