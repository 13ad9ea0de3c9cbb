"""``python -m bench.decode_chain``: the data-dependent decode chain, per configuration, in owned graphs.

    python -m bench.decode_chain --out DIR                    # tunings x layouts, about 2 minutes
    python -m bench.decode_chain --out DIR --configs merged:single_warp+pdl merged:auto+pdl:bps=8 \\
        --timeline --race 1000 --png DIR/timeline.png
    python -m bench.decode_chain --out DIR --persistent       # also the persistent-kernel experiment

One decode step of the workload (Qwen3-VL-2B: 28 layers, lm_head) as :class:`int4gemv.decode.DecodeChain`:
each GEMV reads the previous one's output, so the step is data-dependent. Random weights at the
real shapes; the logits are checked against the float64 chain (:func:`int4gemv.decode.tolerance`).

A configuration is ``layout:tuning[:options]`` (:mod:`bench.decode_configs`). Per configuration the
step is captured once into a graph owned by ``lifecycle.numba_provider`` (input staged from a
retained pinned buffer), replayed and released, and reported: ``us_per_step`` (median of
back-to-back replays timed by CUDA events between them, after a warm-up), the byte floor (weights +
scales + zero points per step over torch's ``copy_`` bandwidth measured in this run), × floor,
launches, errors against float64, jitter (p90/p10 of the replays), the lm_head standalone (its own
graph) against inside the chain, and with ``--timeline`` the per-kernel timeline of the stamped
chain (:mod:`bench.decode_timeline`); with ``--race N``, N replays with fresh inputs, each
compared bit for bit with the eager step. Writes ``decode-chain-<device>-<date>.json`` into
``--out`` and prints tables last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .decode_configs import LAYOUTS, chain_options, parse_config
from .decode_report import write_report
from .decode_timeline import measure_phases, measure_timeline

WORKLOAD = Path(__file__).resolve().parents[1] / "int4gemv" / "workloads" / "qwen3_vl_2b_decode.json"
#: Bytes of the buffer torch copies to measure the copy bandwidth (≫ the 60 MB L2).
COPY_BYTES = 1 << 30

__all__ = ["replay_timing", "torch_copy_bandwidth", "measure_config", "run", "parse_args", "main"]


def replay_timing(provider, graph_id: int, replays: int, warmup: int = 20):
    """:func:`int4gemv.benchmark.measure_replays` of graph ``graph_id``'s replays on its own
    stream (µs per step: one replay is one step), after at least ``warmup`` untimed replays."""
    from int4gemv.benchmark import measure_replays

    provider.synchronize(graph_id)
    return measure_replays(lambda: provider.replay(graph_id), provider.stream, replays=replays,
                           warmup=warmup)


def torch_copy_bandwidth(replays: int = 20) -> tuple:
    """``(bytes/s, source)``: torch ``copy_`` of :data:`COPY_BYTES` (read + write counted), median
    of ``replays`` event-timed copies after warm-up; the library's probe where torch has no CUDA."""
    try:
        import torch

        src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").random_(0, 255)
        dst = torch.empty_like(src)
        for _ in range(5):
            dst.copy_(src)
        times = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        del src, dst
        torch.cuda.empty_cache()
        return 2 * COPY_BYTES / float(np.median(times)), "torch copy_"
    except Exception as exc:  # noqa: BLE001 - torch is optional
        from int4gemv.benchmark.timing import copy_bandwidth

        return copy_bandwidth(), f"int4gemv copy_bandwidth (torch: {type(exc).__name__})"


def _errors(y, ref) -> dict:
    from int4gemv.decode import relative_error

    y64 = y.astype(np.float64)
    finite = bool(np.all(np.isfinite(y64)))
    return {"rel_err": relative_error(y, ref),
            "max_err": float(np.max(np.abs(y64 - ref)) / np.max(np.abs(ref))) if finite else float("inf")}


def _lm_head_standalone(chain, provider, graph_id, replays) -> float:
    """µs of the chain's lm_head launch alone in its own owned graph (same tuning and grid cap)."""
    op = chain.lm_head_launch()
    provider.record(graph_id, lambda cap: op(cap.stream))
    try:
        return replay_timing(provider, graph_id, replays).us
    finally:
        provider.release(graph_id)


def _race(chain, provider, graph_id, runs, seed) -> dict:
    """``runs`` replays of the owned graph, each with a fresh input, compared bit for bit with the
    eager step of the same input (every buffer still holds the previous run's values)."""
    rng = np.random.default_rng(seed)
    graph = chain.capture(provider, graph_id, np.zeros(chain.hidden, np.float16))
    mismatched = []
    try:
        for i in range(runs):
            xi = rng.standard_normal(chain.hidden).astype(np.float16)
            if not np.array_equal(graph(xi), chain.run(xi)):
                mismatched.append(i)
    finally:
        graph.release()
    return {"runs": runs, "mismatched": len(mismatched), "first": mismatched[:5]}


