"""Choosing a kernel for a call: a pure function of the problem and the controls.

No GPU and no memory are touched here, so every decision is testable anywhere. The
single-warp specialization is eligible when :func:`single_warp_eligibility` says so; forcing
it on an ineligible problem falls back to the default tiling and the plan says why.
``auto`` picks per shape from the measured table in ``autotune_table.json`` (per GPU name):
an exact (N, K) entry if there is one, else the entry nearest in log-shape for that GPU, else
(an unknown GPU) the single-warp specialization whenever it is eligible.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np

from .controls import Controls
from .kernels import default as default_tiling
from .kernels import single_warp

__all__ = ["Plan", "plan_gemv", "single_warp_eligibility", "load_autotune_table"]


@dataclass(frozen=True)
class Plan:
    """How one call will run. ``str(plan)`` is a readable summary for notebooks."""

    kernel: str                 # "default" or "single_warp"
    grid: tuple
    block: tuple
    shared_bytes: int
    control: str                # which control decided the mode
    reason: str                 # why this kernel
    M: int
    N: int
    K: int
    block_size: int
    cols: int | None = None     # single-warp tuning
    unroll: int | None = None
    activations: str | None = None  # single-warp: "registers" or "streaming"
    blocks_per_sm: int = 0      # single-warp launch bound (0: none)
    tuning: str | None = None   # where the tuning came from
    warnings: tuple = ()

    @property
    def threads(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2] * self.block[0]

    def __str__(self):
        tuning = "" if self.cols is None else (
            f" (cols={self.cols}, unroll={self.unroll}, "
            f"{self.activations} activations"
            + (f", launch bound {self.blocks_per_sm} blocks/SM" if self.blocks_per_sm else "")
            + f"; {self.tuning})")
        lines = [
            f"kernel   : {self.kernel}{tuning}",
            f"problem  : M={self.M} N={self.N} K={self.K} block_size={self.block_size}",
            f"launch   : grid={self.grid} block={self.block} shared={self.shared_bytes} B",
            f"control  : {self.control}",
            f"reason   : {self.reason}",
        ]
        lines += [f"warning  : {w}" for w in self.warnings]
        return "\n".join(lines)


def single_warp_eligibility(M, K, block_size, a_dtype, N=1):
    """``(eligible, reason)`` for the single-warp specialization.

    Rule: fp16 activations, block size 32, batch M == 1 and K a multiple of 32 (whole
    quantization groups, so every uint64 word of a column holds 16 real nibbles), and fewer
    than 2**32 uint64 words in the weight (the kernel indexes in 32 bits).
    Zero points and bias are supported.
    """
    problems = []
    if np.dtype(a_dtype) != np.float16:
        problems.append(f"activations are {np.dtype(a_dtype)}, not float16")
    if block_size != 32:
        problems.append(f"block_size is {block_size}, not 32")
    if M != 1:
        problems.append(f"batch M is {M}, not 1")
    if K % 32:
        problems.append(f"K={K} is not a multiple of 32")
    if N * K // 16 >= 2**32:
        problems.append(f"N*K/16 = {N * K // 16} uint64 words is not below 2**32")
    if problems:
        return False, "; ".join(problems)
    return True, "fp16, block_size 32, M == 1, K % 32 == 0"


@functools.lru_cache(maxsize=None)
def load_autotune_table():
    """The committed measurements ``{gpu_name: {(N, K): entry}}`` (empty if absent)."""
    try:
        text = resources.files("int4gemv").joinpath("autotune_table.json").read_text()
    except FileNotFoundError:
        return {}
    raw = json.loads(text)
    return {gpu: {(e["N"], e["K"]): e for e in d["entries"]} for gpu, d in raw["devices"].items()}


def _auto_choice(N, K, device_name, table):
    entries = table.get(device_name) if device_name else None
    if not entries:
        return "single_warp", None, f"auto: no measurements for GPU {device_name!r}; eligible, so single-warp"
    if (N, K) in entries:
        e, how = entries[(N, K)], f"auto: measured on {device_name} at N={N} K={K}"
    else:
        key = min(entries, key=lambda nk: math.hypot(math.log(nk[0] / N), math.log(nk[1] / K)))
        e, how = entries[key], f"auto: nearest measured shape on {device_name} is N={key[0]} K={key[1]}"
    tuning = (e["cols"], e["unroll"]) if e.get("cols") else None
    return e["variant"], tuning, f"{how}: {e['variant']} was faster ({e.get('note', '')})".rstrip(" ()")


def plan_gemv(M, N, K, block_size, a_dtype, controls: Controls, device_name=None, table=None, *,
              multiprocessors=132) -> Plan:
    """Plan one call. ``table`` defaults to :func:`load_autotune_table`; ``multiprocessors``
    (the device's SM count) sizes the single-warp kernel's persistent grid."""
    base = dict(M=M, N=N, K=K, block_size=block_size, control=controls.source,
                warnings=controls.warnings)
    eligible, why = single_warp_eligibility(M, K, block_size, a_dtype, N)

    def default_plan(reason):
        grid, block, shared = default_tiling.geometry(M, N)
        return Plan("default", grid, block, shared, reason=reason, **base)

    if controls.mode == "off":
        return default_plan("single-warp specialization not requested (opt-in)")
    if not eligible:
        return default_plan(f"single-warp requested but ineligible ({why}); fell back to default tiling")

    tuning, tuning_src = single_warp.DEFAULT_TUNING, "default tuning"
    if controls.mode == "auto":
        variant, measured, reason = _auto_choice(N, K, device_name,
                                                 load_autotune_table() if table is None else table)
        if variant == "default":
            return default_plan(reason)
        if measured:
            tuning, tuning_src = measured, "measured tuning"
    else:
        reason = f"single-warp requested and eligible ({why})"
    cols = controls.cols if controls.cols is not None else tuning[0]
    unroll = controls.unroll if controls.unroll is not None else tuning[1]
    if controls.tuning_source:
        tuning_src = controls.tuning_source
    if (cols, unroll) not in single_warp.TUNINGS:
        raise ValueError(f"{controls.tuning_source}: (cols={cols}, unroll={unroll}) is not a compiled "
                         f"tuning; accepted (cols, unroll): {single_warp.TUNINGS}")
    grid, block = single_warp.geometry(N, cols, multiprocessors)
    mode = single_warp.activation_mode(K, unroll)
    return Plan("single_warp", grid, block, 0, reason=reason, cols=cols, unroll=unroll,
                activations=mode, blocks_per_sm=single_warp.min_blocks(cols, unroll, mode),
                tuning=tuning_src, **base)
