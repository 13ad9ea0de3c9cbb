"""``python -m bench.targets``: the results file of the M = 1 / batch targets, in one command.

    python -m bench.targets --out bench/results                 # the full set (~8 min on an H200)
    python -m bench.targets --out DIR --quick                   # fewer formats and replays
    python -m bench.targets --out DIR --m 1,2,4,8,16            # the batch sweep (issue 20)
    python -m bench.targets --table bench/results/targets-X.json  # print a saved run's tables
    python -m bench.targets --table FILE --markdown             # the README table, generated

Rows (schema of ``DESIGN.md``): one per kernel variant, shape, M, format (block size, zero
points) and dtype: ``kind, variant, shape, N, K, M, bs, zp, dtype, us, floor_us, pct_floor,
tinygemm_us, error`` (+ ``kernel``, ``config``, ``pct_copy``, ``p10_us``, ``p90_us``). Variants:
every registered kernel (:data:`int4gemv.registry.KERNELS`; a variant that would fall back to
another kernel is skipped and listed), ``auto``, and ``env`` (``tuning=None``: what a user gets
with the ``INT4GEMV_*`` controls unset; skipped, with a message, when any is set). ``kind="floor"`` rows are the ``stream`` peer
(:mod:`int4gemv.benchmark.stream`) on the same rotated weights, timed in the same run;
``kind="peer"`` rows are tinygemm (bf16, group 32) at the same M. ``error`` is the norm-wise
relative error against a float64 reference (output poisoned with NaN first: unwritten -> inf).

Timing: each launch captured into a CUDA graph over rotated weight copies (``--rotate-mb``, at
most 512 copies), median of ``--replays`` replays. Without a GPU (or with ``--simulate``) the
same rows run at tiny shapes on Numba's simulator: checked, not timed. The target table
(:mod:`bench.target_table`) is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

__all__ = ["FORMATS", "SHAPES", "SIM_SHAPES", "claim_paths", "main", "parse_args", "plan_rows"]

#: The decode shapes of issue 19 (label -> (N, K)).
SHAPES = {"k/v": (1024, 2048), "q/o": (2048, 2048), "gate/up": (6144, 2048),
          "gate_up": (12288, 2048), "down": (2048, 6144), "lm_head": (151936, 2048)}
#: Weight formats (block size, zero points): every one on lm_head, the first on every shape.
FORMATS = ((32, False), (32, True), (16, False), (16, True), (64, False), (64, True),
           (128, False), (128, True))
QUICK_FORMATS = ((32, False), (16, True), (128, False))
#: The simulator's shapes: tails of N and K, several column groups.
SIM_SHAPES = {"tiny": (12, 96), "tiny_long": (6, 264)}
DTYPES = ("float16", "bfloat16")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.targets", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="folder for targets-<device>-<date>.json (needed to run)")
    p.add_argument("--table", type=Path, metavar="JSON", help="print a saved run's tables; run nothing")
    p.add_argument("--markdown", action="store_true", help="with --table: the README's markdown table")
    p.add_argument("--quick", action="store_true", help=f"lm_head formats {QUICK_FORMATS} only, 20 replays")
    p.add_argument("--m", default="1", help="batch sizes, comma-separated (default 1)")
    p.add_argument("--shapes", help=f"comma-separated labels of {tuple(SHAPES)}")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="float16,bfloat16 (default both)")
    p.add_argument("--formats", help="comma-separated bs[+zp] on lm_head, e.g. 32,16+zp (default all)")
    p.add_argument("--variants", help="comma-separated variants (default: every registered kernel, auto, env; "
                                       "none: probes only)")
    p.add_argument("--no-tinygemm", action="store_true", help="skip the tinygemm peer")
    p.add_argument("--configs", help="probe rows: default-tiling overrides at every M, e.g. c4u1b5p,c2l4u2b4m "
                                     "(cols, lanes, unroll, blocks per SM, p = pipeline, m = mma), and tensor-core "
                                     "overrides at M >= 2, e.g. tck4u4w8b2d0@gate/up+down "
                                     "(bench/target_tc_probes.py)")
    p.add_argument("--config-shapes", default="lm_head", help="shapes the --configs probes run on (default lm_head)")
    p.add_argument("--replays", type=int, help="timed graph replays (default 30, --quick 20; >= 10)")
    p.add_argument("--rotate-mb", type=int, default=256, help="weight copies rotated per row, MB (>= 128)")
    p.add_argument("--simulate", action="store_true", help="Numba's simulator at tiny shapes")
    p.add_argument("--gpu-lock", type=Path, metavar="FILE",
                   help="share the GPU with other runs using FILE: GPU work under an exclusive lock, "
                        "released only while compiling (bench/gpu_lock.py)")
    args = p.parse_args(argv)
    if args.table:
        return args
    if not args.out:
        p.error("--out is required to run (or --table FILE to print a saved run)")
    try:
        args.m = sorted({int(v) for v in args.m.split(",")})
        args.formats = None if not args.formats else [
            (int(f.split("+")[0]), f.endswith("+zp")) for f in args.formats.split(",")]
    except ValueError:
        p.error("--m takes integers (1..16) and --formats takes bs or bs+zp, comma-separated")
    if not all(1 <= m <= 16 for m in args.m):
        p.error("--m values must be in 1..16")
    if args.formats and not all(f in FORMATS for f in args.formats):
        p.error(f"--formats must be among {', '.join(f'{b}' + ('+zp' if z else '') for b, z in FORMATS)}")
    args.dtypes = args.dtypes.split(",")
    if not set(args.dtypes) <= set(DTYPES):
        p.error(f"--dtypes must be among {DTYPES}")
    if args.shapes:
        args.shapes = args.shapes.split(",")
        unknown = [s for s in args.shapes if s not in SHAPES]
        if unknown:
            p.error(f"unknown --shapes {unknown}; accepted: {', '.join(SHAPES)}")
    args.config_shapes = args.config_shapes.split(",")
    if args.configs:
        from .target_probes import parse_config
        from .target_tc_probes import is_tc_spec, parse_tc_config, tc_shapes

        args.configs = args.configs.split(",")
        try:
            [parse_tc_config(c) if is_tc_spec(c) else parse_config(c) for c in args.configs]
        except ValueError as exc:
            p.error(str(exc))
        unknown = {s for c in args.configs if is_tc_spec(c) for s in tc_shapes(c, ())} - set(SHAPES)
        if unknown:
            p.error(f"unknown shapes {sorted(unknown)} in --configs; accepted: {', '.join(SHAPES)}")
    if args.replays is None:
        args.replays = 20 if args.quick else 30
    if args.replays < 10 or args.rotate_mb < 128:
        p.error("--replays must be >= 10 and --rotate-mb >= 128 (past the 60 MB L2)")
    return args


def variants(chosen=None) -> list:
    """Every registered kernel, then ``auto`` and ``env`` (or ``chosen``, checked; ``["none"]``:
    no variant rows, only floors, peers and ``--configs`` probes)."""
    from int4gemv.registry import KERNELS

    known = list(KERNELS) + ["auto", "env"]
    if chosen is None:
        return known
    if list(chosen) == ["none"]:
        return []
    bad = [v for v in chosen if v not in known]
    if bad:
        raise ValueError(f"unknown variants {bad}; accepted: {', '.join(known)}")
    return list(chosen)


def plan_rows(args, simulated: bool) -> list:
    """``[(label, N, K, bs, zp)]``: every shape at bs 32 without zero points, lm_head at every
    selected format (the simulator: its tiny shapes at the selected formats)."""
    formats = args.formats or (QUICK_FORMATS if args.quick else FORMATS)
    if simulated:
        return [(label, N, K, bs, zp) for label, (N, K) in SIM_SHAPES.items() for bs, zp in formats]
    out = []
    for label in args.shapes or SHAPES:
        N, K = SHAPES[label]
        for bs, zp in (formats if label == "lm_head" else [(32, False)]):
            out.append((label, N, K, bs, zp))
    return out


def claim_paths(folder: Path, name: str) -> tuple[Path, Path]:
    """``(final, partial)`` JSON paths for a run named ``name`` in ``folder``, unique among runs
    that start in the same second (``name``, ``name-2``, ...): the partial file is created
    exclusively here, so two processes never write one file."""
    for n in range(1, 1000):
        stem = name if n == 1 else f"{name}-{n}"
        partial = folder / f"{stem}.partial.json"
        try:
            partial.open("x").close()
        except FileExistsError:
            continue
        if (folder / f"{stem}.json").exists():
            partial.unlink()
            continue
        return folder / f"{stem}.json", partial
    raise FileExistsError(f"no free results name for {name} in {folder}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.table:
        from .target_table import format_markdown, format_targets

        doc = json.loads(args.table.read_text())
        print(format_markdown(doc) if args.markdown else format_targets(doc))
        return 0
    from int4gemv.backend import gpu_present, use_simulator

    from . import gpu_lock

    gpu_lock.configure(args.gpu_lock)

    if args.simulate or not gpu_present():
        use_simulator()
    from numba import config

    from .environment import describe_run
    from .target_runs import run_targets
    from .target_table import format_rows, format_targets

    simulated = bool(config.ENABLE_CUDASIM)
    try:
        chosen = variants(args.variants.split(",") if args.variants else None)
    except ValueError as exc:
        print(f"bench.targets: {exc}", file=sys.stderr)
        return 2
    controls = sorted(k for k in os.environ if k.startswith("INT4GEMV_"))
    if "env" in chosen and controls:   # the benchmark never writes the environment: say so, skip the row
        print(f"bench.targets: 'env' (the environment-unset path) skipped: {', '.join(controls)} set",
              file=sys.stderr)
        chosen.remove("env")
    t0 = time.time()
    doc = {"schema": 1, "kind": "int4gemv-targets", **describe_run(simulated, "bench.targets", argv)}
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = doc["date"].replace(":", "").replace("-", "")[:15]
    device = doc["device"]["name"].replace(" ", "-").lower()
    path, partial = claim_paths(args.out, f"targets-{device}-{stamp}")

    def checkpoint(body):
        partial.write_text(json.dumps(dict(doc, **body), indent=1) + "\n")

    doc.update(run_targets(plan_rows(args, simulated), chosen, args, simulated, checkpoint))
    doc["seconds"] = round(time.time() - t0, 1)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    partial.unlink(missing_ok=True)
    print(format_rows(doc))
    print()
    print(format_targets(doc))
    print(f"wrote {path} in {doc['seconds']:.0f} s")
    wrong = [r for r in doc["rows"] if r.get("ok") is False]
    for r in wrong:
        print(f"WRONG: {r['kind']} {r['variant']} {r['shape']} bs{r['bs']} zp{int(r['zp'])} {r['dtype']} "
              f"M={r['M']}: {r.get('note') or r['error']}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
