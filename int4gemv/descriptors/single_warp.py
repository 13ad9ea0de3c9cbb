"""The single-warp specialization (:mod:`int4gemv.kernels.single_warp`) as the pipeline sees it.

Eligibility: float16 activations, block size 32, batch M == 1, K a multiple of 32 (whole
quantization groups: every uint64 word of a column holds 16 real nibbles) and fewer than 2**32
uint64 words in the weight (32-bit indices). Zero points and bias are supported.

Configuration from a :class:`~int4gemv.tuning.Tuning`: ``cols`` x ``unroll`` (default
:data:`~int4gemv.kernels.single_warp.DEFAULT_TUNING`; the pair must be compiled, see
``TUNINGS``), ``activations`` (default: registers when ``K <= 512 * unroll``, else streaming;
registers on a longer K is refused), ``pdl`` and ``prefetch``. Activations are read 8 bytes at a
time when their address is 8-byte aligned, else 2 bytes at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..descriptor import KernelDescriptor, Launch, TuningRefused
from ..kernels import single_warp as sw

__all__ = ["DESCRIPTOR", "SingleWarpConfig", "eligibility"]


@dataclass(frozen=True)
class SingleWarpConfig:
    """A compiled single-warp variant: ``cols`` x ``unroll``, activation mode, launch bound
    (blocks per SM, 0: none), zero points compiled in, ``wide`` (8-byte activation loads),
    ``pdl`` and ``prefetch``."""

    cols: int
    unroll: int
    activations: str
    blocks_per_sm: int
    zero_points: bool
    wide: bool
    pdl: bool
    prefetch: bool


def eligibility(problem):
    problems = []
    if problem.dtype != "float16":
        problems.append(f"activations are {problem.dtype}, not float16")
    if problem.block_size != 32:
        problems.append(f"block_size is {problem.block_size}, not 32")
    if problem.M != 1:
        problems.append(f"batch M is {problem.M}, not 1")
    if problem.K % 32:
        problems.append(f"K={problem.K} is not a multiple of 32")
    if problem.N * problem.K // 16 >= 2**32:
        problems.append(f"N*K/16 = {problem.N * problem.K // 16} uint64 words is not below 2**32")
    if problems:
        return False, "; ".join(problems)
    return True, "fp16, block_size 32, M == 1, K % 32 == 0"


def configure(problem, tuning, multiprocessors):
    cols = sw.DEFAULT_TUNING[0] if tuning.cols is None else tuning.cols
    unroll = sw.DEFAULT_TUNING[1] if tuning.unroll is None else tuning.unroll
    if (cols, unroll) not in sw.TUNINGS:
        raise TuningRefused(("cols", "unroll"), {"cols": cols, "unroll": unroll},
                            f"is not a compiled single-warp tuning; accepted (cols, unroll): "
                            f"{sw.TUNINGS}")
    mode = tuning.activations or sw.activation_mode(problem.K, unroll)
    if mode == "registers" and sw.activation_mode(problem.K, unroll) != "registers":
        raise ValueError(f"tuning activations='registers' needs K <= 512 * unroll = "
                         f"{512 * unroll}; K is {problem.K}")
    config = SingleWarpConfig(cols, unroll, mode, sw.min_blocks(cols, unroll, mode),
                              problem.zero_points, problem.act_align >= 8, tuning.pdl,
                              tuning.prefetch)
    grid, block = sw.geometry(problem.N, cols, multiprocessors)
    return config, grid, block, 0


def bind(plan, ops):
    c, p, d = plan.config, plan.problem, ops.weight
    kernel = sw.single_warp_kernel(c.cols, c.unroll, c.activations, c.zero_points,
                                   c.blocks_per_sm, c.wide, c.pdl, c.prefetch)
    act = ops.act.view(np.uint64 if c.wide else np.uint16)
    bias = ops.bias if p.bias else d["no_bias"]
    args = (act, d["words64_flat"], d["scales_flat"], d["zero_points_flat"], p.zero_points, bias,
            p.bias, ops.out, p.K)
    return Launch(kernel, args, plan.grid, plan.block, programmatic=c.pdl)


DESCRIPTOR = KernelDescriptor(
    name="single_warp", summary="single-warp specialization (cols x unroll, half2 arithmetic)",
    eligibility=eligibility, configure=configure, bind=bind)
