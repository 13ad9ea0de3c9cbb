"""Experiment (issue 19): an M = 1 GEMV fed by bulk asynchronous copies (TMA, 1-D) into a ring
of shared-memory stages, against the stream floor and the package's kernels in one process.

    python -m bench.probe_bulk [--configs c16w8s2b2,...] [--sass DIR]

Device only (no simulator stand-ins: this is a probe, not a package kernel). Scope: fp16, block
size 32, no zero points, ``K`` a multiple of 1024, ``N`` a multiple of the stage's columns.

The idea (bench/NOTES.md, session 12): the package's M = 1 kernels hold their bytes in flight in
registers, so bytes in flight and occupancy trade against each other, and every lane spends
instructions on addresses. Here one lane of a producer warp issues
``cp.async.bulk.shared::cluster.global`` copies of whole column tiles (``C`` columns' packed
bytes, then their scales: both contiguous in the MatMulNBits layout) into ``S`` stages, each
completed through an ``mbarrier`` transaction count; ``NW`` consumer warps wait on the stage's
barrier, read their column with ``ld.shared.v4``, fold it with activations held in registers
(re-paired once), and release the stage on a second barrier. Bytes in flight per SM are
``S x stage`` per block, independent of registers.

Lane mapping: lane ``l`` reads, for each 512-byte chunk ``ch`` of a column, the 16 bytes at
``ch*512 + 16 l``: 32 nibbles, exactly one group of 32 (group ``ch*32 + l``), so one scale per
16-byte read. Its activations ``k = ch*1024 + 32 l + 0..31`` are loaded once, as fp16 pairs
``(a[k], a[k+4])`` matching the dequant's pairs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import time

import numpy as np

from .probe_ptx import launch_and_time, probe_intrinsics, ptx_to_sass

__all__ = ["main"]


@functools.lru_cache(maxsize=None)
def bulk_kernel(C: int, NW: int, S: int, K: int, blocks_per_sm: int, fold: bool = True):
    """The kernel for ``C`` columns per stage, ``NW`` consumer warps, ``S`` stages and this
    ``K``; ``fold=False`` only waits and releases (the ring's own floor)."""
    from numba import cuda, float32, uint16, uint32, uint64

    from int4gemv.kernels.intrinsics import and_or, half2_fma, half2_sum, shfl_xor

    f = probe_intrinsics()
    smem_base, mbar_init, fence_init, mbar_expect = f["smem_base"], f["mbar_init"], f["fence_init"], f["mbar_expect"]
    mbar_arrive, mbar_wait, bulk_copy = f["mbar_arrive"], f["mbar_wait"], f["bulk_copy"]
    lds128, lds16, pack_pinned, f16 = f["lds128"], f["lds16"], f["pack_pinned"], f["f16"]
    assert K % 1024 == 0 and C % NW == 0
    KB = K // 2                       # bytes of one column
    G = K // 32                       # groups (scales) of one column
    CH = KB // 512                    # 16-byte reads per lane per column
    SW = C * KB // 4                  # uint32 words of a stage's packed bytes
    SS = C * G                        # scales of a stage
    STAGE_BYTES = C * KB + SS * 2
    CPW = C // NW                     # columns per consumer warp per stage
    THREADS = 32 * (NW + 1)
    RING, SRING, BARS, NACT = S * SW, S * SS, 2 * S, CH * 16
    ONE, M1032 = 0x3C003C00, 0xE408E408       # 1.0, -1032.0 as half2
    SIXTEENTH, M72 = 0x2C002C00, 0xD480D480   # 1/16, -72.0

    @cuda.jit(launch_bounds=(THREADS, blocks_per_sm))
    def kernel(words, scales, x, out, tiles):
        ring = cuda.shared.array(RING, uint32, alignment=128)
        sring = cuda.shared.array(SRING, uint16, alignment=128)
        bars = cuda.shared.array(BARS, uint64)
        ring0, sring0, bar0 = smem_base(ring), smem_base(sring), smem_base(bars)
        tid = cuda.threadIdx.x
        warp, lane = tid // 32, tid % 32
        if tid == 0:
            for s in range(S):
                mbar_init(bar0 + 8 * s, 1)
                mbar_init(bar0 + 8 * (S + s), NW * 32)
            fence_init()
        cuda.syncthreads()
        block, blocks = uint32(cuda.blockIdx.x), uint32(cuda.gridDim.x)
        mine = (uint32(tiles) - block + blocks - 1) // blocks
        if warp == NW:
            if lane == 0:
                s = uint32(0)
                phase = uint32(0)
                tile = block
                for it in range(mine):
                    if it >= S:
                        mbar_wait(bar0 + 8 * (S + s), phase ^ 1)
                    full = bar0 + 8 * s
                    mbar_expect(full, STAGE_BYTES)
                    bulk_copy(ring0 + s * (SW * 4), words, uint64(tile) * SW, C * KB, full)
                    bulk_copy(sring0 + s * (SS * 2), scales, uint64(tile) * SS, SS * 2, full)
                    tile += blocks
                    s += 1
                    if s == S:
                        s = uint32(0)
                        phase ^= 1
            return
        acts = cuda.local.array(NACT, uint32)
        for ch in range(CH):
            for j in range(4):
                for p in range(4):
                    k = ch * 1024 + lane * 32 + j * 8 + p
                    acts[ch * 16 + j * 4 + p] = pack_pinned(x[k], x[k + 4])
        part = cuda.local.array(CPW, float32)
        wbase = ring0 + uint32(warp * CPW * KB + lane * 16)
        sbase = sring0 + uint32((warp * CPW * G + lane) * 2)
        s = uint32(0)
        phase = uint32(0)
        tile = block
        for it in range(mine):
            mbar_wait(bar0 + 8 * s, phase)
            for c in range(CPW):
                total = float32(0.0)
                for ch in range(CH):
                    w4 = lds128(wbase + s * (SW * 4) + (c * KB + ch * 512))
                    sc = lds16(sbase + s * (SS * 2) + (c * G + ch * 32) * 2)
                    if fold:
                        acc0 = uint32(0)
                        acc1 = uint32(0)
                        for j in range(4):
                            w = w4[j]
                            a = ch * 16 + j * 4
                            lo0 = half2_fma(and_or(w, 0x000F000F, 0x64006400), ONE, M1032)
                            hi0 = half2_fma(and_or(w, 0x00F000F0, 0x64006400), SIXTEENTH, M72)
                            w2 = w >> 8
                            lo1 = half2_fma(and_or(w2, 0x000F000F, 0x64006400), ONE, M1032)
                            hi1 = half2_fma(and_or(w2, 0x00F000F0, 0x64006400), SIXTEENTH, M72)
                            if j < 2:
                                acc0 = half2_fma(lo0, acts[a], acc0)
                                acc0 = half2_fma(hi0, acts[a + 1], acc0)
                                acc0 = half2_fma(lo1, acts[a + 2], acc0)
                                acc0 = half2_fma(hi1, acts[a + 3], acc0)
                            else:
                                acc1 = half2_fma(lo0, acts[a], acc1)
                                acc1 = half2_fma(hi0, acts[a + 1], acc1)
                                acc1 = half2_fma(lo1, acts[a + 2], acc1)
                                acc1 = half2_fma(hi1, acts[a + 3], acc1)
                        total += (half2_sum(acc0) + half2_sum(acc1)) * f16(sc)
                    else:
                        total += float32(w4[0] ^ w4[1] ^ w4[2] ^ w4[3] ^ sc)
                part[c] = total
            mbar_arrive(bar0 + 8 * (S + s))
            for c in range(CPW):
                v = part[c]
                v += shfl_xor(v, 16)
                v += shfl_xor(v, 8)
                v += shfl_xor(v, 4)
                v += shfl_xor(v, 2)
                v += shfl_xor(v, 1)
                if lane == 0:
                    out[uint64(tile) * C + warp * CPW + c] = v
            tile += blocks
            s += 1
            if s == S:
                s = uint32(0)
                phase ^= 1
    return kernel, THREADS, S * (SW * 4 + SS * 2) + 16 * S


_SPEC = re.compile(r"c(\d+)w(\d+)s(\d+)b(\d+)")


def parse(spec: str) -> tuple:
    m = _SPEC.fullmatch(spec)
    if not m:
        raise ValueError(f"config {spec!r} is not c<C>w<NW>s<S>b<blocks/SM>")
    return tuple(int(g) for g in m.groups())


def sass(spec: str, K: int, out_dir: str, fold: bool = True) -> dict:
    """Offline SASS of one configuration (:func:`.probe_ptx.ptx_to_sass`): registers, spills, size."""
    from numba import types

    C, NW, S, B = parse(spec)
    kern, threads, smem = bulk_kernel(C, NW, S, K, B, fold)
    sig = (types.Array(types.uint32, 1, "C"), types.Array(types.uint16, 1, "C"),
           types.Array(types.uint16, 1, "C"), types.Array(types.float32, 1, "C"), types.int64)
    name = f"sass-bulk-{spec}{'' if fold else '-nofold'}.txt"
    report, listing = ptx_to_sass(kern.py_func, sig, threads, B, os.path.join(out_dir, name))
    regs = re.search(r"Used (\d+) registers", "\n".join(report))
    return {"spec": spec, "ptxas": report[-2:], "regs": regs and int(regs.group(1)),
            "static": len(re.findall(r"/\*[0-9a-f]{4,}\*/\s", listing)), "smem": smem}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="c8w8s4b2,c8w8s5b2,c8w4s5b3,c16w8s2b2,c16w16s2b1")
    p.add_argument("--shape", default="151936x2048")
    p.add_argument("--replays", type=int, default=40)
    p.add_argument("--out", default=None, help="write probe-bulk-*.json here")
    p.add_argument("--sass", default=None, help="offline SASS only, into this folder (no GPU)")
    args = p.parse_args(argv)
    N, K = (int(v) for v in args.shape.split("x"))
    if args.sass:
        for spec in args.configs.split(","):
            print(json.dumps(sass(spec, K, args.sass)))
        return 0
    from numba import cuda

    import int4gemv
    from int4gemv.benchmark import GemvBench

    rng = np.random.default_rng(7)
    w = int4gemv.quantize((rng.standard_normal((N, K)) * 0.05).astype(np.float16), block_size=32)
    rows = []
    with GemvBench(w) as bench:
        floor = bench.floor(replays=args.replays)
        rows.append({"method": "stream floor", "us": floor.us, "kernel": floor.kernel})
        base = {}
        for label, tuning in (("default", int4gemv.Tuning(variant="default")), ("auto", "auto")):
            r = bench.time(tuning, replays=args.replays)
            base[label] = r.us
            rows.append({"method": label, "us": r.us, "rel_err": r.rel_err, "kernel": r.kernel})
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
        x16 = bench.x_dev.reshape(-1).view(np.uint16)
        out = cuda.device_array(N, np.float32)
        for spec in args.configs.split(","):
            C, NW, S, B = parse(spec)
            for fold in (True, False):
                t0 = time.time()
                try:
                    kern, threads, smem = bulk_kernel(C, NW, S, K, B, fold)
                    tiles = N // C
                    grid = min(tiles, sms * B)
                    y, t = launch_and_time(bench, kern, lambda d: (d["words_flat"], d["scales_flat"], x16, out, tiles),
                                           grid, threads, out, args.replays)
                    err = float(np.linalg.norm(y - bench.ref[0]) / np.linalg.norm(bench.ref[0])) if fold else None
                    rows.append({"method": f"bulk {spec}{'' if fold else ' nofold'}", "us": t.us,
                                 "p10": t.p10_us, "p90": t.p90_us, "rel_err": err, "smem": smem,
                                 "grid": grid, "compile_s": round(time.time() - t0, 1)})
                except Exception as exc:  # noqa: BLE001 - a probe row records its failure
                    rows.append({"method": f"bulk {spec}{'' if fold else ' nofold'}", "error": repr(exc)[:600]})
                print(json.dumps(rows[-1]), flush=True)
    for r in rows:
        us = r.get("us")
        pct = f"{100 * floor.us / us:5.1f}%" if us else "  -  "
        print(f"{r['method']:28s} {us if us is None else round(us, 2)!s:>8} µs  {pct} of floor  "
              f"err {r.get('rel_err')}  {r.get('error', '')}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"probe-bulk-{N}x{K}.json"), "w") as fh:
            json.dump({"N": N, "K": K, "floor_us": floor.us, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