def _timeline(chain, layers, lm_head, provider, graph_id, x, copy_bw, args) -> dict:
    """The stamped twin of ``chain``: its per-kernel timeline and its own µs per step."""
    from int4gemv.decode import DecodeChain

    stamped = DecodeChain(layers, lm_head, merged=chain.merged, tuning=chain.tuning,
                          blocks_per_sm=chain.blocks_per_sm, silu_pdl=chain.silu_pdl,
                          kind_tunings=chain.kind_tunings, down_split=chain.down_split,
                          fuse_silu=chain.fuse_silu, timeline=True)
    t = measure_timeline(stamped, provider, graph_id, x, copy_bw)
    t["us_per_step"] = _step_us(stamped, provider, graph_id, x, args)
    return t


def _step_us(chain, provider, graph_id, x, args) -> float:
    """µs per replay of ``chain`` captured as ``graph_id`` (released after)."""
    g = chain.capture(provider, graph_id, x)
    try:
        g(x)
        return replay_timing(provider, graph_id, max(20, args.replays // 4)).us
    finally:
        g.release()


def measure_config(cfg, layers, lm_head, provider, x, ref, copy_bw, args, graph_id) -> dict:
    """Build, check, capture, time and release one configuration (and its timeline, lm_head
    standalone and race check as asked); returns its row."""
    from int4gemv.decode import DecodeChain, PersistentChain, tolerance

    if cfg["layout"] == "persistent":
        chain = PersistentChain(layers, lm_head, warps=cfg["warps"])
    else:
        chain = DecodeChain(layers, lm_head, **chain_options(cfg))
    eager = chain.run(x)
    t0 = time.perf_counter()
    for _ in range(5):
        chain.run(x)
    eager_us = (time.perf_counter() - t0) / 5 * 1e6
    graph = chain.capture(provider, graph_id, x)
    replayed = graph(x)
    timing = replay_timing(provider, graph_id, args.replays)
    graph.release()
    c = provider.counters
    us = timing.us
    floor_us = chain.weight_bytes / copy_bw * 1e6
    row = dict(cfg, launches=chain.launches, data_dependent=True, us_per_step=us,
               p10_us=timing.p10_us, p90_us=timing.p90_us, replays=timing.replays, floor_us=floor_us, x_floor=us / floor_us, pct_copy=100 * floor_us / us,
               eager_us=eager_us, replay_equals_eager=bool(np.array_equal(replayed, eager)),
               tolerance=tolerance(len(chain.layers)),
               counters_released={k: getattr(c, k) for k in ("graphs_alive", "pinned_buffers", "pinned_bytes",
                                                             "pending_cleanup")},
               kernels=sorted({f"{p.kernel} {p.cols}x{p.unroll}" if p.cols else p.kernel for p in chain.plans()})
               if hasattr(chain, "plans") else ["persistent chain_kernel"])
    if getattr(chain, "down_split", None) is not None:
        d = chain.down_split
        row["kernels"].append(f"split_k {d.cols}x{d.unroll}k{d.col_warps}" + (" silu-fused" if chain.fuse_silu else ""))
    if hasattr(chain, "grids"):
        row["grids"] = sorted(set(chain.grids()))
    row["jitter"] = row["p90_us"] / row["p10_us"]
    row.update(_errors(replayed, ref))
    ok = row["replay_equals_eager"] and row["rel_err"] < row["tolerance"] and not any(row["counters_released"].values())
    if cfg["layout"] != "persistent":
        row["lm_head"] = {"standalone_us": _lm_head_standalone(chain, provider, graph_id, args.replays)}
    if args.timeline and cfg["layout"] == "persistent":
        stamped = PersistentChain(layers, lm_head, warps=cfg["warps"], timeline=True)
        row["phases"] = t = measure_phases(stamped, provider, graph_id, x, copy_bw)
        t["equals_unstamped"] = bool(np.array_equal(t.pop("logits"), eager))
        ok = ok and t["equals_unstamped"]
        t["us_per_step"] = _step_us(stamped, provider, graph_id, x, args)
    if args.timeline and cfg["layout"] != "persistent":
        try:
            row["timeline"] = t = _timeline(chain, layers, lm_head, provider, graph_id, x, copy_bw, args)
        except Exception as exc:  # noqa: BLE001 - the unstamped figures stand without it
            row["timeline_error"] = f"{type(exc).__name__}: {exc}"
            ok = False
        else:
            t["equals_unstamped"] = bool(np.array_equal(t.pop("logits"), eager))
            ok = ok and t["equals_unstamped"]
            lm = t["spans"][-1]
            row["lm_head"].update(in_chain_us=lm["adds"], span_us=lm["end"] - lm["start"],
                                  ratio=lm["adds"] / row["lm_head"]["standalone_us"])
    if args.race:
        row["race"] = _race(chain, provider, graph_id, args.race, args.seed + 7)
        ok = ok and row["race"]["mismatched"] == 0
    row["correct"] = bool(ok)
    return row


def run(args) -> dict:
    import lifecycle

    from int4gemv.decode import ChainShape, random_chain, reference_logits, relative_error, tolerance

    from .environment import describe_run

    workload = json.loads(Path(args.workload).read_text())
    shape = ChainShape.from_workload(workload, layers=args.layers)
    t0 = time.perf_counter()
    layers, lm_head = random_chain(shape, seed=args.seed)
    x = np.random.default_rng(args.seed + 1).standard_normal(shape.hidden).astype(np.float16)
    ref = reference_logits(layers, lm_head, x)
    ideal = relative_error(reference_logits(layers, lm_head, x, store=np.float16), ref)
    print(f"weights and float64 reference: {time.perf_counter() - t0:.1f} s", flush=True)
    copy_bw, source = torch_copy_bandwidth()
    weight_bytes = lm_head.nbytes + sum(getattr(layer, p).nbytes for layer in layers
                                        for p in ("q", "k", "v", "o", "gate", "up", "down"))
    report = dict(describe_run(False, "bench.decode_chain"), workload=workload.get("name", "?"), layers=shape.layers,
                  seed=args.seed, copy_gbs=copy_bw / 1e9, copy_source=source, weight_bytes=weight_bytes,
                  floor_us=weight_bytes / copy_bw * 1e6, tolerance=tolerance(shape.layers),
                  ideal_fp16_rel_err=ideal, replays=args.replays, configs=[])
    with lifecycle.numba_provider(0) as provider:
        for graph_id, cfg in enumerate(args.parsed, 1):
            t1 = time.perf_counter()
            try:
                row = measure_config(cfg, layers, lm_head, provider, x, ref, copy_bw, args, graph_id)
            except Exception as exc:  # one failed configuration must not lose the others' results
                row = dict(cfg, correct=False, error=f"{type(exc).__name__}: {exc}")
                print(f"{cfg['layout']:11}{cfg['label']:30}FAILED: {row['error']}", flush=True)
            else:
                print(f"{row['layout']:11}{row['label']:30}{row['us_per_step']:9.1f} µs  ×{row['x_floor']:.2f} floor  "
                      f"err {row['rel_err']:.2e}  ({time.perf_counter() - t1:.1f} s)", flush=True)
            report["configs"].append(row)
            args.out.mkdir(parents=True, exist_ok=True)  # a run cut short keeps what it measured
            (args.out / "decode-chain-partial.json").write_text(json.dumps(report, indent=1))
    report["seconds"] = time.perf_counter() - t0
    return report


def parse_args(argv=None):
    """The command line, with ``args.parsed`` the configurations (see :func:`parse_config`)."""
    from int4gemv.decode import TUNINGS

    p = argparse.ArgumentParser(prog="python -m bench.decode_chain", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the JSON results")
    p.add_argument("--workload", type=Path, default=WORKLOAD, help="workload JSON (model shapes)")
    p.add_argument("--configs", nargs="+", help="layout:tuning[:bps=N][:silu=pdl|plain|fused][:KIND=CxU[s|r]]"
                   "[:down=CxUkP], or persistent:[warps=W] (overrides the next two)")
    p.add_argument("--tunings", nargs="+", default=list(TUNINGS[:6]), choices=TUNINGS)
    p.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    p.add_argument("--layers", type=int, help="layers (default: the workload's)")
    p.add_argument("--replays", type=int, default=300, help="timed replays per configuration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeline", action="store_true", help="also the per-kernel timeline (stamped chain)")
    p.add_argument("--race", type=int, default=0, help="replays with fresh inputs compared with eager")
    p.add_argument("--png", type=Path, help="draw the timelines into this PNG (needs matplotlib)")
    p.add_argument("--persistent", action="store_true",
                   help="also the experimental persistent chain kernel (int4gemv.decode.persistent)")
    args = p.parse_args(argv)
    if args.replays < 20:
        p.error("--replays must be at least 20")
    try:
        texts = args.configs or [f"{layout}:{t}" for t in args.tunings for layout in args.layouts]
        args.parsed = [parse_config(t) for t in texts] + ([parse_config("persistent:")] if args.persistent else [])
    except ValueError as exc:
        p.error(str(exc))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from numba import config, cuda
    if config.ENABLE_CUDASIM or not cuda.is_available():
        print("bench.decode_chain needs a CUDA GPU (the simulator cannot time anything); "
              "tests/test_chain.py runs the chain on the simulator", file=sys.stderr)
        return 2
    report = run(args)
    write_report(report, args)
    return 0 if all(r["correct"] for r in report["configs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
