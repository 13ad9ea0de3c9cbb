"""The tables of a ``python -m bench.targets`` results file: every row, the issue-19 targets (M =
1), issue 20's (M >= 2, :func:`check_batch_targets`), and the README's markdown table. Pure functions of the document (no GPU), so a saved run prints the
same tables anywhere (``python -m bench.targets --table FILE [--markdown]``)."""

from __future__ import annotations

__all__ = ["GOALS", "BATCH_GOALS", "NOISE", "check_targets", "check_batch_targets", "format_markdown",
           "format_rows", "format_targets"]

#: Issue 19's goals.
GOALS = {"lm_head_default_pct_floor": 90.0, "lm_head_single_warp_pct_floor": 92.0,
         "decode_x_floor": 1.3, "tinygemm_speedup": 1.0, "tinygemm_speedup_large": 1.3,
         "env_over_default": 1.0, "bf16_over_fp16": 1.05}
#: Shapes that must be >= 1.3x faster than tinygemm.
LARGE = ("gate/up", "gate_up", "down", "lm_head")
#: Issue 20's goals, judged on the environment-unset rows (``env``) at M >= 2: times the floor
#: at M = 16 (the shapes of :data:`BATCH_LARGE`, then every other) and at M = 8 (those shapes),
#: the speed-up over tinygemm at every M and at M = 8 and 16 on those shapes, bf16 over fp16, and
#: a format's M = 16 ratio to its floor over bs 32's on lm_head.
BATCH_GOALS = {"m16_x_floor_large": 1.5, "m16_x_floor": 2.0, "m8_x_floor_large": 1.3,
               "tinygemm_speedup": 1.0, "tinygemm_speedup_large": 2.0, "bf16_over_fp16": 1.05,
               "format_over_bs32": 1.1}
BATCH_LARGE = ("gate/up", "down", "lm_head")
#: Replays of one kernel differ by ~1-2 % between graphs: "no slower" allows this much.
NOISE = 0.02

_DASH = "—"


def _num(v, fmt):
    return _DASH if v is None else format(v, fmt)


def _gemv(doc, **where):
    """Timed int4gemv rows matching ``where``; a row whose check failed judges no target."""
    return [r for r in doc["rows"] if r["kind"] == "int4gemv" and r.get("us") and r.get("ok") is not False
            and all(r.get(k) == v for k, v in where.items())]


def check_targets(doc) -> list:
    """``[(target, row label, value, goal text, ok)]`` for every target row present in ``doc``."""
    out = []
    for r in _gemv(doc, shape="lm_head", M=1):
        fmt = f"bs{r['bs']}{'+zp' if r['zp'] else ''} {r['dtype']}"
        if r["variant"] in ("default", "single_warp"):
            goal = GOALS[f"lm_head_{r['variant']}_pct_floor"]
            out.append((f"lm_head {r['variant']} % of floor", fmt, r["pct_floor"], f">= {goal:.0f}",
                        r["pct_floor"] >= goal))
    for r in _gemv(doc, variant="default", M=1, bs=32, zp=False):
        x = r["us"] / r["floor_us"]
        out.append(("default x floor", f"{r['shape']} {r['dtype']}", x, f"<= {GOALS['decode_x_floor']}",
                    x <= GOALS["decode_x_floor"]))
        if r.get("tinygemm_us"):
            s = r["tinygemm_us"] / r["us"]
            goal = GOALS["tinygemm_speedup_large" if r["shape"] in LARGE else "tinygemm_speedup"]
            out.append(("tinygemm / default", f"{r['shape']} {r['dtype']}", s,
                        f"{'>=' if goal > 1 else '>'} {goal}", s >= goal if goal > 1 else s > goal))
    defaults = {(r["shape"], r["bs"], r["zp"], r["dtype"], r["M"]): r for r in _gemv(doc, variant="default")}
    for r in _gemv(doc, variant="env"):
        d = defaults.get((r["shape"], r["bs"], r["zp"], r["dtype"], r["M"]))
        if d:
            x = r["us"] / d["us"]
            out.append(("env-unset / default", f"{r['shape']} bs{r['bs']}{'+zp' if r['zp'] else ''} "
                        f"{r['dtype']} M={r['M']}", x, f"<= 1 (+{NOISE:.0%} noise)", x <= 1 + NOISE))
    for (shape, bs, zp, dtype, M), r in defaults.items():
        fp16 = defaults.get((shape, bs, zp, "float16", M))
        if dtype == "bfloat16" and fp16 and M == 1:
            x = r["us"] / fp16["us"]
            out.append(("bf16 / fp16 default", f"{shape} bs{bs}{'+zp' if zp else ''}", x,
                        f"<= {GOALS['bf16_over_fp16']}", x <= GOALS["bf16_over_fp16"]))
    return out + check_batch_targets(doc)


