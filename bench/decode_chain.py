"""``python -m bench.decode_chain``: the data-dependent decode chain, per configuration, in owned graphs.

    python -m bench.decode_chain --out DIR                    # 12 configurations, about 2 minutes
    python -m bench.decode_chain --out DIR --tunings auto+pdl --layouts merged --layers 4
    python -m bench.decode_chain --out DIR --persistent       # also the persistent-kernel experiment

One decode step of the workload (Qwen3-VL-2B: 28 layers, lm_head) as the chain of
:class:`int4gemv.decode.DecodeChain`: each GEMV reads the previous one's output, so the step is
data-dependent (unlike ``bench.decode_step``'s independent inputs). Random weights at the real
shapes; the logits are checked against the float64 chain (:func:`int4gemv.decode.tolerance`).

Per configuration (tuning x merged/separate projections) the step is captured once into a graph
owned by ``lifecycle.numba_provider`` (input staged from a retained pinned buffer), replayed and
released, and reported: µs per step (median of back-to-back replays timed by CUDA events between
them, after a warm-up), the byte floor (INT4 weights + scales + zero points read per step over the
device-to-device copy bandwidth measured in the same run), × floor, % of copy, launches per step,
errors against float64, replay-to-replay jitter (p90/p10), and the provider's counters after
release. Writes ``decode-chain-<device>-<date>.json`` into ``--out`` and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

WORKLOAD = Path(__file__).resolve().parents[1] / "int4gemv" / "workloads" / "qwen3_vl_2b_decode.json"
LAYOUTS = ("merged", "separate")

__all__ = ["replay_times_us", "measure_config", "main"]


def replay_times_us(provider, graph_id: int, replays: int, warmup: int = 20) -> np.ndarray:
    """µs of each of ``replays`` back-to-back replays: events recorded between consecutive replays
    on the graph's stream (the warm-up fills the queue first, so the GPU never waits for the host
    and no launch gap enters a sample)."""
    from numba import cuda

    stream = cuda.external_stream(provider.stream)
    events = [cuda.event(timing=True) for _ in range(replays + 1)]
    provider.synchronize(graph_id)
    for _ in range(warmup):
        provider.replay(graph_id)
    events[0].record(stream)
    for e in events[1:]:
        provider.replay(graph_id)
        e.record(stream)
    events[-1].synchronize()
    return np.array([cuda.event_elapsed_time(a, b) * 1e3 for a, b in zip(events, events[1:])])


def _errors(y, ref) -> dict:
    from int4gemv.decode.model import relative_error

    y64 = y.astype(np.float64)
    return {"rel_err": relative_error(y, ref),
            "max_err": float(np.max(np.abs(y64 - ref)) / np.max(np.abs(ref))) if np.all(np.isfinite(y64)) else float("inf")}


def measure_config(chain, provider, graph_id: int, x, ref, copy_bw: float, replays: int) -> dict:
    """Check, capture, time and release one configuration; returns its row."""
    from int4gemv.decode.model import tolerance

    eager = chain.run(x)
    t0 = time.perf_counter()
    for _ in range(5):
        chain.run(x)
    eager_us = (time.perf_counter() - t0) / 5 * 1e6
    graph = chain.capture(provider, graph_id, x)
    replayed = graph(x)
    samples = replay_times_us(provider, graph_id, replays)
    graph.release()
    c = provider.counters
    us = float(np.median(samples))
    floor_us = chain.weight_bytes / copy_bw * 1e6
    row = dict(layout="merged" if chain.merged else "separate", tuning=chain.tuning,
               launches=chain.launches, graph_nodes=chain.launches + 1, data_dependent=True,
               us=us, p10_us=float(np.percentile(samples, 10)), p90_us=float(np.percentile(samples, 90)),
               replays=len(samples), floor_us=floor_us, x_floor=us / floor_us, pct_copy=100 * floor_us / us,
               eager_us=eager_us, replay_equals_eager=bool(np.array_equal(replayed, eager)),
               tolerance=tolerance(len(chain.layers)),
               counters_released={k: getattr(c, k) for k in ("graphs_alive", "pinned_buffers", "pinned_bytes",
                                                             "pending_cleanup")},
               kernels=sorted({f"{p.kernel} {p.cols}x{p.unroll}" if p.cols else p.kernel for p in chain.plans()})
               if hasattr(chain, "plans") else ["persistent chain_kernel"])
    row["jitter"] = row["p90_us"] / row["p10_us"]
    row.update(_errors(replayed, ref))
    row["correct"] = (row["replay_equals_eager"] and row["rel_err"] < row["tolerance"]
                      and not any(row["counters_released"].values()))
    return row


def print_table(report: dict, out=sys.stdout) -> None:
    print(f"\n{report['workload']}: {report['layers']} layers, {report['weight_bytes'] / 1e9:.3f} GB/step, "
          f"copy {report['copy_gbs']:.0f} GB/s, floor {report['floor_us']:.1f} µs, "
          f"tolerance {report['tolerance']:.2e} (ideal fp16 chain {report['ideal_fp16_rel_err']:.2e})", file=out)
    head = f"{'layout':9}{'tuning':17}{'launch':>7}{'µs/step':>9}{'×floor':>8}{'%copy':>7}{'jitter':>8}" \
           f"{'rel err':>10}{'max err':>10}  dep  ok"
    print(head, file=out)
    for r in report["configs"]:
        if "error" in r:
            print(f"{r['layout']:9}{r['tuning']:17}FAIL  {r['error'][:90]}", file=out)
            continue
        print(f"{r['layout']:9}{r['tuning']:17}{r['launches']:>7}{r['us']:>9.1f}{r['x_floor']:>8.2f}"
              f"{r['pct_copy']:>7.1f}{r['jitter']:>8.3f}{r['rel_err']:>10.2e}{r['max_err']:>10.2e}"
              f"  {'yes' if r['data_dependent'] else 'no':4} {'ok' if r['correct'] else 'FAIL'}", file=out)


def _progress(row, t1):
    print(f"{row['layout']:9}{row['tuning']:17}{row['us']:9.1f} µs  ×{row['x_floor']:.2f} floor  "
          f"err {row['rel_err']:.2e}  ({time.perf_counter() - t1:.1f} s)", flush=True)


def run(args) -> dict:
    import lifecycle
    from numba import cuda

    from int4gemv.decode.chain import DecodeChain
    from int4gemv.decode.model import ChainShape, random_chain, reference_logits, relative_error, tolerance

    workload = json.loads(Path(args.workload).read_text())
    shape = ChainShape.from_workload(workload, layers=args.layers)
    t0 = time.perf_counter()
    layers, lm_head = random_chain(shape, seed=args.seed)
    x = np.random.default_rng(args.seed + 1).standard_normal(shape.hidden).astype(np.float16)
    ref = reference_logits(layers, lm_head, x)
    ideal = relative_error(reference_logits(layers, lm_head, x, store=np.float16), ref)
    print(f"weights and float64 reference: {time.perf_counter() - t0:.1f} s", flush=True)
    from int4gemv.benchmark.timing import copy_bandwidth

    copy_bw = copy_bandwidth()
    device = cuda.get_current_device()
    name = device.name.decode() if isinstance(device.name, bytes) else device.name
    report = dict(workload=workload.get("name", "?"), device=name, layers=shape.layers, seed=args.seed,
                  copy_gbs=copy_bw / 1e9, tolerance=tolerance(shape.layers), ideal_fp16_rel_err=ideal,
                  replays=args.replays, command=" ".join(sys.argv), configs=[])
    configs = [(layout, tuning) for tuning in args.tunings for layout in args.layouts]
    if args.persistent:
        configs.append(("merged", "persistent"))
    with lifecycle.numba_provider(0) as provider:
        for graph_id, (layout, tuning) in enumerate(configs, 1):
            t1 = time.perf_counter()
            try:
                if tuning == "persistent":
                    from int4gemv.decode.persistent import PersistentChain
                    chain = PersistentChain(layers, lm_head)
                else:
                    chain = DecodeChain(layers, lm_head, merged=layout == "merged", tuning=tuning)
                row = measure_config(chain, provider, graph_id, x, ref, copy_bw, args.replays)
            except Exception as exc:  # one failed configuration must not lose the others' results
                row = dict(layout=layout, tuning=tuning, correct=False, error=f"{type(exc).__name__}: {exc}")
                print(f"{layout:9}{tuning:17}FAILED: {row['error']}", flush=True)
            else:
                _progress(row, t1)
            report["configs"].append(row)
    weight_bytes = lm_head.nbytes + sum(getattr(layer, p).nbytes for layer in layers
                                        for p in ("q", "k", "v", "o", "gate", "up", "down"))
    report.update(weight_bytes=weight_bytes, floor_us=weight_bytes / copy_bw * 1e6,
                  seconds=time.perf_counter() - t0)
    return report


def main(argv=None) -> int:
    from int4gemv.decode.chain import TUNINGS

    p = argparse.ArgumentParser(prog="python -m bench.decode_chain", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the JSON results")
    p.add_argument("--workload", type=Path, default=WORKLOAD, help="workload JSON (model shapes)")
    p.add_argument("--tunings", nargs="+", default=list(TUNINGS), choices=TUNINGS)
    p.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    p.add_argument("--layers", type=int, help="layers (default: the workload's)")
    p.add_argument("--replays", type=int, default=300, help="timed replays per configuration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--persistent", action="store_true",
                   help="also the experimental persistent chain kernel (int4gemv.decode.persistent)")
    args = p.parse_args(argv)
    if args.replays < 20:
        p.error("--replays must be at least 20")
    from numba import config, cuda
    if config.ENABLE_CUDASIM or not cuda.is_available():
        print("bench.decode_chain needs a CUDA GPU (the simulator cannot time anything); "
              "tests/test_chain.py runs the chain on the simulator", file=sys.stderr)
        return 2
    report = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = args.out / f"decode-chain-{report['device'].replace(' ', '-').lower()}-{stamp}.json"
    path.write_text(json.dumps(report, indent=1))
    print_table(report)
    print(f"\nwritten: {path}")
    return 0 if all(r["correct"] for r in report["configs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
