"""Probes for ``python -m bench.targets --configs``: default-tiling configurations that no
``Tuning`` selects (columns, unroll, blocks per SM, the M = 1 pipeline), bound and launched
directly on the run's weights, checked and timed like every row (``kind="probe"``), with the
kernel's registers and local memory. Experiments for choosing :func:`choose_config`'s rules."""

from __future__ import annotations

import re

import numpy as np

from .target_rows import check_and_time, result_row

__all__ = ["parse_config", "probe_row", "fold_variant_kernel"]


def parse_config(text: str) -> dict:
    """``"c4u1b5p"`` -> ``{"cols": 4, "unroll": 1, "blocks_per_sm": 5, "pipeline": True,
    "mma": False}``, ``"c2l4u2b4m"`` -> ``{"cols": 2, "lanes": 4, ..., "mma": True}`` (``l``: lanes
    per column, else the chooser's; ``w``: warps per block, else the chooser's; ``m``: the
    tensor-core fold; ``kK``: ``K`` warps of a block share a column group, mma only; a last
    ``dD``: each warp of an SM waits ``D`` SM cycles per rank before its first loads, :mod:`int4gemv.kernels.stagger`):
    a default-tiling override timed as a ``kind="probe"`` row (``ValueError``
    if malformed). A trailing ``x0`` / ``x2``
    (``"c4u2b4x0"``; ``"fold": 0 / 2``) times the same loads with the M = 1 CUDA-core fold
    replaced by an XOR of the loaded words, or run twice (:func:`fold_variant_kernel`): a
    timing-only experiment whose output is not the product. A last ``n`` / ``s``
    (``"c4u2b4n"``; ``"stage": "never"`` / ``"always"``) compiles the kernel with the M = 1 row
    stage never / always taken (unstaged, each step loads its activations; bf16 unstaged folds
    in float32), checked like every probe."""
    m = re.fullmatch(r"c(\d+)(?:l(\d+))?u(\d+)b(\d+)(?:w(\d+))?(p?)(m?)(?:x([02]))?([ns]?)(?:k(\d))?(?:d(\d+))?", text)
    if not m:
        raise ValueError(f"config {text!r} is not cC[lL]uUbB[wW][p][m][x0|x2][n|s][kK][dD] (e.g. c4u1b5p, "
                         "c2l4u2b4m, c2l4u2b2w8m, c4u2b4x0, c4u2b4n, c2l4u2b4w8mk4, c4u2b4d120)")
    out = {"cols": int(m[1]), "unroll": int(m[3]), "blocks_per_sm": int(m[4]), "pipeline": bool(m[6]),
           "mma": bool(m[7])}
    if m[2]:
        out["lanes"] = int(m[2])
    if m[5]:
        out["warps"] = int(m[5])
    if m[8] or m[9]:
        if m[7]:
            raise ValueError(f"config {text!r}: x0/x2/n/s modify the CUDA-core fold, not the mma fold")
        out["fold"] = int(m[8] or 1)
    if m[9]:
        out["stage"] = "never" if m[9] == "n" else "always"
    if m[10]:
        out["ksplit"] = int(m[10])
    if m[11]:
        out["stagger"] = int(m[11])
    return out


def fold_variant_kernel(config, fold: int, stage: str = "rule"):
    """The default kernel of ``config`` (M = 1, CUDA-core fold) compiled with its fold replaced:
    ``fold=0`` XORs each step's loaded words and adds one bit per column (the loads, scales and
    zero points, the reduction and the stores stay; almost no arithmetic), ``fold=2`` runs the
    fold twice, the second time on the words XOR 0x11111111 (so that no common subexpression is
    shared). Splits a kernel's time over its floor into what the arithmetic costs and the rest
    (bench/NOTES.md, session 15). ``fold=1`` keeps the fold. ``stage``: ``"rule"`` (the
    package's :func:`~int4gemv.kernels.default_config.stage_min_groups`), ``"never"`` (a rule no
    grid meets) or ``"always"`` (bf16 only: 0 groups a warp; K <= the stage's still). A separate
    compilation; the package's kernels are untouched."""
    from unittest import mock

    from numba import cuda, float32

    import int4gemv.kernels.default as default_module
    from int4gemv.kernels.default_m1 import scalar_fold

    if config.M != 1 or config.mma or fold not in (0, 1, 2):
        raise ValueError("fold_variant_kernel: M = 1, the CUDA-core fold, fold 0, 1 or 2")
    if stage == "always" and config.dtype == "float16":
        raise ValueError("fold_variant_kernel: the fp16 CUDA-core kernel has no stage (slower where "
                         "timed: bench/NOTES.md, session 15)")
    C, U, H = config.cols, config.unroll, 2 if config.block_size == 16 else 1
    FLIP = np.uint32(0x11111111)

    def variant(cfg, load_act):
        real = scalar_fold(cfg, load_act)

        @cuda.jit(device=True, inline=True)
        def loads_only(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full, staged):
            for c in range(C):   # every loaded word, scale and zero point is used
                x = np.uint32(0)
                scale = float32(0.0)
                for u in range(U):
                    for i in range(4):
                        x ^= raw[c, u, i]
                    for h in range(H):
                        x ^= zv[c, u, h]
                        scale += sv[c, u, h]
                acc[0, c] += float32(x & np.uint32(1)) * scale

        @cuda.jit(device=True, inline=True)
        def twice(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full, staged):
            real(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full, staged)
            for c in range(C):
                for u in range(U):
                    for i in range(4):
                        raw[c, u, i] ^= FLIP
            real(act, stage, j0, nwords, nchunks, raw, sv, zv, acc, full, staged)

        return (loads_only, real, twice)[fold]

    rule = {"rule": default_module.stage_min_groups, "never": lambda cfg: 1 << 30,
            "always": lambda cfg: 0}[stage]
    with mock.patch.object(default_module, "scalar_fold", variant), \
            mock.patch.object(default_module, "stage_min_groups", rule):
        return default_module.default_kernel.__wrapped__(config)


