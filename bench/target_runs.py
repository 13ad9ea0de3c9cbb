"""The measurements behind ``python -m bench.targets``: floors, int4gemv variants and tinygemm.

:func:`run_targets` returns the results document's body (``rows``, ``copy_bandwidth_gbs``,
``skipped``, ``method``). GPU: weights drawn on the device with torch (packed bytes, scales,
zero points), rotated over ``--rotate-mb``; every int4gemv launch is a public
``int4gemv.prepare`` (the path a user's graph captures), the floor is the ``stream`` peer on the
same copies, tinygemm is :data:`int4gemv.benchmark.peers.PEERS` ``["tinygemm"]``. Simulator: the
same plans (``int4gemv.explain``), bound by each kernel's descriptor and launched on tiny shapes;
nothing is timed.
"""

from __future__ import annotations

import numpy as np

from . import gpu_lock
from .graph_timer import time_in_torch_graph
from .target_probes import probe_row
from .target_tc_probes import is_tc_spec, tc_probe_row, tc_shapes
from .target_rows import MIN_LAUNCHES, norm_error, result_row

__all__ = ["device_reference", "run_targets"]


def _tuning(variant):
    import int4gemv as ig

    return None if variant == "env" else ig.Tuning(variant=variant)


def _skip(plan, variant) -> bool:
    """A named kernel that the dispatcher would replace by another (ineligible problem)."""
    return variant not in ("auto", "env") and plan.kernel != variant


def run_targets(plan, variants, args, simulated: bool, checkpoint=None) -> dict:
    """The document's body; ``checkpoint(partial body)`` is called after each row on the GPU (so
    a run cut short leaves every row it timed behind: session 15's cut runs, checkpointed per
    shape, left empty files)."""
    if simulated:
        return _run_simulated(plan, variants, args)
    return _run_gpu(plan, variants, args, checkpoint or (lambda partial: None))


def _run_simulated(plan, variants, args) -> dict:
    import ml_dtypes

    import int4gemv as ig
    from int4gemv.benchmark import random_weight
    from int4gemv.benchmark.stream import SIM_CONFIG, StreamPeer

    rows, skipped = [], []
    rng = np.random.default_rng(0)
    for i, (label, N, K, bs, zp) in enumerate(plan):
        w16 = random_weight(N, K, bs, zero_points=zp, rng=i)
        ok = StreamPeer([w16.to_device()], SIM_CONFIG, 1).check()
        rows.append(result_row("floor", "stream", label, N, K, None, bs, zp, None, ok=ok,
                         error=None if ok else float("inf")))
        for dtype in args.dtypes:
            host = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
            w = w16 if dtype == "float16" else ig.QuantizedWeight(
                w16.packed, w16.scales.astype(host), w16.zero_points, K=K, N=N, block_size=bs)
            store = np.float16 if dtype == "float16" else np.uint16
            for M in args.m:
                a = (rng.standard_normal((M, K)) * 0.5).astype(host)
                ref = ig.reference_gemv(a, w)
                for v in variants:
                    chosen = ig.explain(a, w, tuning=_tuning(v))
                    if _skip(chosen, v):
                        skipped.append(f"{v} {label} bs{bs} zp{int(zp)} {dtype} M={M}: {chosen.reason}")
                        continue
                    err = norm_error(_simulate(chosen, a, w, store, host), ref)
                    rows.append(result_row("int4gemv", v, label, N, K, M, bs, zp, dtype, error=err,
                                     ok=err <= 1e-2, kernel=_kernel_name(chosen)))
                for spec in [c for c in args.configs or [] if is_tc_spec(c)] if M >= 2 else []:
                    err = norm_error(_simulate(_tc_plan(spec, a, w, sms=2), a, w, store, host), ref)
                    rows.append(result_row("probe", spec, label, N, K, M, bs, zp, dtype, error=err,
                                           ok=err <= 1e-2))
    return {"timed": False, "rows": rows, "skipped": skipped, "copy_bandwidth_gbs": None,
            "notes": ["simulator: tiny shapes, checked, nothing timed"]}