def check_batch_targets(doc) -> list:
    """Issue 20's rows (:data:`BATCH_GOALS`) for every environment-unset row at M >= 2 in
    ``doc``: ``[(target, row label, value, goal text, ok)]``."""
    g, out = BATCH_GOALS, []
    rows = [r for r in _gemv(doc, variant="env") if r["M"] >= 2]
    for r in rows:
        label = f"{r['shape']} bs{r['bs']}{'+zp' if r['zp'] else ''} {r['dtype']} M={r['M']}"
        large = r["shape"] in BATCH_LARGE
        x = r["us"] / r["floor_us"]
        if r["M"] == 16 or (r["M"] == 8 and large):
            goal = g["m8_x_floor_large"] if r["M"] == 8 else g["m16_x_floor_large" if large else "m16_x_floor"]
            out.append((f"M={r['M']} x floor", label, x, f"<= {goal}", x <= goal))
        if r.get("tinygemm_us"):
            speed = r["tinygemm_us"] / r["us"]
            goal = g["tinygemm_speedup_large"] if large and r["M"] in (8, 16) else g["tinygemm_speedup"]
            out.append(("tinygemm / env (M>=2)", label, speed, f"{'>=' if goal > 1 else '>'} {goal}",
                        speed >= goal if goal > 1 else speed > goal))
    by = {(r["shape"], r["bs"], r["zp"], r["dtype"], r["M"]): r for r in rows}
    for (shape, bs, zp, dtype, M), r in by.items():
        fp16 = by.get((shape, bs, zp, "float16", M))
        if dtype == "bfloat16" and fp16:
            x = r["us"] / fp16["us"]
            out.append(("bf16 / fp16 env (M>=2)", f"{shape} bs{bs}{'+zp' if zp else ''} M={M}", x,
                        f"<= {g['bf16_over_fp16']}", x <= g["bf16_over_fp16"]))
        base = by.get(("lm_head", 32, False, dtype, 16))
        if shape == "lm_head" and M == 16 and base and (bs, zp) != (32, False):
            x = (r["us"] / r["floor_us"]) / (base["us"] / base["floor_us"])
            out.append(("format / bs32 at M=16", f"bs{bs}{'+zp' if zp else ''} {dtype}", x,
                        f"<= {g['format_over_bs32']}", x <= g["format_over_bs32"]))
    return out


def format_targets(doc) -> str:
    """The target table: one line per checked row, then how many hold."""
    if not doc.get("timed"):
        return "targets: not checked (a simulator run times nothing)"
    checks = check_targets(doc)
    lines = [f"{'target':24} {'row':28} {'value':>8} {'goal':>14}  ok", "-" * 82]
    for target, row, value, goal, ok in checks:
        lines.append(f"{target:24} {row:28} {value:8.2f} {goal:>14}  {'yes' if ok else 'NO'}")
    held = sum(ok for *_, ok in checks)
    lines.append(f"{held} of {len(checks)} target rows hold (copy {doc['copy_bandwidth_gbs']:.0f} GB/s, "
                 f"{doc['device']['name']}, commit {str(doc['git']['commit'])[:10]})")
    return "\n".join(lines)


