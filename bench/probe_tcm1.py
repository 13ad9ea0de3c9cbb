"""Experiment (issue 19): M = 1 on tensor cores, the weights as the A operand and the scale
groups as B's columns, against the stream floor and the package's kernels in one process.

    python -m bench.probe_tcm1 [--configs w8b3u2,w8b3u2o,...] [--shapes NxK,...] [--out DIR] [--sass DIR]

Device only (a probe, not a package kernel). Scope: fp16, block size 32, no zero points, ``K`` a
multiple of 128, ``N`` a multiple of 16.

Why (bench/NOTES.md, session 12): on the H200 the default tiling's lm_head time (53–55 µs) is
its fold, not its bytes: 2.6–2.8 SASS instructions per element, half of them the products
(one ``HFMA2`` per pair of elements) and their fp16 → fp32 conversions. One
``mma.sync.m16n8k16`` takes 256 weight elements of a warp (8 per lane) in one instruction.

Mapping of one warp, a tile of 16 columns (``A``'s rows ``g`` and ``g + 8``, lane ``l = 4g + t``)
and one step of 128 ``k`` (64 bytes per column)::

    lane (g, t) loads 16 bytes of column g and of column g + 8 at byte 16 t of the step:
        32 nibbles each = one group of 32 (group 4 step + t), 4 words w
    word w, half h (0, 1): A fragment a0 = lo_h(col g), a2 = hi_h(col g), a1/a3 the same of g + 8
        (lo_0 = (k0, k4), hi_0 = (k1, k5), lo_1 = (k2, k6), hi_1 = (k3, k7): the exact (q - 8)
        pairs of the lop3 dequant); the mma's k order is a permutation shared by A and B
    B column n = 4 x (slice): B[., n] holds the activations of the slice t = n only, so lane (g, t)
        supplies B iff g == t (others hold 0), read from a shared table of the pairs
    after the step's 8 mma: D[g, n] (n < 4) is column g's sum over group 4 step + n, unscaled;
        lanes t < 2 hold n = 2t, 2t + 1 and multiply by the two scales, in float32.

So the products and the group sums leave the FP16/FP32 pipes: per 64 elements of a lane, 2
16-byte loads, 32 LOP3 + 8 SHF + 32 HFMA2 (dequant), 8 HMMA, 4 predicated LDS.128, and a 10-
instruction epilogue (about 1.5 per element against 2.6–2.8).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re

import numpy as np

from .probe_ptx import launch_and_time, probe_intrinsics, ptx_to_sass

__all__ = ["main"]


@functools.lru_cache(maxsize=None)
def tcm1_kernel(NW: int, B: int, U: int, K: int, offset: bool = False):
    """``NW`` warps per block, launch bound ``B`` blocks per SM, ``U`` steps loaded at once.

    ``offset``: A holds ``1024 + n`` (lo) and ``1024 + 16 n`` (hi) straight from the LOP3, with
    no HFMA2; B's hi pairs are the activations / 16, and each group's sum subtracts
    ``1032 S_even + 1152 S_odd/16`` (its activations' share of the offsets and of the zero point 8),
    computed once per block from the table."""
    from numba import cuda, float32, uint32

    from int4gemv.kernels.intrinsics import and_or, half2_fma, half2_sum, pack_half2, shfl_xor
    from int4gemv.kernels.mma import mma_f16
    from int4gemv.kernels.vector_loads import load4, load16


    f = probe_intrinsics()
    smem_base, lds128, pack_pinned, f16 = f["smem_base"], f["lds128"], f["pack_pinned"], f["f16"]
    assert K % 128 == 0 and (K // 128) % U == 0
    STEPS = K // 128
    KW = K // 8                      # uint32 words per column
    G = K // 32                      # scales per column
    TABLE = K // 2                   # uint32 pairs in the activation table
    THREADS = 32 * NW
    ONE, M1032 = 0x3C003C00, 0xE408E408       # 1.0, -1032.0 as half2
    SIXTEENTH, M72 = 0x2C002C00, 0xD480D480   # 1/16, -72.0
    MASK_LO, MASK_HI, MAGIC = 0x000F000F, 0x00F000F0, 0x64006400
    NRAW = 8 * U

    @cuda.jit(launch_bounds=(THREADS, B))
    def kernel(words, scales, x, out, tiles):
        table = cuda.shared.array(TABLE, uint32, alignment=16)
        corr = cuda.shared.array(G, float32)
        tid = cuda.threadIdx.x
        for i in range(tid, TABLE, THREADS):
            k = (i // 4) * 8 + i % 4
            if offset and i % 2 == 1:
                table[i] = pack_half2(f16(x[k]) * float32(0.0625), f16(x[k + 4]) * float32(0.0625))
            else:
                table[i] = pack_pinned(x[k], x[k + 4])
        cuda.syncthreads()
        if offset:
            for i in range(tid, G, THREADS):
                c = float32(0.0)
                for j in range(16):
                    c += half2_sum(table[i * 16 + j]) * (float32(1152.0) if j % 2 else float32(1032.0))
                corr[i] = c
            cuda.syncthreads()
        t0 = smem_base(table)
        lane = tid % 32
        g, t = lane // 4, lane % 4
        feeds = g == t                     # this lane supplies B's column t
        te = t & 1                         # epilogue lanes t < 2; t >= 2 repeat them on zeros
        warps = cuda.gridDim.x * NW
        raw = cuda.local.array(NRAW, uint32)
        bv = cuda.local.array(16, uint32)
        for i in range(16):
            bv[i] = uint32(0)
        tile = cuda.blockIdx.x * NW + tid // 32
        while tile < tiles:
            colg = uint32(tile) * 16 + uint32(g)
            wa = colg * KW + uint32(t) * 4
            wb = wa + 8 * KW
            sa = colg * G + uint32(te) * 2
            sb = sa + 8 * G
            acc_a = float32(0.0)
            acc_b = float32(0.0)
            for s0 in range(0, STEPS, U):
                for u in range(U):
                    q = load16(words, wa + (s0 + u) * 16)
                    r = load16(words, wb + (s0 + u) * 16)
                    for w in range(4):
                        raw[u * 8 + w] = q[w]
                        raw[u * 8 + 4 + w] = r[w]
                for u in range(U):
                    s = s0 + u
                    if feeds:
                        for w in range(4):
                            v = lds128(t0 + ((s * 4 + t) * 16 + w * 4) * 4)
                            bv[w * 4] = v[0]
                            bv[w * 4 + 1] = v[1]
                            bv[w * 4 + 2] = v[2]
                            bv[w * 4 + 3] = v[3]
                    d0 = float32(0.0)
                    d1 = float32(0.0)
                    d2 = float32(0.0)
                    d3 = float32(0.0)
                    for w in range(4):
                        p = raw[u * 8 + w]
                        p8 = raw[u * 8 + 4 + w]
                        for h in range(2):
                            wp = p >> (8 * h)
                            wp8 = p8 >> (8 * h)
                            a0 = and_or(wp, MASK_LO, MAGIC)
                            a2 = and_or(wp, MASK_HI, MAGIC)
                            a1 = and_or(wp8, MASK_LO, MAGIC)
                            a3 = and_or(wp8, MASK_HI, MAGIC)
                            if not offset:
                                a0 = half2_fma(a0, ONE, M1032)
                                a2 = half2_fma(a2, SIXTEENTH, M72)
                                a1 = half2_fma(a1, ONE, M1032)
                                a3 = half2_fma(a3, SIXTEENTH, M72)
                            d0, d1, d2, d3 = mma_f16(a0, a1, a2, a3, bv[w * 4 + h * 2],
                                                     bv[w * 4 + h * 2 + 1], d0, d1, d2, d3)
                    sc = load4(scales, sa + s * 4)[0]
                    sc8 = load4(scales, sb + s * 4)[0]
                    if offset:
                        c0 = corr[s * 4 + te * 2]
                        c1 = corr[s * 4 + te * 2 + 1]
                        d0 -= c0
                        d1 -= c1
                        d2 -= c0
                        d3 -= c1
                    acc_a += d0 * f16(sc & 0xFFFF) + d1 * f16(sc >> 16)
                    acc_b += d2 * f16(sc8 & 0xFFFF) + d3 * f16(sc8 >> 16)
            if t >= 2:
                acc_a = float32(0.0)
                acc_b = float32(0.0)
            acc_a += shfl_xor(acc_a, 1)
            acc_b += shfl_xor(acc_b, 1)
            if t == 0:
                out[colg] = acc_a
                out[colg + 8] = acc_b
            tile += warps
    return kernel, THREADS


_SPEC = re.compile(r"w(\d+)b(\d+)u(\d+)(o?)")


def parse(spec: str) -> tuple:
    m = _SPEC.fullmatch(spec)
    if not m:
        raise ValueError(f"config {spec!r} is not w<warps>b<blocks/SM>u<steps>[o]")
    NW, B, U, offset = m.groups()
    return int(NW), int(B), int(U), offset == "o"


def sass(spec: str, K: int, out_dir: str) -> dict:
    """Offline SASS of one configuration (:func:`.probe_ptx.ptx_to_sass`)."""
    from numba import types

    NW, B, U, offset = parse(spec)
    kern, threads = tcm1_kernel(NW, B, U, K, offset)
    u32, u16 = types.Array(types.uint32, 1, "C"), types.Array(types.uint16, 1, "C")
    sig = (u32, u16, u16, types.Array(types.float32, 1, "C"), types.int64)
    report, listing = ptx_to_sass(kern.py_func, sig, threads, B, os.path.join(out_dir, f"sass-tcm1-{spec}.txt"))
    return {"spec": spec, "ptxas": report[-2:],
            "static": len(re.findall(r"/\*[0-9a-f]{4,}\*/\s", listing)), "hmma": listing.count("HMMA")}


def run_shape(N: int, K: int, configs: list, replays: int) -> dict:
    """Time the floor, the default tiling and each configuration on one ``N x K`` weight (bs 32)."""
    from numba import cuda

    import int4gemv
    from int4gemv.benchmark import GemvBench

    rng = np.random.default_rng(7)
    w = int4gemv.quantize((rng.standard_normal((N, K)) * 0.05).astype(np.float16), block_size=32)
    rows = []
    with GemvBench(w) as bench:
        floor = bench.floor(replays=replays)
        rows.append({"method": "stream floor", "us": floor.us, "kernel": floor.kernel})
        r = bench.time(int4gemv.Tuning(variant="default"), replays=replays)
        rows.append({"method": "default", "us": r.us, "rel_err": r.rel_err, "kernel": r.kernel})
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
        x16 = bench.x_dev.reshape(-1).view(np.uint16)
        out = cuda.device_array(N, np.float32)
        ref = bench.ref[0]
        for spec in configs:
            NW, B, U, offset = parse(spec)
            try:
                kern, threads = tcm1_kernel(NW, B, U, K, offset)
                tiles = N // 16
                grid = min(-(-tiles // NW), sms * B)
                y, t = launch_and_time(
                    bench, kern, lambda d: (d["words_flat"], d["scales_flat"].view(np.uint16), x16, out, tiles),
                    grid, threads, out, replays)
                bad = ~np.isclose(y, ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())
                err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
                rows.append({"method": f"tcm1 {spec}", "us": t.us, "p10": t.p10_us, "p90": t.p90_us,
                             "rel_err": err, "bad_columns": int(bad.sum()), "grid": grid})
            except Exception as exc:  # noqa: BLE001 - a probe row records its failure
                rows.append({"method": f"tcm1 {spec}", "error": repr(exc)[:600]})
            print(json.dumps(rows[-1]), flush=True)
    for r in rows:    # the results schema (DESIGN.md): each row carries its run's floor
        r["floor_us"] = floor.us
    print(f"{N}x{K}")
    for r in rows:
        us = r.get("us")
        pct = f"{100 * floor.us / us:5.1f}%" if us else "  -  "
        print(f"  {r['method']:20s} {us if us is None else round(us, 2)!s:>8} µs  {pct} of floor  "
              f"err {r.get('rel_err')}  bad {r.get('bad_columns')}  {r.get('error', '')}")
    return {"N": N, "K": K, "floor_us": floor.us, "rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="w8b3u2,w6b3u2,w8b3u4,w6b3u4,w4b4u2")
    p.add_argument("--shapes", default="151936x2048", help="comma-separated NxK")
    p.add_argument("--replays", type=int, default=40)
    p.add_argument("--out", default=None)
    p.add_argument("--sass", default=None, help="offline SASS only, into this folder (no GPU)")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    configs = args.configs.split(",")
    if args.sass:
        for spec in configs:
            print(json.dumps(sass(spec, shapes[0][1], args.sass)))
        return 0
    for N, K in shapes:
        result = run_shape(N, K, configs, args.replays)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, f"probe-tcm1-{N}x{K}.json"), "w") as fh:
                json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
