"""The default tiling (:mod:`int4gemv.kernels.default`) as the pipeline sees it.

Eligibility: every supported problem — float16 or bfloat16, block sizes 16/32/64/128, zero
points, bias, any N, K a multiple of 8, batch M 1..16 in one launch that reads the weight once.
Configuration: :func:`~int4gemv.kernels.default.choose_config` fills what the
:class:`~int4gemv.tuning.Tuning` leaves open; ``Tuning.cols`` (columns per lane per step: 1, 2,
4 or 8) and ``Tuning.unroll`` (chunks per lane per step: 1, 2 or 4) are honoured, and ``pdl``
(a programmatic dependent launch); ``prefetch`` and ``activations`` are single-warp fields the
default tiling does not use. At M = 1 with ``cols`` left open, large N takes the tensor-core fold
once it is switched on (:func:`~int4gemv.kernels.default_config.mma_pays`,
``MMA_CHOSEN``; ``Tuning.cols`` set keeps the CUDA-core fold); at M >= 2 lm_head-wide N, and
narrower N with a K split (past 8 rows N with a block of 32 columns per SM; from 1024 columns
in blocks of 16), take the M > 1 tensor-core fold
(:func:`~int4gemv.kernels.mma_tiling.mma_batch_reason`; with ``Tuning.cols`` 2 or 4 too).
Activations are read 16 bytes at a time when their address is 16-byte aligned, else 2 bytes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..descriptor import KernelDescriptor, Launch, TuningRefused
from ..kernels import default as tiling

__all__ = ["DESCRIPTOR", "eligibility"]


def eligibility(problem):
    return True, "every dtype, block size, zero points, bias, M 1..16, K % 8 == 0"


def configure(problem, tuning, multiprocessors):
    if tuning.cols is not None and tuning.cols not in tiling.COLS:
        raise TuningRefused(("cols",), {"cols": tuning.cols},
                            f"is not a default-tiling column count; accepted: {tiling.COLS}")
    if tuning.unroll is not None and tuning.unroll not in tiling.UNROLLS:
        raise TuningRefused(("unroll",), {"unroll": tuning.unroll},
                            f"is not a default-tiling unroll; accepted: {tiling.UNROLLS}")
    config = tiling.choose_config(problem.M, problem.N, problem.K, problem.block_size,
                                  problem.dtype, problem.zero_points,
                                  act_aligned16=problem.act_align >= 16, cols=tuning.cols,
                                  multiprocessors=multiprocessors, pdl=tuning.pdl)
    if tuning.unroll is not None:
        config = replace(config, unroll=tuning.unroll)
    grid, block = tiling.geometry(config, problem.N, multiprocessors)
    return config, grid, block, 0


def choices(problem, config, multiprocessors):
    return tiling.choice_reasons(config, problem.N, problem.K, multiprocessors)


def bind(plan, ops):
    p, d = plan.problem, ops.weight
    bias = ops.bias if p.bias else d["no_bias"]
    args = (ops.act.view(np.uint16), d["packed"], d["scales_flat"], d["zero_points_flat"], bias,
            p.bias, ops.out, p.K, p.N)
    return Launch(tiling.default_kernel(plan.config), args, plan.grid, plan.block,
                  programmatic=plan.config.pdl)


DESCRIPTOR = KernelDescriptor(
    name="default",
    summary="multi-warp default tiling (16-byte loads, every block size, M 1..16, fp16/bf16)",
    eligibility=eligibility, configure=configure, bind=bind, choices=choices)
