"""Replay-by-replay times of the default tiling and its floor, interleaved, beside the GPU's clocks.

    python -m bench.replay_spread --out DIR [--shape lm_head] [--bs 32] [--dtype float16]
                                  [--rounds 400]

Why (bench/NOTES.md, session 16): ``bench.targets`` rows of the default tiling on lm_head showed
10th-percentile and median replays 10-15 % apart (fp16 bs 32 on an H100: p10 63.2 µs, median
71.0) while the stream floor's stayed within 2 %. This probe tells a slow *mode* (some replays
slow, in runs) from noise and from the clock: it captures one CUDA graph per kernel (the default
as ``prepare`` chooses it with the environment unset, and the stream floor), each ``max(copies, 20)`` launches over rotated weight copies, then replays them
in turn, ``--rounds`` times, timing each replay with CUDA events; meanwhile ``nvidia-smi`` logs
the SM clock, power and the clock-event reasons every 50 ms. Writes ``replays-*.json`` (every
replay's per-launch µs and host time, per kernel) and ``clocks-*.csv``; prints each kernel's
percentiles and the clock range. GPU only; the output of each kernel is checked first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from bench.environment import describe_run
from bench.target_rows import norm_error

__all__ = ["main"]

SHAPES = {"lm_head": (151936, 2048), "gate_up": (12288, 2048), "gate/up": (6144, 2048),
          "down": (2048, 6144), "q/o": (2048, 2048)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.replay_spread", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="lm_head", choices=sorted(SHAPES))
    ap.add_argument("--bs", type=int, default=32)
    ap.add_argument("--zp", action="store_true")
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--rounds", type=int, default=400)
    args = ap.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        ap.error("GPU only: unset NUMBA_ENABLE_CUDASIM")
    import torch
    from numba import cuda

    import int4gemv as ig
    from bench.graph_timer import capture_in_torch_graph, time_in_torch_graph
    from bench.target_runs import device_reference
    from int4gemv.benchmark.stream import StreamPeer, choose
    from int4gemv.benchmark.weights import rotation_copies

    os.makedirs(args.out, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    clocks = os.path.join(args.out, f"clocks-{stamp}.csv")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,"
                            "temperature.gpu,clocks_event_reasons.active", "--format=csv",
                            "-lms", "50"], stdout=open(clocks, "w"), stderr=subprocess.STDOUT)
    try:
        N, K = SHAPES[args.shape]
        bs, zp, dev = args.bs, args.zp, cuda.get_current_device()
        sms = dev.MULTIPROCESSOR_COUNT
        nb = -(-K // bs)
        nbytes = N * nb * bs // 2 + N * nb * 2 + (N * -(-nb // 2) if zp else 0)
        copies = rotation_copies(nbytes, 256 << 20)
        gen = torch.Generator(device="cuda").manual_seed(0)
        tdt = torch.float16 if args.dtype == "float16" else torch.bfloat16
        packed = [torch.randint(0, 256, (N, nb * bs // 2), dtype=torch.uint8, device="cuda",
                                generator=gen) for _ in range(copies)]
        scales = [((torch.rand((N, nb), device="cuda", generator=gen) + 0.5) * 0.01).to(tdt)
                  for _ in range(copies)]
        zps = [torch.randint(0, 256, (N, -(-nb // 2)), dtype=torch.uint8, device="cuda",
                             generator=gen) if zp else None for _ in range(copies)]
        ws = [ig.QuantizedWeight.from_device(p, s, z, K=K, N=N, block_size=bs)
              for p, s, z in zip(packed, scales, zps)]
        a = (torch.randn((1, K), device="cuda", generator=gen) * 0.5).to(tdt)
        out = torch.empty((1, N), device="cuda", dtype=tdt)
        ref = device_reference(torch, a, packed[0], scales[0], zps[0], N, K, bs, zp)
        stream = torch.cuda.Stream()
        launches = max(copies, 20)

        def timer(issue, n, replays):
            return time_in_torch_graph(issue, stream, n, replays)

        floor_cfg = choose(ws, timer, device_key=(dev.id, dev.name), multiprocessors=sms)
        peer = StreamPeer(ws, floor_cfg, sms)
        kernels = {f"floor {floor_cfg}": (peer.issue, peer.check())}
        runs = [ig.prepare(a, w, out=out) for w in ws]
        kernels["default (env unset)"] = (lambda i, h: runs[i % copies](h), None)
        graphs, errors = {}, {}
        for name, (issue, ok) in kernels.items():
            if ok is None:          # a GEMV: poison, one launch, check every element
                out.fill_(float("nan"))
                torch.cuda.synchronize()
                issue(0, stream.cuda_stream)
                stream.synchronize()
                errors[name] = norm_error(out.double().cpu().numpy(), ref)
            else:
                errors[name] = 0.0 if ok else float("inf")
            graphs[name] = capture_in_torch_graph(issue, stream, launches)
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        s = cuda.external_stream(stream.cuda_stream)
        samples = {name: [] for name in graphs}
        for r in range(args.rounds + 3):
            for name, graph in graphs.items():
                start.record(s)
                with torch.cuda.stream(stream):
                    graph.replay()
                end.record(s)
                end.synchronize()
                if r >= 3:
                    samples[name].append((time.time(), cuda.event_elapsed_time(start, end)
                                          * 1e3 / launches))
    finally:
        smi.terminate()
        smi.wait()
    meta = describe_run(False, "bench.replay_spread", argv)
    result = dict(meta, kind="replay_spread", shape=args.shape, N=N, K=K, bs=bs, zp=zp,
                  dtype=args.dtype, launches=launches, copies=copies, errors=errors,
                  samples={k: [[round(t, 4), round(us, 3)] for t, us in v] for k, v in samples.items()})
    path = os.path.join(args.out, f"replays-{args.shape.replace('/', '')}-{stamp}.json")
    with open(path, "w") as f:
        json.dump(result, f)
    print(f"{args.shape} bs {bs} zp {int(zp)} {args.dtype}: {launches} launches a replay, "
          f"{args.rounds} rounds interleaved")
    for name, v in samples.items():
        us = np.array([x[1] for x in v])
        q = np.percentile(us, [0, 10, 50, 90, 100])
        slow = float(np.mean(us > q[1] * 1.05))
        print(f"{name:32} err {errors[name]:.1e}  min {q[0]:7.2f} p10 {q[1]:7.2f} "
              f"median {q[2]:7.2f} p90 {q[3]:7.2f} max {q[4]:7.2f}  >5% over p10: {slow:5.1%}")
    print(f"wrote {path} and {clocks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
