"""GPU probe of the default tiling: correctness at full size, graph-replay timing, peers, SASS.

``python -m bench.probe_default --out DIR [--budget S]`` (needs a CUDA GPU and torch);
``python -m bench.probe_default --table DIR/probe-default.json`` prints a saved run's target
table (no GPU). For each row: random device weights (packed bytes, scales, zero points) rotated
over more than 400 MB so no launch finds its weight in the 60 MB L2; the kernel bound once and
captured ``launches`` times into a torch CUDA graph; the median per-launch time of the replays; bytes counted in the
weight's format (packed + scales + zero points + activations + output); the term-wise error of
copy 0 against a float64 torch reference. tinygemm (bf16, group 32) and the single-warp
specialization run in the same process on the same shapes. Writes ``probe-default.json`` and
the SASS and resource usage of the lm_head kernel under ``DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from bench.graph_timer import time_in_torch_graph

ROTATE_BYTES = 400 << 20
SHAPES = {"k/v": (1024, 2048), "q/o": (2048, 2048), "gate/up": (6144, 2048),
          "down": (2048, 6144), "lm_head": (151936, 2048)}


def first(value):
    """Numba reports per-signature dicts; each kernel here has one signature."""
    return next(iter(value.values())) if isinstance(value, dict) else value


def torch_weights(torch, N, K, bs, zp, dtype, gen):
    nb = -(-K // bs)
    packed = torch.randint(0, 256, (N * nb * bs // 2,), dtype=torch.uint8, device="cuda",
                           generator=gen)
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    scales = ((torch.rand((N * nb,), device="cuda", generator=gen) + 0.5) * 0.01).to(tdt)
    zps = (torch.randint(0, 256, (N * ((nb + 1) // 2),), dtype=torch.uint8, device="cuda",
                         generator=gen) if zp else torch.zeros(1, dtype=torch.uint8, device="cuda"))
    return packed, scales, zps


def rotated_operands(torch, N, K, M, bs, zp, dtype, gen):
    """``(weights, a, out, bias, wbytes)`` of one probe row: as many :func:`torch_weights` copies
    as rotate over :data:`ROTATE_BYTES` (each its packed bytes, scales and zero points, ``wbytes``
    in all), random ``a [M, K]``, a NaN-poisoned ``out [M * N]`` and a zero ``bias``, in the
    row's dtype."""
    nb = -(-K // bs)
    wbytes = N * nb * bs // 2 + N * nb * 2 + (N * ((nb + 1) // 2) if zp else 0)
    copies = max(1, -(-ROTATE_BYTES // wbytes))
    weights = [torch_weights(torch, N, K, bs, zp, dtype, gen) for _ in range(copies)]
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    a = torch.randn((M, K), device="cuda", generator=gen).to(tdt)
    out = torch.full((M * N,), float("nan"), device="cuda", dtype=tdt)
    bias = torch.zeros(1, device="cuda", dtype=tdt)
    return weights, a, out, bias, wbytes


def tinygemm_issue(torch, N, K, M, gen):
    """``(issue, copies, nbytes)``: tinygemm (bf16, group 32) on random int4-packed weights rotated
    over :data:`ROTATE_BYTES`; ``issue(i, handle)`` runs copy ``i`` on the current torch stream."""
    nbytes = N * K // 2 + (K // 32) * N * 4
    copies = max(1, -(-ROTATE_BYTES // nbytes))
    ws = []
    for _ in range(copies):
        q = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda", generator=gen)
        ws.append((torch._convert_weight_to_int4pack(q, 8),
                   (torch.rand((K // 32, N, 2), device="cuda", generator=gen) * 0.01).to(torch.bfloat16)))
    x = torch.randn((M, K), device="cuda", generator=gen).to(torch.bfloat16)

    def issue(i, h):
        p, sz = ws[i % copies]
        torch._weight_int4pack_mm(x, p, 32, sz)
    return issue, copies, nbytes


def reference(torch, a, packed, scales, zps, N, K, bs, zp):
    nb = -(-K // bs)
    p = packed.view(N, nb * bs // 2)
    q = torch.stack((p & 15, p >> 4), dim=-1).reshape(N, nb * bs)[:, :K].double()
    g = torch.arange(K, device="cuda") // bs
    s = scales.view(N, nb).double()[:, g]
    if zp:
        zb = zps.view(N, -1)
        z = torch.stack((zb & 15, zb >> 4), dim=-1).reshape(N, -1)[:, :nb].double()[:, g]
    else:
        z = 8.0
    deq = (q - z) * s
    a64 = a.double()
    y, size = a64 @ deq.t(), a64.abs() @ deq.abs().t()
    del deq, q, s
    return y, size


def target_table(rows) -> str:
    """The issue-12 rows of a probe run as a text table: per default-tiling row (the first row of
    each shape, M, block size, zero points and dtype: the chosen configuration; later rows are
    tuning experiments) its µs and % of copy, its ratio to M = 1 at the same format, bf16 over
    fp16, and the peers' time over its own (> 1: the default tiling is faster; tinygemm runs
    bf16, the single-warp kernel fp16, both at bs 32 without zero points)."""
    first_rows, peers = {}, {}
    for r in rows:
        if r["kind"] == "default":
            first_rows.setdefault((r["shape"], r["M"], r["bs"], r["zp"], r["dtype"]), r)
        else:
            peers.setdefault((r["kind"], r["shape"], r["M"]), r["us"])
    head = (f"{'shape':8} {'M':>2} {'bs':>3} {'zp':>2} {'dtype':8} {'us':>8} {'%copy':>6} {'/M=1':>5} "
            f"{'bf16/fp16':>9} {'tinygemm/':>9} {'single-warp/':>12}")
    lines = [head]
    for (shape, M, bs, zp, dtype), r in first_rows.items():
        one = first_rows.get((shape, 1, bs, zp, dtype))
        fp16 = first_rows.get((shape, M, bs, zp, "float16"))
        cells = [f"{r['us'] / one['us']:5.2f}" if one else f"{'':5}",
                 f"{r['us'] / fp16['us']:9.2f}" if dtype == "bfloat16" and fp16 else f"{'':9}"]
        for kind, width in (("tinygemm", 9), ("single_warp", 12)):
            peer = peers.get((kind, shape, M)) if bs == 32 and not zp else None
            cells.append(f"{peer / r['us']:{width}.2f}" if peer else f"{'':{width}}")
        lines.append(f"{shape:8} {M:2d} {bs:3d} {int(zp):2d} {dtype:8} {r['us']:8.2f} {r['pct_copy']:6.1f} "
                     + " ".join(cells))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", help="folder for probe-default.json and the SASS (needed to run the probe)")
    ap.add_argument("--budget", type=float, default=420, help="seconds before rows are skipped")
    ap.add_argument("--table", metavar="PROBE_JSON", help="print the target table of a saved run; run nothing")
    args = ap.parse_args(argv)
    if args.table:
        with open(args.table) as f:
            print(target_table(json.load(f)["rows"]))
        return
    if not args.out:
        ap.error("--out is required to run the probe")
    os.makedirs(args.out, exist_ok=True)

    import torch
    from numba import cuda

    from int4gemv.benchmark.timing import copy_bandwidth
    from int4gemv.kernels.default import DefaultConfig, choose_config, default_kernel, geometry
    from int4gemv.launcher import bind

    dev = cuda.get_current_device()
    sms = dev.MULTIPROCESSOR_COUNT
    t0 = time.time()
    bw = copy_bandwidth()   # the fastest of memcpy, a Numba copy kernel and torch's copy_
    print(f"device {torch.cuda.get_device_name()} SMs {sms} copy {bw / 1e9:.0f} GB/s", flush=True)
    stream = torch.cuda.Stream()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []

    def as16(t):
        return cuda.as_cuda_array(t.view(torch.int16)).view(np.uint16)

    def time_issue(issue, copies):
        """``issue`` timed in a graph of ``max(20, 2 * copies)`` launches, 20 replays."""
        return time_in_torch_graph(issue, stream, max(20, 2 * copies), replays=20)

    def run_default(name, N, K, M=1, bs=32, zp=False, dtype="float16", **override):
        if time.time() - t0 > args.budget:
            print(f"skipped (time budget): default {name} M={M} bs={bs} zp={zp} {dtype} {override}")
            return None
        weights, a, out, bias, wbytes = rotated_operands(torch, N, K, M, bs, zp, dtype, gen)
        copies = len(weights)
        config = choose_config(M, N, K, bs, dtype, zp, multiprocessors=sms)
        if override:
            config = DefaultConfig(**{**config.__dict__, **override})
        kernel = default_kernel(config)
        grid, block = geometry(config, N, sms)
        scale_view = (lambda s: cuda.as_cuda_array(s)) if dtype == "float16" else as16
        out_view = cuda.as_cuda_array(out) if dtype == "float16" else as16(out)
        bias_view = cuda.as_cuda_array(bias) if dtype == "float16" else as16(bias)
        bound = [bind(kernel, (as16(a).reshape(-1), cuda.as_cuda_array(p), scale_view(s),
                               cuda.as_cuda_array(z), bias_view, False, out_view, K, N),
                      grid, block, programmatic=config.pdl) for p, s, z in weights]
        bound[0].launch(stream.cuda_stream)
        stream.synchronize()
        y = out.view(M, N).double()
        written = bool(torch.isfinite(y).all())
        ref, size = reference(torch, a, *weights[0], N, K, bs, zp)
        err = float(((y - ref).abs() / size).max())
        del ref, size
        t = time_issue(lambda i, h: bound[i % copies].launch(h), copies)
        nbytes = wbytes + M * K * 2 + M * N * 2
        row = dict(kind="default", shape=name, N=N, K=K, M=M, bs=bs, zp=zp, dtype=dtype,
                   config={k: v for k, v in config.__dict__.items()}, grid=grid[0],
                   us=t.us, p10=t.p10_us, p90=t.p90_us, pct_copy=100 * nbytes / (t.us * 1e-6) / bw,
                   error=err, written=written,
                   regs=first(kernel.get_regs_per_thread()),
                   local=first(kernel.get_local_mem_per_thread()))
        rows.append(row)
        print(f"default {name:8s} M={M:2d} bs={bs:3d} zp={int(zp)} {dtype:8s} "
              f"c{config.cols}l{config.lanes}u{config.unroll}b{config.blocks_per_sm} "
              f"{t.us:8.2f} us {row['pct_copy']:5.1f}% err {err:.1e} regs {row['regs']} "
              f"local {row['local']} written {written}", flush=True)
        if name == "lm_head" and M == 1 and bs == 32 and not zp and not override:
            with open(os.path.join(args.out, f"sass-default-{dtype}.txt"), "w") as f:
                f.write(first(kernel.inspect_sass()))
        del weights, bound
        torch.cuda.empty_cache()
        return row

    def run_tinygemm(name, N, K, M=1):
        issue, copies, nbytes = tinygemm_issue(torch, N, K, M, gen)
        t = time_issue(issue, copies)
        rows.append(dict(kind="tinygemm", shape=name, N=N, K=K, M=M, us=t.us,
                         pct_copy=100 * (nbytes + M * K * 2 + M * N * 2) / (t.us * 1e-6) / bw))
        print(f"tinygemm {name:8s} M={M:2d} {t.us:8.2f} us", flush=True)
        del issue
        torch.cuda.empty_cache()

    def run_single_warp(name, N, K):
        """The single-warp specialization as ``auto`` picks it, through the public API."""
        import int4gemv as ig

        nbytes = N * K // 2 + N * K // 32 * 2
        copies = max(1, -(-ROTATE_BYTES // nbytes))
        ws = [torch_weights(torch, N, K, 32, False, "float16", gen) for _ in range(copies)]
        a = torch.randn((K,), device="cuda", generator=gen).half()
        out = torch.empty((N,), device="cuda", dtype=torch.float16)
        runs = [ig.prepare(a, ig.QuantizedWeight.from_device(p, s.view(N, -1), K=K, N=N,
                                                             block_size=32),
                           out=out, tuning=ig.Tuning("auto"))
                for p, s, _ in ws]
        plan = runs[0].plan
        t = time_issue(lambda i, h: runs[i % copies](h), copies)
        rows.append(dict(kind="single_warp", shape=name, N=N, K=K, M=1, us=t.us,
                         tuning=f"{plan.config.cols}x{plan.config.unroll}"))
        print(f"single-warp {name:8s} {plan.config.cols}x{plan.config.unroll} {t.us:8.2f} us",
              flush=True)
        del ws, runs
        torch.cuda.empty_cache()

    # The issue's target rows first (the defaults as a user gets them), then tuning experiments.
    for name, (N, K) in SHAPES.items():
        run_default(name, N, K)
        run_default(name, N, K, dtype="bfloat16")
        run_single_warp(name, N, K)
        run_tinygemm(name, N, K)
    for bs in (16, 64, 128):
        for zp in (False, True):
            run_default("lm_head", *SHAPES["lm_head"], bs=bs, zp=zp)
    run_default("lm_head", *SHAPES["lm_head"], zp=True)
    for name in ("gate/up", "lm_head"):
        for M in (2, 4, 8, 16):
            for dtype in ("float16", "bfloat16"):
                run_default(name, *SHAPES[name], M=M, dtype=dtype)
            run_tinygemm(name, *SHAPES[name], M=M)
    N, K = SHAPES["lm_head"]
    for cols, unroll, blocks in ((4, 2, 3), (2, 2, 4), (4, 1, 4), (8, 1, 2), (2, 2, 8)):
        run_default("lm_head", N, K, cols=cols, unroll=unroll, blocks_per_sm=blocks)
    run_default("lm_head", N, K, pdl=True)
    for cols, unroll, blocks in ((2, 2, 4), (4, 1, 4)):
        run_default("lm_head", N, K, dtype="bfloat16", cols=cols, unroll=unroll, blocks_per_sm=blocks)
    for M, cols, blocks in ((2, 4, 3), (8, 1, 4), (16, 1, 4), (16, 2, 1)):
        run_default("gate/up", *SHAPES["gate/up"], M=M, cols=cols, blocks_per_sm=blocks)
    bw_end = copy_bandwidth(remeasure=True)
    print(f"copy bandwidth at the end {bw_end / 1e9:.0f} GB/s (start {bw / 1e9:.0f})")
    with open(os.path.join(args.out, "probe-default.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), copy_GBps=bw / 1e9,
                       torch=torch.__version__, rows=rows, seconds=time.time() - t0), f, indent=1)
    print(target_table(rows))
    print(f"done in {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