def _simulate(plan, a, w, store, host):
    """Run ``plan`` on the simulator through its descriptor's binding (poisoned output);
    returns ``[M, N]`` in ``host`` dtype."""
    from numba import cuda

    from int4gemv.descriptor import Operands
    from int4gemv.registry import descriptor

    M, N = plan.M, plan.N
    out = cuda.to_device(np.full(M * N, np.nan, np.float16).view(store))
    ops = Operands(act=cuda.to_device(np.ascontiguousarray(a).reshape(-1).view(store)),
                   out=out, bias=None, weight=w.device_arrays())
    launch = descriptor(plan.kernel).bind(plan, ops)
    launch.kernel[launch.grid, launch.block](*launch.args)
    return out.copy_to_host().view(host).reshape(M, N)


def _tc_plan(spec, a, w, sms):
    """The tensor-core plan of ``a`` x ``w`` with the probe spec's configuration on ``sms``
    multiprocessors (2 on the simulator: persistent rounds at tiny N)."""
    from dataclasses import replace

    import int4gemv as ig
    from int4gemv.kernels.tensor_core_config import geometry

    from .target_tc_probes import tc_config

    p = ig.explain(a, w, tuning="tensor_core")
    config = tc_config(spec, p.M, p.N, p.K, p.block_size, p.dtype, p.problem.zero_points, sms)
    grid, block = geometry(config, p.N, sms)
    return replace(p, config=config, grid=grid, block=block)


def _kernel_name(plan) -> str:
    c = plan.config
    if plan.kernel == "default":
        return f"default c{c.cols}l{c.lanes}u{c.unroll}b{c.blocks_per_sm}"
    return f"{plan.kernel} {getattr(c, 'cols', '')}x{getattr(c, 'unroll', '')}".strip()


