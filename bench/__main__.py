"""``python -m bench``: benchmark int4gemv against its peers over a workload's shapes.

    python -m bench                          # everything (about 5 minutes on an H200)
    python -m bench --quick                  # fewer tunings, replays and decode-step variants
    python -m bench --shapes q_proj lm_head  # some shapes (projection names, merged groups or NxK)
    python -m bench --write-autotune int4gemv/autotune_table.json   # run, then write the table
    python -m bench --write-autotune T.json --from bench/results/X.json  # table from a saved run

Writes ``<device>-<date>.json``, ``.png`` and ``.txt`` into ``--out``, else into ``bench/runs/``
(git-ignored, so a run leaves nothing to commit by accident); results meant for the repository go
to ``bench/results/`` only when asked: ``--out bench/results``. Without a GPU (no ``/dev/nvidiactl``) or with ``--simulate`` it runs on Numba's
CUDA simulator at tiny sizes, times nothing and says so. Exit status: 0 if every result is
correct, 1 if any check failed (files are still written), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

__all__ = ["main", "output_folder", "parse_args"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer tunings, 20 replays, 4 decode-step variants")
    p.add_argument("--shapes", nargs="+", metavar="SHAPE",
                   help="projection names (q_proj ...), merged groups (qkv_proj, gate_up_proj) or NxK")
    p.add_argument("--out", type=Path, help="output folder (default: bench/runs, git-ignored; "
                                            "--out bench/results for results to commit)")
    p.add_argument("--write-autotune", type=Path, metavar="PATH",
                   help="write the auto-dispatch table (int4gemv/autotune_table.json format) from this run")
    p.add_argument("--from", dest="from_results", type=Path, metavar="RESULTS_JSON",
                   help="with --write-autotune: take the timings from a saved results file, run nothing")
    p.add_argument("--tunings", help="single-warp tunings: all (default), none, or e.g. 4x2,2x4")
    p.add_argument("--peers", help="comma-separated peers (default: all available), or none")
    p.add_argument("--replays", type=int, help="timed graph replays per kernel (default 30, --quick 20; >= 20)")
    p.add_argument("--rotate-mb", type=int, default=256, help="weights rotated per kernel, MB (>= 256)")
    p.add_argument("--no-decode-step", action="store_true", help="skip the whole-decode-step graphs")
    p.add_argument("--workload", help="an installed workload name or a workload JSON path "
                                       "(default qwen3_vl_2b_decode, int4gemv/workloads/)")
    p.add_argument("--simulate", action="store_true", help="use Numba's CUDA simulator even with a GPU")
    args = p.parse_args(argv)
    if args.from_results and not args.write_autotune:
        p.error("--from needs --write-autotune")
    if args.replays is None:
        args.replays = 20 if args.quick else 30
    if args.replays < 20:
        p.error("--replays must be at least 20 (the median of fewer replays is not reported)")
    if args.rotate_mb < 256:
        p.error("--rotate-mb must be at least 256 (four times the H200's 60 MB L2)")
    return args


def output_folder(args) -> Path:
    """Where a run writes: ``--out``, else :data:`bench.results_io.RUNS_DIR` (git-ignored)."""
    from .results_io import RUNS_DIR

    return args.out or RUNS_DIR


def _use_simulator_if_needed(force: bool) -> None:
    """Pick the simulator before Numba is imported: when asked, or when there is no GPU."""
    if force:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    elif "NUMBA_ENABLE_CUDASIM" not in os.environ and not os.path.exists("/dev/nvidiactl"):
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        print("bench: no NVIDIA device node, so running on Numba's CUDA simulator "
              "(NUMBA_ENABLE_CUDASIM=1) at tiny sizes", file=sys.stderr)


def _source_name(path: Path) -> str:
    from .environment import ROOT

    path = path.resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return f"bench/results/{path.name}"


def _write_autotune(path, doc, source) -> int:
    from .autotune import write_table

    try:
        table = write_table(path, doc, source)
    except ValueError as exc:
        print(f"bench: not writing {path}: {exc}", file=sys.stderr)
        return 2
    entries = table["devices"][doc["device"]["name"]]["entries"]
    print(f"wrote {path}: {len(entries)} entries for {doc['device']['name']} (source {source})")
    for e in entries:
        print(f"  N={e['N']:>6} K={e['K']:>5}  {e['variant']:11}  {e['note']}")
    return 0


def _problems(doc) -> list:
    problems = []
    for r in doc["rows"]:
        if r["family"] == "int4gemv" and r.get("ok") is False:
            why = r.get("error") or f"rel err {r.get('rel_err')}, all written {r.get('all_written')}"
            problems.append(f"{r['shape']} {r['method']}: {why}")
    from int4gemv.benchmark.weights import REL_ERR_OK

    step = doc.get("decode_step") or {}
    if step.get("error"):
        problems.append(f"decode step: {step['error']}")
    for c in step.get("configs", []):
        if not c["max_rel_err"] <= REL_ERR_OK:
            problems.append(f"decode step {c['layout']} {c['variant']}: rel err {c['max_rel_err']:.2e}")
    return problems


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_results:
        from .results_io import load

        return _write_autotune(args.write_autotune, load(args.from_results), _source_name(args.from_results))

    _use_simulator_if_needed(args.simulate)
    from numba import config

    from int4gemv.benchmark.peers import PEERS, available_peers
    from int4gemv.benchmark.workloads import DEFAULT_WORKLOAD, bench_shapes, load_workload, select_shapes

    from .environment import describe_run
    from .methods import QUICK_TUNINGS, parse_tunings
    from .report import file_stem, format_summary, format_table, write_files

    simulated = bool(config.ENABLE_CUDASIM)
    workload_path = args.workload or DEFAULT_WORKLOAD
    try:
        workload = load_workload(workload_path)
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    peer_names = None if args.peers in (None, "all") else ([] if args.peers == "none" else args.peers.split(","))
    try:
        chosen = {n: PEERS[n] for n in (peer_names if peer_names is not None else PEERS)}
    except KeyError as exc:
        print(f"bench: unknown peer {exc}; accepted: {', '.join(PEERS)}", file=sys.stderr)
        return 2

    out_dir = output_folder(args)
    doc = {"schema": 1, "kind": "int4gemv-bench", **describe_run(simulated, "bench", argv)}
    if simulated:
        from .simulated import run_simulated

        doc.update(run_simulated(args, chosen))
    else:
        from .gpu_run import run_gpu

        try:
            tunings = parse_tunings(args.tunings) if (args.tunings or not args.quick) else QUICK_TUNINGS
            select_shapes(bench_shapes(workload), args.shapes)  # reject unknown names before any work
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        status = available_peers(list(chosen))
        runnable = {n: chosen[n] for n, (ok, _) in status.items() if ok}
        partial_path = out_dir / f"{file_stem(doc)}.partial.json"

        def checkpoint(partial):
            out_dir.mkdir(parents=True, exist_ok=True)
            partial_path.write_text(json.dumps(dict(doc, **partial), indent=1, default=str) + "\n")

        doc.update(run_gpu(args, workload, tunings, runnable, checkpoint))
        partial_path.unlink(missing_ok=True)
        doc["peers"] = {n: {"available": ok, "reason": why, "description": chosen[n].description}
                        for n, (ok, why) in status.items()}
    doc.setdefault("workload", {"name": workload.get("name"), "path": str(workload_path),
                                "block_size": workload.get("block_size")})
    doc["problems"] = _problems(doc)
    doc["ok"] = not doc["problems"]

    paths = write_files(doc, out_dir)
    print(format_table(doc))
    print()
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    for note in doc.get("notes", []):
        print(note)
    print(format_summary(doc))
    rc = 0 if doc["ok"] else 1
    if args.write_autotune:
        rc = max(rc, _write_autotune(args.write_autotune, doc, f"bench/results/{paths['json'].name}"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