def probe_row(text, ws, a, out, ref, floor, tg, copies, timer, args, sms, where):
    """A default-tiling configuration override, bound and launched directly (not a Tuning)."""
    from dataclasses import replace

    import torch
    from numba import cuda

    from int4gemv.kernels.default import choose_config, default_kernel, geometry
    from int4gemv.kernels.default_config import stages_row
    from int4gemv.launcher import bind

    label, N, K, bs, zp, dtype, nbytes, pct = where
    M = a.shape[0]
    row = result_row("probe", text, label, N, K, M, bs, zp, dtype, floor_us=floor, tinygemm_us=tg)
    try:
        over = parse_config(text)
        fold, stage = over.pop("fold", 1), over.pop("stage", "rule")
        base = choose_config(M, N, K, bs, dtype, zp, cols=over["cols"], multiprocessors=sms)
        config = replace(base, **over)
        variant = fold != 1 or stage != "rule"
        kernel = fold_variant_kernel(config, fold, stage) if variant else default_kernel(config)
        grid, block = geometry(config, N, sms)
        as16 = lambda t: cuda.as_cuda_array(t.view(torch.int16)).view(np.uint16).reshape(-1)  # noqa: E731
        # The kernel writes float16 values for fp16 and bf16 bits for bf16: an fp16 output passed
        # as uint16 bits would receive integer conversions (every fp16 probe of 93b2d80: error 1.0)
        y = cuda.as_cuda_array(out).reshape(-1) if dtype == "float16" else as16(out)
        bound = []
        for w in ws:
            d = w.device_arrays()
            bound.append(bind(kernel, (as16(a), d["packed"], d["scales_flat"], d["zero_points_flat"],
                                       d["no_bias"], False, y, K, N), grid, block))
        t = check_and_time(row, bound, kernel, out, ref, copies, timer, args.replays, floor, nbytes, pct)
        err = row["error"]
        fallback = ""
        if config.mma and config.M == 1 and (config.ksplit > 1 or not stages_row(config, N, K, sms)):
            # session 14: c2l4u2b5m timed an unstaged grid under the mma label (bench/NOTES.md);
            # since session 32 such a grid takes the direct mma fold (kernels/default_mma.py)
            fallback = " direct (row not staged: a K split, too few column groups per warp, or K)"
            row["note"] = "mma requested; the grid does not stage the row, so the direct mma fold ran"
        if stage != "rule":
            fallback += f" row stage: {stage}"
        if fold != 1:
            fallback += f" fold x{fold}: timing only, the output is not the product"
            row.update(ok=None, note=f"fold x{fold} (bench.target_probes.fold_variant_kernel): timing only")
        row["kernel"] = f"default {text} regs {row['regs']} local {row['local']}{fallback}"
        print(f"probe {text:9} {label:8} bs{bs:3d} zp{int(zp)} {dtype:8} {t.us:8.2f} us {row['pct_floor']:5.1f}% floor"
              f"  err {err:.1e} regs {row['regs']} local {row['local']}{fallback}", flush=True)
    except Exception as exc:  # noqa: BLE001 - a probe is an experiment: recorded, never fatal
        row.update(ok=None, note=repr(exc)[:300])
        print(f"probe {text} {label} bs{bs} zp{int(zp)} {dtype}: {exc!r}"[:300], flush=True)
    return row
