"""One int4gemv kernel launched a few times, for Nsight Compute to profile.

    ncu --clock-control none -k regex:kernel --launch-skip 2 --launch-count 1 --section ... \\
        python -m bench.ncu_probe --shape lm_head [--bs 32] [--zp] [--dtype float16] [--M 1] \\
        [--variant default | --config c2l4u2b4m] [--launches 3]

The weight is one random weight of the shape (:func:`int4gemv.benchmark.weights.random_weight`;
lm_head's 175 MB is past the 60 MB L2 by itself, and ``ncu`` flushes the caches before each
replay pass by default); ``--nk NxK`` replaces the decode shape by any other (the simulator's
tiny ones). The activations and the output are filled by host copies (fp16: Numba device
arrays; bf16: torch CUDA tensors, GPU only), so the only kernels the process launches are
int4gemv's and a ``-k regex:kernel`` filter sees nothing else. ``--variant`` launches what
``gemv`` would run for that tuning (``env``: the environment's choice) through
:func:`int4gemv.prepare`; ``--config`` a default-tiling override in
:func:`bench.target_probes.parse_config`'s notation, bound directly. The output is poisoned
before the first launch and the last launch is checked against the float64 reference (a
relative error above 1e-2 exits 1), so a profile is always of a kernel that computes the
product. Prints the plan or the configuration (on a GPU with its registers and local memory).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

__all__ = ["main"]


def _arrays(x, N, dtype):
    """``(a, out, as_uint16)``: the activations ``x`` and a NaN-poisoned ``[M, N]`` output on the
    device, and the function that gives a kernel an array's 16-bit storage."""
    from numba import cuda

    M = x.shape[0]
    if dtype == "float16":
        a = cuda.to_device(x.astype(np.float16))
        out = cuda.to_device(np.full((M, N), np.nan, np.float16))
        return a, out, lambda t: t.view(np.uint16).reshape(-1)
    import torch   # bf16 device arrays are torch tensors (a Numba array holds no bf16)

    a = torch.from_numpy(x).to(torch.bfloat16).to("cuda")
    out = torch.from_numpy(np.full((M, N), np.nan, np.float32)).to(torch.bfloat16).to("cuda")
    return a, out, lambda t: cuda.as_cuda_array(t.view(torch.int16)).view(np.uint16).reshape(-1)


def _launcher(args, w, a, out, as16, N, K):
    """``(launch(), description)`` of the kernel ``args`` name, bound on ``w``, ``a`` and ``out``."""
    import int4gemv as ig
    from int4gemv.device import device_facts, simulated
    from int4gemv.kernels.default import choose_config, default_kernel, geometry
    from int4gemv.launcher import bind

    from .target_probes import parse_config

    if args.config is None:
        tuning = None if args.variant == "env" else ig.Tuning(variant=args.variant)
        prepared = ig.prepare(a, w, out=out, tuning=tuning)
        return prepared, f"{prepared!r}\n{prepared.plan}"
    sms = device_facts()[1]
    over = parse_config(args.config)
    if over.pop("fold", 1) != 1 or over.pop("stage", "rule") != "rule":
        raise ValueError("--config: fold and stage variants do not compute the product")
    config = replace(choose_config(args.M, N, K, args.bs, args.dtype, args.zp, cols=over["cols"],
                                   multiprocessors=sms), **over)
    kernel = default_kernel(config)
    grid, block = geometry(config, N, sms)
    d = w.device_arrays()
    # fp16 writes float16 values, bf16 its bits (bench.target_probes.probe_row)
    y = out.reshape(-1) if args.dtype == "float16" else as16(out)
    bound = bind(kernel, (as16(a), d["packed"], d["scales_flat"], d["zero_points_flat"], d["no_bias"],
                          False, y, K, N), grid, block)
    text = f"{config}\ngrid {grid} block {block}"
    if not simulated():
        regs = next(iter(kernel.get_regs_per_thread().values()))
        local = next(iter(kernel.get_local_mem_per_thread().values()))
        text += f" regs {regs} local {local}"
    return (lambda: bound.launch(0)), text


def _host(t, dtype):
    """A device array (Numba, or a torch tensor for bf16) back on the host as float64."""
    if dtype == "float16":
        return t.copy_to_host().astype(np.float64)
    return t.float().cpu().numpy().astype(np.float64)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ncu_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="lm_head", help="a decode shape name of bench.targets")
    p.add_argument("--nk", help="NxK instead of --shape (e.g. 69x520)")
    p.add_argument("--bs", type=int, default=32, help="block size (16, 32, 64, 128)")
    p.add_argument("--zp", action="store_true", help="with zero points")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    p.add_argument("--M", type=int, default=1, help="activation rows (1..16)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--variant", help="a Tuning variant, or env (default: default)")
    how.add_argument("--config", help="a default-tiling override (bench.target_probes notation)")
    p.add_argument("--launches", type=int, default=3, help="launches (profile the last)")
    args = p.parse_args(argv)

    from .targets import SHAPES

    if args.nk is not None:
        try:
            N, K = (int(v) for v in args.nk.lower().split("x"))
        except ValueError:
            p.error(f"--nk must be NxK, e.g. 69x520; got {args.nk!r}")
        if N < 1 or K < 8 or K % 8:
            p.error(f"--nk needs N >= 1 and K a positive multiple of 8; got {args.nk!r}")
    elif args.shape in SHAPES:
        N, K = SHAPES[args.shape]
    else:
        p.error(f"--shape must be one of {', '.join(SHAPES)}")
    if args.launches < 1:
        p.error("--launches must be >= 1")
    if args.variant is None and args.config is None:
        args.variant = "default"

    import ml_dtypes

    import int4gemv as ig
    from int4gemv.benchmark.weights import random_weight, relative_error

    w = random_weight(N, K, args.bs, rng=1, zero_points=args.zp)
    if args.dtype == "bfloat16":
        w = ig.QuantizedWeight(w.packed, w.scales.astype(ml_dtypes.bfloat16), w.zero_points,
                               K=K, N=N, block_size=args.bs)
    x = np.random.default_rng(2).standard_normal((args.M, K)).astype(np.float32)
    a, out, as16 = _arrays(x, N, args.dtype)
    launch, text = _launcher(args, w, a, out, as16, N, K)
    for _ in range(args.launches):
        launch()
    ref = ig.reference_gemv(_host(a, args.dtype), w)
    err = relative_error(_host(out, args.dtype), ref)
    print(f"N={N} K={K} M={args.M} bs{args.bs} zp{int(args.zp)} {args.dtype}: relative error {err:.2e}\n{text}")
    return 0 if err <= 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