def format_rows(doc) -> str:
    """Every row: kind, variant, shape, format, dtype, M, µs, floor µs, % of floor, % of copy,
    tinygemm, error."""
    head = (f"{'kind':8} {'variant':11} {'shape':8} {'bs':>3} {'zp':>2} {'dtype':8} {'M':>2} {'us':>8} "
            f"{'floor':>8} {'%floor':>6} {'%copy':>6} {'tgemm/':>6} {'error':>8}  kernel")
    lines = [head, "-" * len(head)]
    for r in doc["rows"]:
        speed = r["tinygemm_us"] / r["us"] if r.get("tinygemm_us") and r.get("us") and r["kind"] == "int4gemv" else None
        lines.append(f"{r['kind']:8} {r['variant']:11} {r['shape']:8} {r['bs']:3d} {int(r['zp']):2d} "
                     f"{r['dtype'] or _DASH:8} {_num(r['M'], '2d'):>2} {_num(r['us'], '8.2f'):>8} "
                     f"{_num(r['floor_us'], '8.2f'):>8} {_num(r['pct_floor'], '6.1f'):>6} "
                     f"{_num(r.get('pct_copy'), '6.1f'):>6} {_num(speed, '6.2f'):>6} "
                     f"{_num(r['error'], '8.1e'):>8}  {r.get('kernel') or r.get('note') or ''}"
                     + ("  WRONG" if r.get("ok") is False else ""))
    if doc.get("skipped"):
        lines.append(f"skipped (the dispatcher would run another kernel): {len(doc['skipped'])} rows")
    return "\n".join(lines)


def format_markdown(doc) -> str:
    """The README table: per shape, format and M the floor, each variant's (then each probe
    configuration's) µs (% of floor) per dtype, and tinygemm (bs 32 without zero points);
    generated from the results file, never typed."""
    rows = [r for r in doc["rows"] if r["kind"] in ("int4gemv", "probe") and r.get("us")]
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    cols = [(v, d) for v in variants for d in ("float16", "bfloat16")
            if any(r["variant"] == v and r["dtype"] == d for r in rows)]
    floors = {(r["shape"], r["bs"], r["zp"]): r["us"] for r in doc["rows"] if r["kind"] == "floor"}
    tiny = {(r["shape"], r["M"]): r["us"] for r in doc["rows"] if r["kind"] == "peer" and r.get("us")}
    head = ["shape", "bs", "zp", "M", "floor µs"] + [f"{v} {'fp16' if d == 'float16' else 'bf16'}" for v, d in cols] \
        + ["tinygemm µs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 4 + "---:|" * (len(head) - 4)]
    for key, floor in floors.items():
        shape, bs, zp = key
        for M in sorted({r["M"] for r in rows if (r["shape"], r["bs"], r["zp"]) == key}):
            cells = [shape, str(bs), "yes" if zp else "no", str(M), f"{floor:.2f}"]
            for v, d in cols:
                r = next((r for r in rows if (r["shape"], r["bs"], r["zp"], r["M"], r["variant"], r["dtype"])
                          == (*key, M, v, d)), None)
                cells.append(f"{r['us']:.2f} ({r['pct_floor']:.0f}%)" if r else "")
            cells.append(f"{tiny[shape, M]:.2f}" if (shape, M) in tiny and (bs, zp) == (32, False) else "")
            lines.append("| " + " | ".join(cells) + " |")
    lines.append(f"\n{doc['device']['name']}, copy {doc['copy_bandwidth_gbs']:.0f} GB/s, commit "
                 f"{str(doc['git']['commit'])[:10]}, `{doc['command']}`; µs per launch (graph replays, "
                 "weights rotated past L2), (% of floor) = the `stream` peer's time for the same bytes / the row's.")
    return "\n".join(lines)
