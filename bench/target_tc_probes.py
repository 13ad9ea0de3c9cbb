"""Tensor-core probes for ``python -m bench.targets --configs``: configurations of the
``mma.sync`` kernel that :func:`~int4gemv.kernels.tensor_core_config.choose_config` does not
pick, bound and launched directly on the run's weights at every ``--m`` >= 2, checked (poisoned
output, every element, float64 reference) and timed like every row (``kind="probe"``), with the
kernel's registers and local memory. The ``tensor_core`` variant row of the same run is the
chooser's configuration (the A/B baseline).

Spec: ``tc`` then any of ``t<tiles> k<ksplit> u<unroll> w<warps> b<blocks per SM> d<0|1>``
(double buffer); fields not named keep the chooser's value; an optional ``@shape+shape`` limits
the shapes (else ``--config-shapes``). Examples: ``tck4u4w8b2d0@gate/up+down`` (fewer, longer
warps), ``tct2b2@lm_head`` (two tiles per warp at 128 registers).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from . import gpu_lock
from .target_rows import check_and_time, result_row

__all__ = ["FIELDS", "is_tc_spec", "parse_tc_config", "tc_config", "tc_probe_row", "tc_shapes"]

#: Spec letters -> TensorCoreConfig fields.
FIELDS = {"t": "tiles", "k": "ksplit", "u": "unroll", "w": "warps", "b": "blocks_per_sm",
          "d": "double_buffer"}
_SPEC = re.compile(r"tc((?:[tkuwbd]\d+)*)(?:@([\w/+]+))?")


def is_tc_spec(text: str) -> bool:
    return text.startswith("tc")


def parse_tc_config(text: str) -> tuple:
    """``"tck4u4b2@gate/up+down"`` -> ``({"ksplit": 4, "unroll": 4, "blocks_per_sm": 2},
    ("gate/up", "down"))`` (shapes ``None`` when not given); ``ValueError`` if malformed, a
    letter repeats or ``d`` is not 0/1."""
    m = _SPEC.fullmatch(text)
    if not m:
        raise ValueError(f"tensor-core config {text!r} is not tc[t#][k#][u#][w#][b#][d0|1][@shape+shape] "
                         f"(e.g. tck4u4w8b2d0@gate/up+down)")
    pairs = re.findall(r"([tkuwbd])(\d+)", m[1])
    if len({k for k, _ in pairs}) != len(pairs):
        raise ValueError(f"tensor-core config {text!r} names a field twice")
    fields = {}
    for k, v in pairs:
        if k == "d" and v not in ("0", "1"):
            raise ValueError(f"tensor-core config {text!r}: d takes 0 or 1")
        fields[FIELDS[k]] = bool(int(v)) if k == "d" else int(v)
    return fields, (tuple(m[2].split("+")) if m[2] else None)


def tc_shapes(text: str, default) -> tuple:
    """The shapes spec ``text`` runs on: its own ``@`` list, else ``default``."""
    return parse_tc_config(text)[1] or tuple(default)


def tc_config(text, M, N, K, bs, dtype, zp, sms):
    """The chooser's configuration for the problem with the spec's fields replaced (validated)."""
    from int4gemv.kernels.tensor_core_config import choose_config

    return replace(choose_config(M, N, K, bs, dtype, zp, multiprocessors=sms), **parse_tc_config(text)[0])


def tc_probe_row(text, ws, a, out, ref, floor, tg, copies, timer, args, sms, where):
    """A tensor-core configuration, bound and launched directly (not through a Tuning)."""
    import torch
    from numba import cuda

    from int4gemv.kernels.tensor_core import tensor_core_kernel
    from int4gemv.kernels.tensor_core_config import geometry
    from int4gemv.launcher import bind

    label, N, K, bs, zp, dtype, nbytes, pct = where
    M = a.shape[0]
    row = result_row("probe", text, label, N, K, M, bs, zp, dtype, floor_us=floor, tinygemm_us=tg)
    try:
        config = tc_config(text, M, N, K, bs, dtype, zp, sms)
        kernel = tensor_core_kernel(config)
        grid, block = geometry(config, N, sms)
        as16 = lambda t: cuda.as_cuda_array(t.view(torch.int16)).view(np.uint16).reshape(-1)  # noqa: E731
        # fp16 output as float16 values, bf16 as bits (the kernel's argument types)
        y = cuda.as_cuda_array(out).reshape(-1) if dtype == "float16" else as16(out)
        bound = []
        with gpu_lock.compiling():     # the first bind compiles (CPU only)
            for w in ws:
                d = w.device_arrays()
                bound.append(bind(kernel, (as16(a), d["packed"], d["scales_flat"].view(np.uint16),
                                           d["zero_points_flat"], d["no_bias"], False, y, K, N, M),
                                  grid, block))
        t = check_and_time(row, bound, kernel, out, ref, copies, timer, args.replays, floor, nbytes, pct)
        err = row["error"]
        c = config
        row["kernel"] = (f"tensor_core t{c.tiles}k{c.ksplit}u{c.unroll}w{c.warps}b{c.blocks_per_sm}"
                         f"d{int(c.double_buffer)} regs {row['regs']} local {row['local']}")
        print(f"probe {text:24} {label:8} bs{bs:3d} zp{int(zp)} {dtype:8} M={M:2d} {t.us:8.2f} us "
              f"{row['pct_floor']:5.1f}% floor  err {err:.1e}  {row['kernel']}", flush=True)
    except Exception as exc:  # noqa: BLE001 - a probe is an experiment: recorded, never fatal
        row.update(ok=None, note=repr(exc)[:300])
        print(f"probe {text} {label} bs{bs} zp{int(zp)} {dtype} M={M}: {exc!r}"[:300], flush=True)
    return row
