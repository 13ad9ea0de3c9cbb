"""GPU probe of the tensor-core kernel: correctness at full size, timing against a streaming
floor of the same bytes and tinygemm at the same M, in one process; registers, spills, SASS.

``python -m bench.probe_tensor_core --out DIR [--budget S] [--plan NAME]`` (needs a CUDA GPU
and torch). Each row: random device weights (packed bytes, scales, zero points) rotated over
more than 400 MB so no launch finds its weight in the 60 MB L2; the kernel bound once per copy
and captured into a torch CUDA graph; the median per-launch time of the replays; the term-wise
error of copy 0 against a float64 torch reference, with the output poisoned (NaN) first and
every element checked. ``floor_us``: a read-only 16-byte-per-lane stream of the row's own bytes
(packed + scales + zero points + activations + output), rotated the same way, in the same
process. Writes ``probe-tensor-core.json`` (the results schema of ``/work/shared/DESIGN.md``)
and the lm_head kernel's SASS under ``DIR``; prints a target table last.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from bench.graph_timer import time_in_torch_graph

from bench.probe_default import ROTATE_BYTES, first, reference, rotated_operands, tinygemm_issue

SHAPES = {"k/v": (1024, 2048), "q/o": (2048, 2048), "gate/up": (6144, 2048),
          "gate_up": (12288, 2048), "down": (2048, 6144), "lm_head": (151936, 2048)}
BIG = ("gate/up", "down", "lm_head")
#: Blocks x threads of the floor's stream kernel per SM (enough loads in flight to saturate).
STREAM_BLOCKS_PER_SM, STREAM_THREADS = 8, 256


def plans(name):
    """The rows of one probe plan: ``(shape, M, bs, zp, dtype, overrides)``."""
    rows = []
    if name in ("first", "final"):
        for shape in BIG:
            for M in (16, 8, 1, 2, 4):
                rows.append((shape, M, 32, False, "float16", {}))
        for shape in ("k/v", "q/o", "gate_up"):
            for M in (16, 8, 2):
                rows.append((shape, M, 32, False, "float16", {}))
        for shape in BIG:
            for M in (16, 8, 2):
                rows.append((shape, M, 32, False, "bfloat16", {}))
    if name in ("first", "formats", "final"):
        for bs in (16, 32, 64, 128):
            for zp in (False, True):
                if (bs, zp) != (32, False):
                    rows.append(("lm_head", 16, bs, zp, "float16", {}))
    if name == "first":
        for over in ({"tiles": 2}, {"unroll": 4}, {"blocks_per_sm": 2}, {"tiles": 2, "unroll": 1}):
            rows.append(("lm_head", 16, 32, False, "float16", over))
        for over in ({"ksplit": 4}, {"ksplit": 16, "warps": 16, "blocks_per_sm": 1}):
            rows.append(("gate/up", 16, 32, False, "float16", over))
    if name == "both":   # every target row, as chosen and double-buffered, most important first
        db = {"double_buffer": True}
        order = [(shape, M, 32, False, "float16") for M in (16, 8) for shape in BIG]
        order += [("lm_head", 16, bs, zp, "float16") for bs in (16, 32, 64, 128)
                  for zp in (False, True) if (bs, zp) != (32, False)]
        order += [(shape, M, 32, False, "bfloat16") for shape in BIG for M in (16, 8, 2)]
        order += [(shape, M, 32, False, "float16") for shape in ("k/v", "q/o", "gate_up")
                  for M in (16, 8, 2)]
        order += [(shape, M, 32, False, "float16") for shape in BIG for M in (1, 2, 4)]
        for i, row in enumerate(order):
            rows.append((*row, {}))
            rows.append((*row, db))
            if i == 5:   # after the big shapes at M = 16 and 8: the other tunings
                for M in (16, 8):
                    for over in ({**db, "blocks_per_sm": 2}, {**db, "unroll": 1},
                                 {**db, "unroll": 1, "tiles": 2}):
                        rows.append(("lm_head", M, 32, False, "float16", over))
                for over in ({**db, "ksplit": 4}, {**db, "ksplit": 16, "warps": 16, "blocks_per_sm": 1}):
                    rows.append(("gate/up", 16, 32, False, "float16", over))
                rows.append(("down", 16, 32, False, "float16", {**db, "ksplit": 8, "warps": 8}))
    if name == "final2":   # the last call: the most important rows first (each config compiles once)
        t2 = {"tiles": 2, "blocks_per_sm": 2}
        rows += [("lm_head", 16, 32, False, "float16", {}), ("lm_head", 8, 32, False, "float16", {}),
                 ("gate/up", 16, 32, False, "float16", {}), ("gate/up", 8, 32, False, "float16", {}),
                 ("down", 16, 32, False, "float16", {}), ("down", 8, 32, False, "float16", {}),
                 ("lm_head", 16, 32, False, "float16", t2), ("lm_head", 8, 32, False, "float16", t2)]
        rows += [("lm_head", M, 32, False, "float16", {}) for M in (2, 1, 4)]
        rows += [("gate/up", M, 32, False, "float16", {}) for M in (2, 1, 4)]
        rows += [("lm_head", 16, 32, False, "bfloat16", {}), ("lm_head", 16, 128, True, "float16", {}),
                 ("lm_head", 16, 16, True, "float16", {}), ("k/v", 16, 32, False, "float16", {}),
                 ("q/o", 16, 32, False, "float16", {}), ("down", 2, 32, False, "float16", {}),
                 ("gate_up", 16, 32, False, "float16", {}), ("lm_head", 8, 32, False, "bfloat16", {})]
    if name == "tune":
        db = {"double_buffer": True}
        for M in (16, 8):
            rows.append(("lm_head", M, 32, False, "float16", {}))
            for over in (db, {**db, "blocks_per_sm": 2}, {**db, "unroll": 1},
                         {**db, "unroll": 1, "tiles": 2}, {"blocks_per_sm": 2}):
                rows.append(("lm_head", M, 32, False, "float16", over))
        for shape in ("gate/up", "down", "k/v"):
            rows.append((shape, 16, 32, False, "float16", {}))
            rows.append((shape, 16, 32, False, "float16", db))
        for over in ({**db, "ksplit": 4}, {**db, "ksplit": 16, "warps": 16, "blocks_per_sm": 1}):
            rows.append(("gate/up", 16, 32, False, "float16", over))
        rows.append(("down", 16, 32, False, "float16", {**db, "ksplit": 8, "warps": 8}))
        rows.append(("lm_head", 16, 128, True, "float16", {}))
        rows.append(("lm_head", 16, 128, True, "float16", db))
        rows.append(("lm_head", 16, 32, False, "bfloat16", db))
        rows.append(("lm_head", 1, 32, False, "float16", db))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", help="folder for the JSON and SASS (needed to run the probe)")
    ap.add_argument("--table", metavar="PROBE_JSON", help="print the table of a saved run; run nothing")
    ap.add_argument("--budget", type=float, default=150, help="seconds before rows are skipped")
    ap.add_argument("--plan", default="first", choices=("first", "formats", "tune", "final", "both", "final2"))
    args = ap.parse_args(argv)
    if args.table:
        with open(args.table) as f:
            print(table(json.load(f)["rows"]))
        return
    if not args.out:
        ap.error("--out is required to run the probe")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()

    import torch
    from numba import cuda

    from int4gemv.benchmark.timing import copy_bandwidth
    from int4gemv.kernels.tensor_core import tensor_core_kernel
    from int4gemv.kernels.tensor_core_config import TensorCoreConfig, choose_config, geometry
    from int4gemv.kernels.vector_loads import load16
    from int4gemv.launcher import bind

    dev = cuda.get_current_device()
    sms = dev.MULTIPROCESSOR_COUNT
    bw = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()} SMs {sms} copy {bw / 1e9:.0f} GB/s", flush=True)
    stream = torch.cuda.Stream()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, floors, tinygemm = [], {}, {}

    def as16(t):
        return cuda.as_cuda_array(t.view(torch.int16)).view(np.uint16)

    def time_issue(issue, copies):
        """``issue`` timed in a graph of ``max(20, 2 * copies)`` launches, 20 replays."""
        return time_in_torch_graph(issue, stream, max(20, 2 * copies), replays=20)

    @cuda.jit
    def stream_read(src, sink):
        i, step = cuda.grid(1), cuda.gridsize(1)
        n = src.shape[0] // 16
        acc = np.uint32(0)
        while i + 3 * step < n:
            a, b = load16(src, 16 * i), load16(src, 16 * (i + step))
            c, d = load16(src, 16 * (i + 2 * step)), load16(src, 16 * (i + 3 * step))
            acc ^= a[0] ^ a[1] ^ a[2] ^ a[3] ^ b[0] ^ b[1] ^ b[2] ^ b[3]
            acc ^= c[0] ^ c[1] ^ c[2] ^ c[3] ^ d[0] ^ d[1] ^ d[2] ^ d[3]
            i += 4 * step
        while i < n:
            a = load16(src, 16 * i)
            acc ^= a[0] ^ a[1] ^ a[2] ^ a[3]
            i += step
        if acc == np.uint32(0x9E3779B9):   # never (in practice): keeps the loads alive
            sink[0] = acc

    def floor_us(nbytes):
        nbytes = -(-nbytes // 256) * 256
        if nbytes not in floors:
            copies = max(2, -(-ROTATE_BYTES // nbytes))
            buf = torch.randint(0, 256, (copies * nbytes,), dtype=torch.uint8, device="cuda")
            views = [cuda.as_cuda_array(buf[i * nbytes:(i + 1) * nbytes]) for i in range(copies)]
            sink = cuda.device_array(1, np.uint32)
            grid = (STREAM_BLOCKS_PER_SM * sms, 1, 1)
            bound = [bind(stream_read, (v, sink), grid, (STREAM_THREADS, 1, 1)) for v in views]
            floors[nbytes] = time_issue(lambda i, h: bound[i % copies].launch(h), copies).us
            del buf, views, bound
        return floors[nbytes]

    def tinygemm_us(N, K, M):
        if (N, K, M) not in tinygemm:
            issue, copies, _ = tinygemm_issue(torch, N, K, M, gen)
            tinygemm[(N, K, M)] = time_issue(issue, copies).us
            del issue
            torch.cuda.empty_cache()
        return tinygemm[(N, K, M)]

    def run_tc(shape, M, bs, zp, dtype, override):
        N, K = SHAPES[shape]
        weights, a, out, bias, wbytes = rotated_operands(torch, N, K, M, bs, zp, dtype, gen)
        copies = len(weights)
        config = choose_config(M, N, K, bs, dtype, zp, multiprocessors=sms)
        if override:
            config = TensorCoreConfig(**{**config.__dict__, **override})
        kernel = tensor_core_kernel(config)
        grid, block = geometry(config, N, sms)
        out_view = cuda.as_cuda_array(out) if dtype == "float16" else as16(out)
        bias_view = cuda.as_cuda_array(bias) if dtype == "float16" else as16(bias)
        bound = [bind(kernel, (as16(a).reshape(-1), cuda.as_cuda_array(p), as16(s),
                               cuda.as_cuda_array(z), bias_view, False, out_view, K, N, M),
                      grid, block) for p, s, z in weights]
        bound[0].launch(stream.cuda_stream)
        stream.synchronize()
        y = out.view(M, N).double()
        written = bool(torch.isfinite(y).all())
        ref, size = reference(torch, a, *weights[0], N, K, bs, zp)
        err = float(((y - ref).abs() / size).max())
        del ref, size
        t = time_issue(lambda i, h: bound[i % copies].launch(h), copies)
        nbytes = wbytes + M * K * 2 + M * N * 2
        fl = floor_us(nbytes)
        tg = tinygemm_us(N, K, M) if dtype == "float16" and bs == 32 and not zp else None
        regs = first(kernel.get_regs_per_thread())
        local = first(kernel.get_local_mem_per_thread())
        row = dict(kind="tensor_core", shape=shape, N=N, K=K, M=M, bs=bs, zp=zp, dtype=dtype,
                   us=t.us, floor_us=fl, tinygemm_us=tg, error=err, written=written,
                   p10=t.p10_us, p90=t.p90_us, override=override, regs=regs, local=local,
                   config={k: v for k, v in config.__dict__.items()}, grid=grid[0])
        rows.append(row)
        print(f"tc {shape:8s} M={M:2d} bs={bs:3d} zp={int(zp)} {dtype:8s} {override or ''} "
              f"c{config.tiles}u{config.unroll}k{config.ksplit}w{config.warps}b{config.blocks_per_sm} "
              f"{t.us:8.2f} us floor {fl:7.2f} x{t.us / fl:5.2f} tinygemm {tg or 0:7.2f} "
              f"err {err:.1e} written {written} regs {regs} local {local}", flush=True)
        if shape == "lm_head" and M == 16 and bs == 32 and not zp and override in ({}, {"double_buffer": True}):
            sass = first(kernel.inspect_sass())
            tag = "-db" if override else ""
            with open(os.path.join(args.out, f"sass-tensor-core-{dtype}{tag}.txt"), "w") as f:
                f.write(sass)
            ops = {}
            for line in sass.splitlines():
                parts = line.split("*/")
                if len(parts) > 1 and parts[1].strip():
                    op = parts[1].strip().split()[0].split(".")[0]
                    if op.startswith("@"):
                        op = parts[1].strip().split()[1].split(".")[0]
                    ops[op] = ops.get(op, 0) + 1
            print("sass ops:", sorted(ops.items(), key=lambda kv: -kv[1])[:24], flush=True)
        del weights, bound
        torch.cuda.empty_cache()

    for shape, M, bs, zp, dtype, override in plans(args.plan):
        if time.time() - t0 > args.budget:
            print(f"skipped (budget): {shape} M={M} bs={bs} zp={zp} {dtype} {override}")
            continue
        try:
            run_tc(shape, M, bs, zp, dtype, override)
        except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
            print(f"FAILED {shape} M={M} bs={bs} zp={zp} {dtype} {override}: {exc!r}"[:400], flush=True)
    import subprocess
    commit = os.environ.get("INT4GEMV_COMMIT") or subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               commit=commit or "unknown",
               command=f"python -m bench.probe_tensor_core --plan {args.plan}",
               versions=dict(torch=torch.__version__, numba_cuda=__import__("numba").__version__),
               copy_gbs=bw / 1e9, rows=rows)
    with open(os.path.join(args.out, "probe-tensor-core.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(table(rows))


def table(rows):
    """Target table: µs, × floor, tinygemm / ours, bf16 / fp16 at the same shape, M and overrides."""
    lines = [f"{'shape':8} {'M':>2} {'bs':>3} {'zp':>2} {'dtype':8} {'over':14} {'us':>8} {'xfloor':>6} "
             f"{'tg/us':>6} {'bf/fp':>6}"]
    fp16 = {(r["shape"], r["M"], str(r["override"])): r["us"] for r in rows
            if r["dtype"] == "float16" and r["bs"] == 32 and not r["zp"]}
    for r in rows:
        over = ",".join(f"{k[:2]}{int(v)}" for k, v in r["override"].items())
        tg = f"{r['tinygemm_us'] / r['us']:6.2f}" if r["tinygemm_us"] else f"{'':6}"
        key = (r["shape"], r["M"], str(r["override"]))
        bf = f"{r['us'] / fp16[key]:6.2f}" if r["dtype"] == "bfloat16" and key in fp16 else f"{'':6}"
        lines.append(f"{r['shape']:8} {r['M']:2d} {r['bs']:3d} {int(r['zp']):2d} {r['dtype']:8} {over:14} "
                     f"{r['us']:8.2f} {r['us'] / r['floor_us']:6.2f} {tg} {bf}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
