"""The default tiling (:mod:`int4gemv.kernels.default`) as the pipeline sees it.

Eligibility: float16 activations (bfloat16 arrives with the rewritten default kernel); every block
size, zero points, bias, any N, K a multiple of 8, batch M 1..16 (``grid.y``). It has no
programmatic wait point, so ``Tuning.pdl``/``prefetch`` are not used; nor are the single-warp
fields ``cols``, ``unroll`` and ``activations``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..descriptor import KernelDescriptor, Launch
from ..kernels import default as tiling

__all__ = ["DESCRIPTOR", "DefaultTilingConfig"]


@dataclass(frozen=True)
class DefaultTilingConfig:
    """The default tiling's fixed configuration: one warp per column, ``columns_per_block``
    columns per block, K staged in tiles of ``tile_k`` activations."""

    columns_per_block: int = tiling.COLS_PER_BLOCK
    tile_k: int = tiling.TILE_K


def eligibility(problem):
    if problem.dtype != "float16":
        return False, (f"activations are {problem.dtype}; the default tiling serves float16 only "
                       f"(bfloat16 comes with the rewritten default kernel)")
    return True, "float16, every block size, zero points, bias, M 1..16, K % 8 == 0"


def configure(problem, tuning, multiprocessors):
    grid, block, shared = tiling.geometry(problem.M, problem.N)
    return DefaultTilingConfig(), grid, block, shared


def bind(plan, ops):
    p, d = plan.problem, ops.weight
    bias = ops.bias if p.bias else d["no_bias"]
    args = (ops.act.reshape(p.M, p.K), d["words"], d["words_flat"], d["scales"], d["zero_points"],
            p.zero_points, bias, p.bias, ops.out.reshape(p.M, p.N), p.K, p.block_size)
    return Launch(tiling.default_kernel, args, plan.grid, plan.block)


DESCRIPTOR = KernelDescriptor(
    name="default", summary="multi-warp default tiling (one warp per column, 8 per block)",
    eligibility=eligibility, configure=configure, bind=bind)