def _run_gpu(plan, variants, args, checkpoint) -> dict:
    import torch
    from numba import cuda

    import int4gemv as ig
    from int4gemv.benchmark.peers import PEERS
    from int4gemv.benchmark.stream import StreamPeer, choose, sweeps
    from int4gemv.benchmark.timing import copy_bandwidth
    from int4gemv.benchmark.weights import rotation_copies

    gpu_lock.acquire()      # all GPU work under the --gpu-lock (released only to compile)
    dev = cuda.get_current_device()
    sms = dev.MULTIPROCESSOR_COUNT
    bw = copy_bandwidth()

    def save():
        checkpoint({"timed": True, "partial": True, "rows": rows, "skipped": skipped,
                    "copy_bandwidth_gbs": bw / 1e9})

    stream = torch.cuda.Stream()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rotate = args.rotate_mb << 20
    rows, skipped, tiny = [], [], {}

    def timer(issue, launches, replays):
        return time_in_torch_graph(issue, stream, launches, replays)

    def pct(nbytes, us):
        return 100 * nbytes / (us * 1e-6) / bw

    for label, N, K, bs, zp in plan:
        nb = -(-K // bs)
        nbytes = N * nb * bs // 2 + N * nb * 2 + (N * -(-nb // 2) if zp else 0)
        copies = rotation_copies(nbytes, rotate)
        packed = [torch.randint(0, 256, (N, nb * bs // 2), dtype=torch.uint8, device="cuda", generator=gen)
                  for _ in range(copies)]
        scales = [((torch.rand((N, nb), device="cuda", generator=gen) + 0.5) * 0.01).half() for _ in range(copies)]
        zps = [torch.randint(0, 256, (N, -(-nb // 2)), dtype=torch.uint8, device="cuda", generator=gen)
               if zp else None for _ in range(copies)]

        keep = []   # from_device shares memory: the converted scales must outlive their weights

        def weights(dtype):
            tdt = torch.float16 if dtype == "float16" else torch.bfloat16
            converted = [s.to(tdt) for s in scales]
            keep.append(converted)
            return [ig.QuantizedWeight.from_device(p, s, z, K=K, N=N, block_size=bs)
                    for p, s, z in zip(packed, converted, zps)]

        w16 = weights("float16")
        config = choose(w16, timer, device_key=(dev.id, dev.name), multiprocessors=sms)
        peer = StreamPeer(w16, config, sms)
        ok = peer.check()
        t = peer.time(timer, replays=args.replays)
        floor = t.us
        floor_row = result_row("floor", "stream", label, N, K, None, bs, zp, None, us=t.us, p10_us=t.p10_us,
                               p90_us=t.p90_us, floor_us=t.us, pct_floor=100.0, pct_copy=pct(nbytes, t.us),
                               ok=ok, kernel=f"stream {config}", copies=copies, bytes=nbytes)
        rows.append(floor_row)
        save()
        print(f"floor   {label:8} bs{bs:3d} zp{int(zp)} {t.us:8.2f} us  {config}  checksum {'ok' if ok else 'WRONG'}",
              flush=True)
        for dtype in args.dtypes:
            ws = w16 if dtype == "float16" else weights(dtype)
            tdt = torch.float16 if dtype == "float16" else torch.bfloat16
            for M in args.m:
                if (label, M) not in tiny and not args.no_tinygemm:
                    tiny[(label, M)] = _tinygemm(PEERS["tinygemm"], N, K, M, rotate, timer, args, rows, label)
                tg = tiny.get((label, M))
                a = (torch.randn((M, K), device="cuda", generator=gen) * 0.5).to(tdt)
                out = torch.empty((M, N), device="cuda", dtype=tdt)
                ref = device_reference(torch, a, packed[0], scales[0].to(tdt), zps[0], N, K, bs, zp)
                torch.cuda.synchronize()          # a is written before any launch on stream reads it
                for v in variants:
                    row = _variant(v, ws, a, out, ref, stream, timer, args, copies,
                                   (label, N, K, M, bs, zp, dtype, nbytes, floor, tg, pct), skipped)
                    if row is not None:
                        rows.append(row)
                        save()
                for label_c in _probes(args, label, M):
                    probe = tc_probe_row if is_tc_spec(label_c) else probe_row
                    rows.append(probe(label_c, ws, a, out, ref, floor, tg, copies, timer, args, sms,
                                      (label, N, K, bs, zp, dtype, nbytes, pct)))
                    save()
                del a, out, ref
        # the floor again after the shape's rows: its drift bounds how far the card's state moved
        # while they were timed (their ratios use the first floor)
        floor_row["floor_end_us"] = end = peer.time(timer, replays=args.replays).us
        save()
        print(f"floor   {label:8} bs{bs:3d} zp{int(zp)} {end:8.2f} us at the end ({end / floor - 1:+.1%})", flush=True)
        del packed, scales, zps, w16, peer, keep
        torch.cuda.empty_cache()
    return {"timed": True, "rows": rows, "skipped": skipped, "copy_bandwidth_gbs": bw / 1e9,
            "stream_sweeps": sweeps(),
            "copy_bandwidth_end_gbs": copy_bandwidth(remeasure=True) / 1e9,
            "method": {"timing": "CUDA events around torch CUDA graph replays of max(copies, 20) launches "
                                 "rotating over weight copies; per-launch median",
                       "replays": args.replays, "rotate_bytes": rotate, "max_copies": 512}}


def _probes(args, label, M) -> list:
    """The ``--configs`` probes of one row: default-tiling specs at every M on ``--config-shapes``
    (``m``: the mma fold, M = 1 or the batch one), tensor-core specs (``tc...``) at M >= 2 on
    their own shapes or ``--config-shapes``."""
    out = []
    for spec in args.configs or []:
        if is_tc_spec(spec):
            if M >= 2 and label in tc_shapes(spec, args.config_shapes):
                out.append(spec)
        elif label in args.config_shapes:
            out.append(spec)
    return out


def _variant(v, ws, a, out, ref, stream, timer, args, copies, where, skipped):
    """One int4gemv variant: prepared once per weight copy (the public path), checked on a
    poisoned output, timed in a graph. ``None`` (and a ``skipped`` line) when the dispatcher would
    run another kernel; a row with ``error`` text when anything fails (the run goes on)."""
    import torch

    import int4gemv as ig

    label, N, K, M, bs, zp, dtype, nbytes, floor, tg, pct = where
    what = f"{v} {label} bs{bs} zp{int(zp)} {dtype} M={M}"
    try:
        with gpu_lock.compiling():    # the first prepare compiles (CPU only)
            runs = [ig.prepare(a, w, out=out, tuning=_tuning(v)) for w in ws]
    except (TypeError, ValueError) as exc:
        skipped.append(f"{what}: {exc}")
        return None
    if _skip(runs[0].plan, v):
        skipped.append(f"{what}: {runs[0].plan.reason}")
        return None
    row = result_row("int4gemv", v, label, N, K, M, bs, zp, dtype, floor_us=floor, tinygemm_us=tg,
               kernel=_kernel_name(runs[0].plan), copies=copies, bytes=nbytes)
    try:
        out.fill_(float("nan"))
        torch.cuda.synchronize()      # the fill (current stream) before the launch (stream)
        runs[0](stream)
        stream.synchronize()
        err = norm_error(out.double().cpu().numpy(), ref)
        t = timer(lambda i, h: runs[i % copies](h), max(copies, MIN_LAUNCHES), args.replays)
    except Exception as exc:  # noqa: BLE001 - recorded in the row; the run goes on
        row.update(ok=False, note=repr(exc)[:300])
        print(f"{what}: FAILED {exc!r}"[:300], flush=True)
        return row
    row.update(us=t.us, p10_us=t.p10_us, p90_us=t.p90_us, pct_floor=100 * floor / t.us, error=err,
               ok=err <= 1e-2, pct_copy=pct(nbytes, t.us))
    print(f"{v:11} {label:8} bs{bs:3d} zp{int(zp)} {dtype:8} M={M:2d} {t.us:8.2f} us "
          f"{row['pct_floor']:5.1f}% floor {row['pct_copy']:5.1f}% copy  err {err:.1e}  {row['kernel']}", flush=True)
    return row


def _tinygemm(peer, N, K, M, rotate, timer, args, rows, label):
    ok, why = peer.available()
    if not ok:
        rows.append(result_row("peer", "tinygemm", label, N, K, M, 32, False, "bfloat16", ok=False, note=why))
        return None
    x = (np.random.default_rng(M).standard_normal((M, K)) * 0.5).astype(np.float16)
    try:
        prepared = peer.prepare(N, K, x=x, shared=None, rotate_bytes=rotate)
        try:
            err = prepared.check() if prepared.check else None
            t = timer(lambda i, h: prepared.issue(i), max(prepared.copies, MIN_LAUNCHES), args.replays)
        finally:
            prepared.keep.clear()
    except Exception as exc:  # noqa: BLE001 - a failing peer is recorded, not fatal
        rows.append(result_row("peer", "tinygemm", label, N, K, M, 32, False, "bfloat16", ok=False,
                         note=repr(exc)[:300]))
        return None
    rows.append(result_row("peer", "tinygemm", label, N, K, M, 32, False, "bfloat16", us=t.us, p10_us=t.p10_us,
                     p90_us=t.p90_us, tinygemm_us=t.us, error=err, ok=err is None or err <= 1e-2,
                     copies=prepared.copies, bytes=prepared.nbytes))
    print(f"tinygemm    {label:8} M={M:2d} {t.us:8.2f} us", flush=True)
    return t.us


def device_reference(torch, a, packed, scales, zps, N, K, bs, zp):
    """float64 ``a · dequant(W)ᵀ`` on the device, returned to the host."""
    nb = -(-K // bs)
    q = torch.stack((packed & 15, packed >> 4), dim=-1).reshape(N, nb * bs)[:, :K].double()
    g = torch.arange(K, device="cuda") // bs
    if zp:
        z = torch.stack((zps & 15, zps >> 4), dim=-1).reshape(N, -1)[:, :nb].double()[:, g]
    else:
        z = 8.0
    deq = (q - z) * scales.double()[:, g]
    del q
    return (a.double() @ deq.t()).cpu().numpy()
