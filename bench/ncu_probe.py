"""One int4gemv kernel launched a few times, for Nsight Compute to profile (GPU only).

    ncu --clock-control none -k regex:kernel --launch-skip 2 --launch-count 1 --section ... \\
        python -m bench.ncu_probe --shape lm_head [--bs 32] [--zp] [--dtype float16] [--M 1] \\
        [--variant default | --config c2l4u2b4m] [--launches 3]

The weight is one random weight of the shape (:func:`int4gemv.benchmark.weights.random_weight`;
lm_head's 175 MB is past the 60 MB L2 by itself, and ``ncu`` flushes the caches before each
replay pass by default); the activations and the output are torch CUDA tensors filled by host
copies, so the only kernels the process launches are int4gemv's (a ``-k regex:kernel`` filter
sees nothing else). ``--variant`` launches what ``gemv`` would run for that tuning (``env``: the
environment's choice), through :func:`int4gemv.prepare`; ``--config`` a default-tiling override
in :func:`bench.target_probes.parse_config`'s notation, bound directly. The last launch is
checked against the float64 reference (the relative error is printed; a wrong kernel exits 1),
so a profile is always of a kernel that computes the product. Prints the plan or the
configuration, the registers and local memory per thread.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

__all__ = ["main"]


def _launcher(args, w, a, out, shape):
    """``(launch(), description)`` of the kernel ``args`` name, bound on ``w``, ``a`` and ``out``."""
    import torch
    from numba import cuda

    import int4gemv as ig
    from int4gemv.kernels.default import choose_config, default_kernel, geometry
    from int4gemv.launcher import bind

    from .target_probes import parse_config

    if args.config is None:
        tuning = None if args.variant == "env" else ig.Tuning(variant=args.variant)
        prepared = ig.prepare(a, w, out=out, tuning=tuning)
        return prepared, repr(prepared) + "\n" + str(prepared.plan)
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    over = parse_config(args.config)
    if over.pop("fold", 1) != 1 or over.pop("stage", "rule") != "rule":
        raise ValueError("--config: fold and stage variants do not compute the product")
    config = replace(choose_config(args.M, shape.N, shape.K, args.bs, args.dtype, args.zp,
                                   cols=over["cols"], multiprocessors=sms), **over)
    kernel = default_kernel(config)
    grid, block = geometry(config, shape.N, sms)
    as16 = lambda t: cuda.as_cuda_array(t.view(torch.int16)).view(np.uint16).reshape(-1)  # noqa: E731
    y = cuda.as_cuda_array(out).reshape(-1) if args.dtype == "float16" else as16(out)
    d = w.device_arrays()
    bound = bind(kernel, (as16(a), d["packed"], d["scales_flat"], d["zero_points_flat"], d["no_bias"],
                          False, y, shape.K, shape.N), grid, block)
    regs = next(iter(kernel.get_regs_per_thread().values()))
    local = next(iter(kernel.get_local_mem_per_thread().values()))
    return (lambda: bound.launch(0)), f"{config}\ngrid {grid} block {block} regs {regs} local {local}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ncu_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="lm_head", help="a decode shape name of bench.targets")
    p.add_argument("--bs", type=int, default=32, help="block size (16, 32, 64, 128)")
    p.add_argument("--zp", action="store_true", help="with zero points")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--M", type=int, default=1, help="activation rows (1..16)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--variant", help="a Tuning variant, or env (default: default)")
    how.add_argument("--config", help="a default-tiling override (bench.target_probes notation)")
    p.add_argument("--launches", type=int, default=3, help="launches (profile the last)")
    args = p.parse_args(argv)
    if args.launches < 1:
        p.error("--launches must be >= 1")
    if args.variant is None and args.config is None:
        args.variant = "default"

    import ml_dtypes
    import torch

    import int4gemv as ig
    from int4gemv.benchmark.weights import random_weight, relative_error

    from .targets import SHAPES

    if args.shape not in SHAPES:
        p.error(f"--shape must be one of {', '.join(SHAPES)}")
    shape = argparse.Namespace(N=SHAPES[args.shape][0], K=SHAPES[args.shape][1])
    w = random_weight(shape.N, shape.K, args.bs, rng=1, zero_points=args.zp)
    if args.dtype == "bfloat16":
        w = ig.QuantizedWeight(w.packed, w.scales.astype(ml_dtypes.bfloat16), w.zero_points,
                               K=shape.K, N=shape.N, block_size=args.bs)
    dt = getattr(torch, args.dtype)
    x = np.random.default_rng(2).standard_normal((args.M, shape.K)).astype(np.float32)
    a = torch.from_numpy(x).to(dt).to("cuda")              # host-side conversion, then a copy
    out = torch.from_numpy(np.full((args.M, shape.N), np.nan, np.float32)).to(dt).to("cuda")
    launch, text = _launcher(args, w, a, out, shape)
    for _ in range(args.launches):
        launch()
    torch.cuda.synchronize()
    ref = ig.reference_gemv(a.float().cpu().numpy().astype(np.float64), w)
    err = relative_error(out.float().cpu().numpy(), ref)
    print(f"{args.shape} N={shape.N} K={shape.K} M={args.M} bs{args.bs} zp{int(args.zp)} {args.dtype}: "
          f"relative error {err:.2e}\n{text}")
    return 0 if err <= 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
