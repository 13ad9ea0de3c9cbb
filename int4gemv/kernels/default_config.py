"""The default tiling's compile-time configuration: :class:`DefaultConfig`, the per-problem
choice :func:`choose_config` (measured on the H200, bench/NOTES.md) and the launch
:func:`geometry`. Pure Python: no GPU is touched here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mma_tiling import (MMA_BATCH_COLS, MMA_BLOCKS, MMA_COLS, MMA_LANES, MMA_WARPS,
                         mma_batch_reason, mma_batch_tiling)
from .stagger import MAX_STAGGER_CYCLES

__all__ = ["DefaultConfig", "choose_config", "choice_reasons", "geometry", "mma_pays", "DTYPES",
           "MAX_M", "COLS", "LANES", "UNROLLS", "BLOCK_SIZES", "STAGE_MAX_K", "STAGE_MIN_GROUPS",
           "MMA_STAGE_MIN_GROUPS", "MMA_CHOSEN", "warps_per_sm_target", "stage_min_groups",
           "stages_row"]

DTYPES = ("float16", "bfloat16")
MAX_M = 16
COLS = (1, 2, 4, 8)
LANES = (1, 2, 4, 8, 16, 32)
UNROLLS = (1, 2, 4)
BLOCK_SIZES = (16, 32, 64, 128)


@dataclass(frozen=True)
class DefaultConfig:
    """One compilation of the default tiling (all fields are compile-time constants).

    dtype: "float16" or "bfloat16" (activations, scales, bias and output);
    M: batch rows 1..16; block_size: 16/32/64/128; zero_points: the weight has them;
    cols: columns per lane per step (load parallelism); lanes: lanes per column (a power of
    two, <= 32); unroll: chunks per lane per step; warps: warps per block;
    blocks_per_sm: resident blocks per SM (launch bounds; the persistent grid's size);
    act_vector: activations 16-byte aligned (16-byte loads; else 2-byte loads);
    weight_vector: packed rows 16-byte aligned (16-byte loads; else two 8-byte loads);
    pdl: compiled for a programmatic dependent launch (sm_90+): the kernel lets the next such
    launch start at once, issues its first weight loads, and only then waits for the previous
    grid (``griddepcontrol.wait``) before it reads activations or bias or writes ``out``;
    pipeline: (M = 1) two register buffers: each step's loads are issued before the previous
    step is folded, across column groups, so a warp always has a step of loads in flight;
    mma: (lanes 4, cols 2; M > 1: cols 2 or 4) the products on tensor cores: at M = 1 with the
    group sums (:mod:`.default_mma`), at M = 2..16 with the activation rows as B
    (:mod:`.default_mma_batch`);
    ksplit: (mma only; not with pipeline or words) warps of a block that share one column
    group, each taking every ``ksplit``-th stripe of its chunks; their sums (M > 1: D
    fragments) are added through shared memory in warp order
    (:func:`.default_mma_batch.ksplit_finish`; M = 1 folds unstaged: :mod:`.default_mma`). 1: a
    warp per column group.
    words: (with ``pdl``, M = 1, ``act_vector``; the decode chain's ``handoff="words"``) the
    kernel never waits for the previous grid: once its first weights are in flight, its blocks
    poll the activations until no half is the sentinel (:mod:`.handoff`).
    stagger: SM clock cycles each warp waits per rank in its SM before its first loads (0:
    none; at most :data:`.stagger.MAX_STAGGER_CYCLES`): the issue-order probe of :mod:`.stagger`, which no
    rule chooses.
    """

    dtype: str
    M: int
    block_size: int
    zero_points: bool
    cols: int = 2
    lanes: int = 32
    unroll: int = 2
    warps: int = 4
    blocks_per_sm: int = 8
    act_vector: bool = True
    weight_vector: bool = True
    pdl: bool = False
    pipeline: bool = False
    mma: bool = False
    ksplit: int = 1
    words: bool = False
    stagger: int = 0

    def __post_init__(self):
        def check(name, ok, accepted):
            if not ok:
                raise ValueError(f"DefaultConfig.{name} must be {accepted}; "
                                 f"got {getattr(self, name)!r}")
        check("dtype", self.dtype in DTYPES, f"one of {DTYPES}")
        for name in ("M", "block_size", "cols", "lanes", "unroll", "warps", "blocks_per_sm", "ksplit",
                     "stagger"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"DefaultConfig.{name} must be an int; got {type(value).__name__}")
        for name in ("zero_points", "act_vector", "weight_vector", "pdl", "pipeline", "mma", "words"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"DefaultConfig.{name} must be a bool")
        check("M", 1 <= self.M <= MAX_M, f"in 1..{MAX_M}")
        check("block_size", self.block_size in BLOCK_SIZES, f"one of {BLOCK_SIZES}")
        check("cols", self.cols in COLS, f"one of {COLS}")
        check("lanes", self.lanes in LANES, f"one of {LANES}")
        check("unroll", self.unroll in UNROLLS, f"one of {UNROLLS}")
        check("warps", self.warps in (1, 2, 4, 8), "one of (1, 2, 4, 8)")
        check("blocks_per_sm", 1 <= self.blocks_per_sm <= 32 // self.warps * 2,
              f"in 1..{64 // self.warps}")
        check("pipeline", not self.pipeline or self.M == 1, "False when M > 1 (M = 1 only)")
        mma_cols = (MMA_COLS,) if self.M == 1 else MMA_BATCH_COLS
        mma_tiling = self.lanes == MMA_LANES and self.cols in mma_cols
        check("mma", not self.mma or mma_tiling,
              f"False unless lanes = {MMA_LANES} and cols = {MMA_COLS} (M > 1: one of "
              f"{MMA_BATCH_COLS})")
        check("ksplit", self.ksplit in (1, 2, 4, 8) and self.warps % self.ksplit == 0
              and (self.ksplit == 1 or (self.mma and not self.pipeline and not self.words)),
              "1, 2, 4 or 8 dividing warps, and 1 unless mma (without pipeline or words)")
        check("stagger", 0 <= self.stagger <= MAX_STAGGER_CYCLES, f"in 0..{MAX_STAGGER_CYCLES} (cycles)")
        check("words", not self.words or (self.pdl and self.M == 1 and self.act_vector),
              "False unless pdl, M = 1 and act_vector")

    @property
    def columns_per_warp(self) -> int:
        return 32 // self.lanes * self.cols

    @property
    def groups_per_block(self) -> int:
        """Column groups a block folds at once (``warps / ksplit``)."""
        return self.warps // self.ksplit


def _unroll_spills(M, dtype, block_size, zero_points) -> bool:
    """Whether 2 chunks per lane step would cost more than they give: M > 1 bf16 keeps float32
    pairs and activations live (spilled on the H200); at M = 1 (the scalar loop) the zero
    points' per-group constants do (4-104 bytes of local memory per thread, ptxas for sm_90 with
    4 columns and 128 registers; bench/NOTES.md), except fp16 with blocks of >= 64, whose 8 B
    spill costs less than the second chunk gives (H100, session 19, lm_head: bs 64 + zp 63.2
    against 67.5 us, bs 128 + zp 61.6 / 64.5; bf16 bs 128 + zp spills 88 B: 71.2 / 66.0)."""
    if M > 1:
        return dtype == "bfloat16"
    return bool(zero_points) and (dtype == "bfloat16" or block_size < 64)


#: The longest activation row the M = 1 stage holds (hidden sizes up to 4096; longer rows fold
#: in float32 (bf16) or on CUDA cores (the mma configuration)), and the column groups each warp
#: of the grid must fold for the bf16 stage to pay (:func:`stages_row`): the bf16 stage is two
#: passes over the activations (the row's largest magnitude, then the scaled conversion) before
#: the first fold, latency that a warp with one group cannot hide (H200, commit 93b2d80: k/v
#: bf16 3.33 -> 4.26 us, q/o 4.41 -> 5.17 with a per-lane test in every warp; bench/NOTES.md).
#: lm_head's warps fold 18 groups (37984 groups of 4 columns over 2112 warps), the other decode
#: shapes' at most 2. An fp16 row on CUDA cores is never staged: its one-pass stage was slower
#: wherever timed (H100, session 15: down 2048 x 6144 7.60 against 6.82 us, lm_head 65.30
#: against 64.64; bench/NOTES.md).
STAGE_MAX_K, STAGE_MIN_GROUPS = 4096, 4
#: The same for the mma fold, whose fp16 stage is a plain copy (bf16: plus the range scan): 2, so
#: that the fold also runs at 5-6 blocks per SM on lm_head (3.0-3.6 groups per warp; at 4 the
#: 5-block probes of session 14 silently took the CUDA-core fallback). Timed on an H100 (session
#: 15, fp16 bs 32, one process): 5 blocks 65.75 us, 6 blocks 69.52, the CUDA-core default 64.17.
MMA_STAGE_MIN_GROUPS = 2


#: Whether :func:`choose_config` takes the mma fold where :func:`mma_pays`. Off until a GPU run
#: shows it faster than the CUDA-core fold it would replace (bench/NOTES.md, session 13: no
#: device could be started to time it); the fold itself is tested on the simulator and runs
#: through ``python -m bench.targets --configs c2l4u2b4m``.
MMA_CHOSEN = False


def mma_pays(M, N, K, multiprocessors) -> bool:
    """Whether :func:`choose_config` takes the M = 1 mma fold (with :data:`MMA_CHOSEN`): one
    row, K <= the stage's, and enough 16-column groups for each warp of the full persistent grid
    to fold :data:`STAGE_MIN_GROUPS` of them (the stage is filled once per block:
    bench/NOTES.md)."""
    if not MMA_CHOSEN:
        return False
    groups = -(-N // (32 // MMA_LANES * MMA_COLS))
    stride = MMA_WARPS * MMA_BLOCKS * multiprocessors
    return M == 1 and K <= STAGE_MAX_K and groups >= STAGE_MIN_GROUPS * stride


def warps_per_sm_target(M) -> int:
    """The busy warps per SM below which :func:`choose_config` halves the columns per lane: 4
    at M = 1, 8 for M > 1. At M = 1 fewer, wider warps won on the H100 (bench/NOTES.md, session
    14): q/o 2048 x 2048 as c2u2b4 against c1u2b8 3.86 / 4.28 us fp16 and 4.10 / 4.50 bf16, down
    2048 x 6144 6.69 / 7.44 fp16; a target of 2 (4 columns) lost on down bf16 (8.03 / 7.42)."""
    return 4 if M == 1 else 8


def choose_config(M, N, K, block_size, dtype, zero_points, *, act_aligned16=True,
                  weight_aligned16=True, cols=None, multiprocessors=132,
                  pdl=False) -> DefaultConfig:
    """The default configuration for a problem (``cols`` overrides the column count).

    lanes: enough lanes per column for its chunks (K short: several columns per warp);
    unroll: up to 2 chunks per lane per step (1 where 2 spills: bf16 at M > 1, zero points at
    M = 1 but fp16 with blocks >= 64); cols: 4 for M = 1, 2 for M > 1 (registers), fewer
    while the grid would not give every SM :func:`warps_per_sm_target` warps (4 at M = 1, 8
    beyond); resident blocks per SM: 8 for one column
    (64 registers), else 4 up to M = 4 and 2 beyond (measured on the H200, bench/NOTES.md).
    M = 1 where :func:`mma_pays` (``cols`` not given): the tensor-core fold's tiling instead
    (4 lanes and 2 columns per lane, :data:`MMA_WARPS` warps, :data:`MMA_BLOCKS` blocks per SM);
    M >= 2 where :func:`.mma_tiling.mma_batch_reason` gives one (``cols`` not given, or one of
    :data:`.mma_tiling.MMA_BATCH_COLS`): the M > 1 tensor-core fold, 4 lanes per column and
    :func:`.mma_tiling.mma_batch_tiling`'s columns, unroll, blocks per SM and K split."""
    row_bytes = -(-K // block_size) * block_size // 2
    weight_vector = bool(weight_aligned16) and row_bytes % 16 == 0
    if cols in (None,) + MMA_BATCH_COLS and mma_batch_reason(M, N, K, multiprocessors):
        chosen, unroll, blocks, ksplit = mma_batch_tiling(M, N, K, zero_points, multiprocessors)
        cols = chosen if cols is None else cols
        per_lane = -(-K // 32 // MMA_LANES)
        while unroll > 1 and unroll > per_lane:
            unroll //= 2
        return DefaultConfig(dtype=str(dtype), M=int(M), block_size=int(block_size),
                             zero_points=bool(zero_points), cols=cols, lanes=MMA_LANES,
                             unroll=unroll, warps=MMA_WARPS, blocks_per_sm=blocks,
                             act_vector=bool(act_aligned16), weight_vector=weight_vector,
                             pdl=bool(pdl), mma=True, ksplit=ksplit)
    if cols is None and mma_pays(M, N, K, multiprocessors):
        per_lane = -(-K // 32 // MMA_LANES)
        unroll = 1 if per_lane == 1 else 2      # no spills at 2, zero points included (ptxas)
        return DefaultConfig(dtype=str(dtype), M=1, block_size=int(block_size),
                             zero_points=bool(zero_points), cols=MMA_COLS, lanes=MMA_LANES,
                             unroll=unroll, warps=MMA_WARPS, blocks_per_sm=MMA_BLOCKS,
                             act_vector=bool(act_aligned16), weight_vector=weight_vector,
                             pdl=bool(pdl), mma=True)
    chunks = -(-K // 32)
    lanes = 1
    while lanes < 32 and lanes < chunks:
        lanes *= 2
    per_lane = -(-chunks // lanes)
    unroll = 1 if per_lane == 1 or _unroll_spills(M, dtype, block_size, zero_points) else 2
    warps = 4
    if cols is None:
        cols = 4 if M == 1 else 2
        target = warps_per_sm_target(M)
        while cols > 1 and -(-N // (32 // lanes * cols)) < target * multiprocessors:
            cols //= 2
    blocks = 8 if (cols == 1 and M == 1) else (4 if M <= 4 else 2)
    return DefaultConfig(dtype=str(dtype), M=int(M), block_size=int(block_size),
                         zero_points=bool(zero_points), cols=cols, lanes=lanes, unroll=unroll,
                         warps=warps, blocks_per_sm=blocks, act_vector=bool(act_aligned16),
                         weight_vector=weight_vector, pdl=bool(pdl))


def choice_reasons(config: DefaultConfig, N: int, K: int, multiprocessors: int = 132) -> dict:
    """Why :func:`choose_config` chose ``config``'s ``cols`` and ``unroll`` for ``N x K``:
    ``{"cols": text, "unroll": text}`` (for ``explain()``; a field the caller fixed is not
    explained by its caller)."""
    chunks = -(-K // 32)
    per_lane = -(-chunks // config.lanes)
    full = 4 if config.M == 1 else 2
    if config.mma and config.M > 1:
        cols = (f"{config.cols} columns per lane step, {config.lanes} lanes per column at M = "
                f"{config.M}: the tensor-core fold (mma.sync m16n8k16: {8 * config.cols} columns "
                f"per warp are A, the rows B, one mma per 8 rows), since "
                f"{mma_batch_reason(config.M, N, K, multiprocessors) or 'it was asked for'}")
    elif config.mma:
        cols = (f"{config.cols} columns per lane step, {config.lanes} lanes per column at M = 1: the "
                f"tensor-core fold (mma.sync m16n8k16: a warp's 16 columns are A), since N = {N} "
                f"gives each of the {config.warps * config.blocks_per_sm * multiprocessors} warps "
                f">= {STAGE_MIN_GROUPS} groups of 16 columns and K = {K} <= {STAGE_MAX_K} fits "
                "the staged row")
    elif config.cols < full:
        cols = (f"{full} columns per lane step at M = {config.M}, halved to {config.cols} so N = {N} "
                f"gives every one of {multiprocessors} SMs {warps_per_sm_target(config.M)} warps")
    elif config.M == 1:
        cols = (f"4 columns per lane step at M = 1 ({config.cols * config.unroll} loads of 16 bytes "
                "in flight per lane)")
    else:
        cols = f"2 columns per lane step at M = {config.M} > 1 (M accumulators per column: registers)"
    cols += (f"; {config.lanes} lanes per column (K = {K}: {chunks} chunks of 32), "
             f"{config.blocks_per_sm} blocks per SM")
    if config.ksplit > 1:
        cols += f"; {config.ksplit} warps share each column group (K split)"
    if per_lane == 1:
        unroll = f"1: each lane has one chunk of its column (K = {K}, {config.lanes} lanes)"
    elif config.mma and config.M > 1:
        unroll = (f"{config.unroll} chunks per lane step at M = {config.M} with {config.cols} "
                  "columns per lane (the tensor-core fold's tiling for this M, N and zero-point "
                  "setting, measured on the decode shapes; more spills)")
    elif config.dtype == "bfloat16" and config.M > 1:
        unroll = "1 for bfloat16 at M > 1 (float32 pairs stay live; unroll 2 spilled on the H200)"
    elif config.mma:
        unroll = (f"2 chunks per lane step (each lane has {per_lane} chunks of its column; the "
                  "tensor-core fold does not spill at 2, zero points included)")
    elif config.M == 1 and config.zero_points and config.unroll == 1:
        unroll = ("1 with zero points at M = 1 in bf16 or blocks < 64 (their per-group constants "
                  "made unroll 2 spill)")
    else:
        unroll = f"2 chunks per lane step (each lane has {per_lane} chunks of its column)"
    return {"cols": cols, "unroll": unroll}


def stage_min_groups(config: DefaultConfig) -> int:
    """Column groups each warp of the grid must fold for ``config``'s kernel to stage its row
    (bf16 or the mma fold at M = 1; see :func:`stages_row`): :data:`MMA_STAGE_MIN_GROUPS` for
    the mma fold, else :data:`STAGE_MIN_GROUPS`."""
    return MMA_STAGE_MIN_GROUPS if config.mma else STAGE_MIN_GROUPS


def stages_row(config: DefaultConfig, N: int, K: int, multiprocessors: int) -> bool:
    """Whether a launch of ``config`` on ``N x K`` (grid of :func:`geometry`) stages its
    activation row in shared memory, as the kernel decides from its grid: M = 1, bf16 or the
    mma fold, K <= :data:`STAGE_MAX_K` and >= :func:`stage_min_groups` column groups per warp of
    the grid. Where it does not, an mma configuration folds on CUDA cores (``default_mma``), and
    a bf16 row in float32; a staged bf16 row out of the fp16 range also does, which only the
    kernel sees."""
    if config.M != 1 or K > STAGE_MAX_K or not (config.mma or config.dtype == "bfloat16"):
        return False
    (blocks, _, _), _ = geometry(config, N, multiprocessors)
    groups = -(-N // config.columns_per_warp)
    return groups >= stage_min_groups(config) * blocks * config.warps


def geometry(config: DefaultConfig, N: int, multiprocessors: int):
    """``(grid, block)``: a persistent grid of at most ``blocks_per_sm`` blocks per SM."""
    groups = -(-N // config.columns_per_warp)
    blocks = -(-groups // config.groups_per_block)
    return (max(1, min(blocks, config.blocks_per_sm * multiprocessors)), 1, 1), \
        (32 * config.warps, 1, 1)
