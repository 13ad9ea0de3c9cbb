"""Kernel probe for one GPU call: correctness at real sizes, graph-replay timings per variant and
tuning, registers / local memory / SASS instruction mix. Writes JSON and SASS under $OUT (or
./probe_out) and prints a short table last.

    python3 -m bench.probe_kernels [--shapes lm_head,q_proj] [--tunings 4x4,2x4]
"""

from __future__ import annotations

__all__ = ["main"]

import argparse
import collections
import json
import os
import re
import time

import numpy as np


def _parse():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="")
    p.add_argument("--tunings", default="1x4,2x4,4x4,8x4,2x8,4x2,4x8,8x2")
    p.add_argument("--rotate-mb", type=int, default=512)
    p.add_argument("--replays", type=int, default=30)
    return p.parse_args()


def main():
    args = _parse()
    import torch
    from numba import cuda

    import int4gemv as ig
    import int4gemv.pipeline
    from int4gemv.kernels import default_kernel, single_warp_kernel

    out_dir = os.environ.get("OUT", "probe_out")
    os.makedirs(out_dir, exist_ok=True)
    wl = json.load(open(os.path.join(os.path.dirname(__file__), "workloads", "qwen3_vl_2b_decode.json")))
    shapes = [(p["name"], p["N"], p["K"]) for p in wl["projections"]]
    if args.shapes:
        keep = set(args.shapes.split(","))
        shapes = [s for s in shapes if s[0] in keep]
    # "CxU[@B][/G]": B = launch bound in blocks per SM (single_warp.MIN_BLOCKS); G = a grid of at
    # most G blocks per SM, balanced so that every block takes the same number of column groups.
    tunings = [_parse_tuning(t) for t in args.tunings.split(",") if t]
    dev = torch.device("cuda")
    torch_stream = torch.cuda.Stream()
    rng = np.random.default_rng(0)

    # Copy bandwidth (read + write), 1 GiB.
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev).random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(20):
        e0.record(); dst.copy_(src); e1.record(); e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e-3)
    copy_bw = 2 * src.numel() / np.median(ts)
    del src, dst
    print(f"device {torch.cuda.get_device_name()} copy bandwidth {copy_bw / 1e9:.0f} GB/s", flush=True)

    rows, records = [], []
    for name, N, K in shapes:
        # One weight on the host for correctness, random scales in a realistic range.
        wf = rng.standard_normal((N, K), dtype=np.float32) * 0.02
        w = ig.quantize(wf, 32)
        a_h = rng.standard_normal(K).astype(np.float16)
        bias_h = rng.standard_normal(N).astype(np.float16)
        ref = _ref_torch(torch, w, a_h, bias_h)
        a_d = cuda.to_device(a_h)
        bias_d = cuda.to_device(bias_h)
        variants = [("default", None)] + [("single_warp", t) for t in tunings]
        # Rotated copies for timing: random bytes and scales generated on the device.
        nbytes = w.nbytes
        copies = max(2, -(-args.rotate_mb * 2**20 // nbytes))
        rot = []
        for _ in range(copies):
            ww = ig.QuantizedWeight(w.packed, w.scales, K=K, N=N, block_size=32)
            pk = torch.randint(0, 256, (N, K // 8 * 4), dtype=torch.uint8, device=dev)
            sc = (torch.rand((N, K // 32), device=dev) * 0.01 + 0.001).half()
            from int4gemv.weights import device_views
            words = cuda.as_cuda_array(pk.view(torch.int32)).view(np.uint32)
            ww._device = device_views(words, cuda.as_cuda_array(sc),
                                      cuda.as_cuda_array(torch.zeros((1, 1), dtype=torch.uint8, device=dev)),
                                      cuda.as_cuda_array(torch.zeros(1, dtype=torch.float16, device=dev)))
            ww._keep = (pk, sc)
            rot.append(ww)
        out_d = cuda.device_array(N, np.float16)
        from int4gemv.kernels import single_warp as _sw
        plain_geometry = _sw.geometry
        for vname, tun in variants:
            if tun:
                _sw.geometry = plain_geometry if not tun[3] else _balanced_geometry(tun[3])
                _sw.MIN_BLOCKS.clear()
                _sw.MIN_BLOCKS[(tun[0], tun[1], _sw.activation_mode(K, tun[1]))] = tun[2]
                ig.pipeline.clear_caches()  # plans and bound launches are cached
            env = {}
            if tun:
                env = {"INT4GEMV_SINGLE_WARP_COLS": str(tun[0]), "INT4GEMV_SINGLE_WARP_UNROLL": str(tun[1])}
            os.environ.update(env)
            try:
                out_d[:] = np.full(N, np.nan, np.float16)
                ig.gemv(a_d, w, bias=bias_d, out=out_d, variant=vname)
                y = out_d.copy_to_host().astype(np.float64)
                written = bool(np.all(np.isfinite(y)))
                err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
                # Graph of G launches over rotated weights.
                G = min(len(rot), 64) if nbytes < 50e6 else len(rot)
                s_handle = torch_stream.cuda_stream
                with torch.cuda.stream(torch_stream):
                    for i in range(2):
                        ig.gemv(a_d, rot[i], out=out_d, stream=s_handle, variant=vname)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with cuda.defer_cleanup(), torch.cuda.graph(g, stream=torch_stream):
                    for i in range(G):
                        ig.gemv(a_d, rot[i % len(rot)], out=out_d, stream=s_handle, variant=vname)
                g.replay(); torch.cuda.synchronize()
                # Sanity: one eager launch timed alone with events.
                e0.record(torch_stream)
                ig.gemv(a_d, rot[0], out=out_d, stream=s_handle, variant=vname)
                e1.record(torch_stream); e1.synchronize()
                single_us = e0.elapsed_time(e1) * 1e3
                ts = []
                with torch.cuda.stream(torch_stream):  # replay() runs on the current stream
                    for _ in range(args.replays):
                        e0.record(); g.replay(); e1.record(); e1.synchronize()
                        ts.append(e0.elapsed_time(e1) * 1e-3 / G)
                t = float(np.median(ts))
                plan = ig.explain(a_d, w, variant=vname)
                label = vname if not tun else (f"sw{tun[0]}x{tun[1]}{plan.activations[:3]}"
                                               + (f"@{tun[2]}" if tun[2] else "")
                                               + (f"/{tun[3]}" if tun[3] else ""))
                rec = dict(shape=name, N=N, K=K, variant=label, us=t * 1e6, gbs=nbytes / t / 1e9,
                           pct_copy=100 * nbytes / t / copy_bw, rel_err=err, all_written=written,
                           kernel=plan.kernel, grid=plan.grid[0], single_eager_us=single_us, spread_us=float((np.percentile(ts, 90) - np.percentile(ts, 10)) * 1e6))
                records.append(rec)
                rows.append(rec)
                print(json.dumps(rec), flush=True)
                del g
            finally:
                for k in env:
                    os.environ.pop(k, None)
        _sw.geometry = plain_geometry
        ig.pipeline.clear_caches()
        try:
            t = _tinygemm_us(torch, N, K, copies=max(2, -(-args.rotate_mb * 2**20 // nbytes)), G=64, replays=args.replays)
            rec = dict(shape=name, N=N, K=K, variant="tinygemm", us=t, gbs=nbytes / t * 1e-3,
                       pct_copy=100 * nbytes / (t * 1e-6) / copy_bw, rel_err=float("nan"), single_eager_us=0.0)
            records.append(rec); rows.append(rec)
        except Exception as exc:
            print("tinygemm failed:", repr(exc)[:300])
        del rot
        torch.cuda.empty_cache()

    # Eager latency of gemv() on a pre-built weight (small shape).
    w = ig.quantize(rng.standard_normal((2048, 2048), dtype=np.float32), 32)
    a_d = cuda.to_device(rng.standard_normal(2048).astype(np.float16))
    o_d = cuda.device_array(2048, np.float16)
    eager = {}
    for vname in ("default", "single_warp"):
        for _ in range(50):
            ig.gemv(a_d, w, out=o_d, variant=vname)
        cuda.synchronize()
        n = 300  # fewer than the launch queue holds: issue time is the Python cost
        t0 = time.perf_counter()
        for _ in range(n):
            ig.gemv(a_d, w, out=o_d, variant=vname)
        t1 = time.perf_counter()
        cuda.synchronize()
        eager[vname] = (t1 - t0) / n * 1e6
        eager[vname + " (to completion)"] = (time.perf_counter() - t0) / n * 1e6
    print("eager gemv() us/call:", eager, flush=True)
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        ig.gemv(a_d, w, out=o_d, variant="single_warp")
    prof.disable()
    cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)

    # Registers, local memory, SASS instruction mix.
    sass_info = {}
    for label, kern in [("default", default_kernel)] + [
            (f"sw{c}x{u}{m[:3]}@{b}", single_warp_kernel(c, u, m, False, b)) for c, u, b, _ in tunings
            for m in ("registers", "streaming")]:
        for sig, k in kern.overloads.items():
            regs = k.regs_per_thread
            local = k.local_mem_per_thread
            try:
                sass = k.inspect_sass()
            except Exception as exc:  # nvdisasm missing
                sass = f"inspect_sass failed: {exc}"
            ops = collections.Counter(m.group(1).split(".")[0]
                                      for m in re.finditer(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass, re.M))
            with open(os.path.join(out_dir, "sass_all.txt"), "a") as f:
                f.write(f"==== {label}\n{sass}\n")
            sass_info[label] = dict(regs=regs, local=local, ops=dict(ops.most_common(25)))
            print(label, "regs", regs, "local", local, dict(ops.most_common(14)), flush=True)
            break

    with open(os.path.join(out_dir, "probe.json"), "w") as f:
        json.dump(dict(copy_bw=copy_bw, records=records, eager_us=eager, sass=sass_info,
                       device=torch.cuda.get_device_name()), f, indent=1)
    print(f"\n{'shape':10} {'variant':10} {'us':>8} {'GB/s':>7} {'%copy':>6} {'err':>8} {'1-eager':>8}")
    for r in rows:
        print(f"{r['shape']:10} {r['variant']:10} {r['us']:8.2f} {r['gbs']:7.0f} {r['pct_copy']:6.1f} "
              f"{r['rel_err']:8.1e} {r['single_eager_us']:8.1f}")


def _parse_tuning(text):
    """``"CxU[@B][/G]"`` → ``(C, U, B, G)`` (0 where absent)."""
    text, _, cap = text.partition("/")
    text, _, bound = text.partition("@")
    c, u = (int(x) for x in text.split("x"))
    return c, u, int(bound or 0), int(cap or 0)


def _balanced_geometry(cap):
    """``single_warp.geometry`` with at most ``cap`` blocks per SM and every block taking the
    same number of column groups (the grid trimmed to whole rounds)."""
    def geometry(N, cols, multiprocessors):
        groups = -(-N // cols)
        rounds = -(-groups // (cap * multiprocessors))
        return (max(1, -(-groups // rounds)), 1, 1), (32, 1, 1)
    return geometry


def _tinygemm_us(torch, N, K, copies, G, replays):
    dev = torch.device("cuda")
    ws = []
    for _ in range(min(copies, G)):
        wq = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=dev)
        packed = torch._convert_weight_to_int4pack(wq, 8)
        sz = (torch.rand((K // 32, N, 2), device=dev) * 0.01).to(torch.bfloat16)
        ws.append((packed, sz))
    x = torch.randn((1, K), device=dev, dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for p, sz in ws[:2]:
            torch._weight_int4pack_mm(x, p, 32, sz)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for i in range(G):
            p, sz = ws[i % len(ws)]
            torch._weight_int4pack_mm(x, p, 32, sz)
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    with torch.cuda.stream(s):
        for _ in range(replays):
            e0.record(); g.replay(); e1.record(); e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e3 / G)
    return float(np.median(ts))


def _ref_torch(torch, w, a, bias):
    dev = torch.device("cuda")
    q = torch.from_numpy(w.unpacked()).to(dev).double()
    zp = torch.from_numpy(w.zero_point_values()).to(dev).double()
    sc = torch.from_numpy(w.scales.astype(np.float64)).to(dev)
    kb = torch.arange(w.K, device=dev) // w.block_size
    W = (q - zp[:, kb]) * sc[:, kb]
    y = W @ torch.from_numpy(a.astype(np.float64)).to(dev) + torch.from_numpy(bias.astype(np.float64)).to(dev)
    return y.cpu().numpy()


if __name__ == "__main__":
    main()
