"""The tensor-core kernel (:mod:`int4gemv.kernels.tensor_core`) as the pipeline sees it.

Eligibility: every supported problem — float16 or bfloat16, block sizes 16/32/64/128, zero
points, bias, any N, K a multiple of 8, M 1..16 in one launch. The dispatcher runs it for M >= 2
(:data:`MIN_M`) where N is too narrow for the default tiling's tensor-core fold
(:func:`~int4gemv.kernels.mma_tiling.mma_batch_reason`), and at M = 1 where the measured
``auto`` table says it is faster.
Configuration: :func:`~int4gemv.kernels.tensor_core_config.choose_config`; ``Tuning.unroll``
(128-element segments per step: 1, 2, 4 or 8) is honoured; ``cols``, ``activations``, ``pdl``
and ``prefetch`` are not used (``explain()`` says so). Activations are read 16 bytes at a time
when their address is 16-byte aligned, else 2 bytes; packed rows 16 bytes at a time when every
row starts 16-byte aligned, else 8.
"""

from __future__ import annotations

import numpy as np

from ..descriptor import KernelDescriptor, Launch
from ..kernels import tensor_core_config as tc
from ..kernels.tensor_core import tensor_core_kernel

__all__ = ["DESCRIPTOR", "eligibility", "MIN_M", "NAME", "why_chosen"]

NAME = "tensor_core"
#: The smallest batch the dispatcher gives this kernel without a measurement: from 2 rows on
#: one ``mma`` serves every row, where the CUDA-core tilings pay a pass per row (bench/NOTES.md).
MIN_M = 2


def eligibility(problem):
    return True, "every dtype, block size, zero points, bias, M 1..16, K % 8 == 0"


def configure(problem, tuning, multiprocessors):
    config = tc.choose_config(problem.M, problem.N, problem.K, problem.block_size, problem.dtype,
                              problem.zero_points, act_aligned16=problem.act_align >= 16,
                              unroll=tuning.unroll, multiprocessors=multiprocessors)
    grid, block = tc.geometry(config, problem.N, multiprocessors)
    return config, grid, block, 0


def choices(problem, config, multiprocessors):
    return tc.choice_reasons(config, problem.N, problem.K, multiprocessors)


def bind(plan, ops):
    p, d = plan.problem, ops.weight
    bias = ops.bias if p.bias else d["no_bias"]
    args = (ops.act.view(np.uint16), d["packed"], d["scales_flat"].view(np.uint16),
            d["zero_points_flat"], bias, p.bias, ops.out, p.K, p.N, p.M)
    return Launch(tensor_core_kernel(plan.config), args, plan.grid, plan.block)


def why_chosen(problem):
    """One line for ``explain()``: why the dispatcher runs this kernel for ``problem``."""
    return (f"M = {problem.M} >= {MIN_M}: one mma.sync.m16n8k16 serves all {problem.M} rows "
            f"({problem.dtype}, block_size {problem.block_size}, "
            f"{'with' if problem.zero_points else 'no'} zero points), where the CUDA-core "
            f"tilings pay a pass per row")


DESCRIPTOR = KernelDescriptor(
    name=NAME,
    summary="tensor-core mma.sync m16n8k16 (M 1..16 for the price of one, fp16/bf16, every format)",
    eligibility=eligibility, configure=configure, bind=bind, choices=choices)
