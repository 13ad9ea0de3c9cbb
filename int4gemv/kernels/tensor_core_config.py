"""The tensor-core kernel's compile-time configuration: :class:`TensorCoreConfig`, the
per-problem choice :func:`choose_config` with its reasons, and the launch :func:`geometry`.
Pure Python: no GPU is touched here.

Vocabulary (the kernel module's diagram shows them): a *tile* is 16 columns (one ``mma`` A
operand); a *segment* is 128 elements of K (one 16-byte load per lane and tile column, 8
``mma`` per row tile); a *column group* is ``tiles`` tiles that one warp folds together;
``ksplit`` warps of a block share a column group, each folding a contiguous slice of the
segments (split-K inside the block, reduced through shared memory in a fixed order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TensorCoreConfig", "choose_config", "choice_reasons", "geometry", "wide_tiles",
           "wide_spills", "DTYPES", "MAX_M", "TILE_COLS", "SEGMENT", "TILES", "UNROLLS", "KSPLITS",
           "BLOCK_SIZES", "B_TILE_ROWS", "WIDE_TILES", "WIDE_REGISTERS"]

DTYPES = ("float16", "bfloat16")
MAX_M = 16
BLOCK_SIZES = (16, 32, 64, 128)
#: Columns per ``mma`` A operand (m16n8k16 with the weights as A).
TILE_COLS = 16
#: Batch rows of one ``mma`` B tile (m16n8k16: n = 8); M above it needs a second row tile.
B_TILE_ROWS = 8
#: K elements per segment: the four lanes of a column each load 16 bytes (32 nibbles).
SEGMENT = 128
TILES = (1, 2, 4)
UNROLLS = (1, 2, 4, 8)
KSPLITS = (1, 2, 4, 8, 16)
#: Resident warps per SM the choice aims at: 16 warps x (2 tiles x 16 bytes x 32 lanes) x
#: unroll 2 keep ~32 KB of weights in flight per SM, ~4 MB chip-wide (DRAM latency needs ~3 MB).
TARGET_WARPS_PER_SM = 16
#: Warps per block unless ``ksplit`` needs more.
BASE_WARPS = 8
#: The most resident warps per SM the balancing may choose: 24 warps leave 85 registers a thread.
BALANCE_WARPS_PER_SM = 24
#: Registers a thread needs for a double-buffered step without spilling (H200: 80 spilled).
DOUBLE_BUFFER_REGISTERS = 128
#: 32-bit registers per SM (sm_90).
REGISTERS_PER_SM = 65536
#: The most resident warps per SM on sm_90 (2048 threads).
MAX_WARPS_PER_SM = 64
#: Tiles per warp for wide N at M <= :data:`B_TILE_ROWS` (:func:`wide_tiles`; session 7).
WIDE_TILES = 2
#: Registers a thread of the two-tile step may use: ptxas gives it 126 at M <= 8 without local
#: memory (bench/results/sass-tensor-core-offline-sm90a-s7-tiles2.txt); its blocks per SM are
#: what the register file holds at this budget (2 blocks of 8 warps).
WIDE_REGISTERS = 128


@dataclass(frozen=True)
class TensorCoreConfig:
    """One compilation of the tensor-core kernel (every field is a compile-time constant).

    Parameters
    ----------
    dtype : str
        ``"float16"`` or ``"bfloat16"``: activations, scales, bias and output.
    M : int
        Batch rows, 1..16 (1..8: one 8-row ``mma`` B tile; 9..16: two).
    block_size : int
        16, 32, 64 or 128.
    zero_points : bool
        The weight has zero points.
    tiles : int
        16-column tiles a warp folds per segment (1, 2 or 4): loads in flight and activation reuse.
    unroll : int
        Segments per step (1, 2, 4 or 8): every load of a step is issued before any is used.
    ksplit : int
        Warps sharing a column group, splitting K (1..16, a power of two, dividing ``warps``).
    warps : int
        Warps per block (4, 8 or 16).
    blocks_per_sm : int
        Resident blocks per SM the persistent grid is sized for (launch bound).
    weight_vector : bool
        Packed rows are 16-byte aligned (one 16-byte load per lane; else two 8-byte loads).
    act_vector : bool
        Activations are 16-byte aligned (16-byte loads; else element loads).
    double_buffer : bool
        Double-buffered steps: the next step's weight loads are issued before this step is
        folded (twice the weight registers; loads always in flight).
    """

    dtype: str
    M: int
    block_size: int
    zero_points: bool
    tiles: int = 1
    unroll: int = 2
    ksplit: int = 1
    warps: int = BASE_WARPS
    blocks_per_sm: int = 2
    weight_vector: bool = True
    act_vector: bool = True
    double_buffer: bool = False

    def __post_init__(self):
        for name in ("M", "block_size", "tiles", "unroll", "ksplit", "warps", "blocks_per_sm"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"TensorCoreConfig.{name} must be an int; got {type(value).__name__}")
        for name in ("zero_points", "weight_vector", "act_vector", "double_buffer"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"TensorCoreConfig.{name} must be a bool")

        def check(name, ok, accepted):
            if not ok:
                raise ValueError(f"TensorCoreConfig.{name} must be {accepted}; "
                                 f"got {getattr(self, name)!r}")
        check("dtype", self.dtype in DTYPES, f"one of {DTYPES}")
        check("M", 1 <= self.M <= MAX_M, f"in 1..{MAX_M}")
        check("block_size", self.block_size in BLOCK_SIZES, f"one of {BLOCK_SIZES}")
        check("tiles", self.tiles in TILES, f"one of {TILES}")
        check("unroll", self.unroll in UNROLLS, f"one of {UNROLLS}")
        check("ksplit", self.ksplit in KSPLITS, f"one of {KSPLITS}")
        check("warps", self.warps in (4, 8, 16) and self.warps % self.ksplit == 0,
              "4, 8 or 16 and a multiple of ksplit")
        check("blocks_per_sm", 1 <= self.blocks_per_sm <= MAX_WARPS_PER_SM // self.warps,
              f"in 1..{MAX_WARPS_PER_SM // self.warps}")

    @property
    def row_tiles(self) -> int:
        """8-row ``mma`` B tiles: 1 for M <= 8, else 2."""
        return 1 if self.M <= B_TILE_ROWS else 2

    @property
    def slots(self) -> int:
        """Column groups a block folds at once."""
        return self.warps // self.ksplit


def _plan(N, K, tiles, multiprocessors):
    """``(ksplit, warps)``: the fewest K-splits that give every SM its target warps."""
    segments = -(-K // SEGMENT)
    groups = -(-N // (TILE_COLS * tiles))
    ksplit = 1
    while (ksplit < KSPLITS[-1] and 2 * ksplit <= segments
           and groups * ksplit < TARGET_WARPS_PER_SM * multiprocessors):
        ksplit *= 2
    return ksplit, max(BASE_WARPS, ksplit)


def _blocks_per_sm(N, tiles, ksplit, warps, multiprocessors):
    """Resident blocks per SM (at least the target warps) that balance the persistent rounds
    best: the fraction of the grid's block slots busy over all rounds."""
    slots = warps // ksplit
    blocks = -(-N // (TILE_COLS * tiles * slots))
    low = max(1, TARGET_WARPS_PER_SM // warps)
    best, best_eff = low, 0.0
    for bps in range(low, max(low, BALANCE_WARPS_PER_SM // warps) + 1):
        grid = bps * multiprocessors
        eff = blocks / (grid * -(-blocks // grid))
        if eff > best_eff + 1e-9:
            best, best_eff = bps, eff
    return best


def wide_spills(M, block_size, zero_points) -> bool:
    """The two-tile formats ptxas spills (offline SASS of lm_head, session 7:
    bench/results/sass-tensor-core-offline-sm90a-s7-tiles2.txt):
    zero points at M = :data:`B_TILE_ROWS` (every row of the B tile live, no row predicates)
    with more than one group per segment (block_size < :data:`SEGMENT`): 64-152 bytes, 31-71
    LDL/STL, fp16 and bf16. With 128-element groups, without zero points or at M < 8 (M = 1..7
    share one compilation, with row predicates) it is clean (120-128 registers)."""
    return zero_points and M == B_TILE_ROWS and block_size < SEGMENT


def wide_tiles(M, N, multiprocessors, block_size=32, zero_points=False) -> bool:
    """Whether :func:`choose_config` gives each warp :data:`WIDE_TILES` tiles: M fits one B tile
    (at M = 16 the two-tile step keeps its arrays in a 208-byte local stack), N has a column
    group of ``WIDE_TILES`` tiles for each of :data:`TARGET_WARPS_PER_SM` warps on every SM
    without splitting K, and the format compiles without spilling (:func:`wide_spills`).
    Measured on the H200 (bench/NOTES.md, session 7): lm_head 151936 x 2048 bs 32 at M = 2/4/8,
    fp16 75.4 / 82.1 / 90.7 us with 2 tiles (2 blocks of 8 warps, 126 registers) against 85.3 /
    88.5 / 110.3 with 1 (3 blocks, 80 registers, 8 bytes spilled at M = 8), bf16 75.8 / 80.5 /
    87.6 against 84.2 / 88.2 / 100.3: one activation fragment feeds 32 columns."""
    groups = -(-N // (TILE_COLS * WIDE_TILES))
    return (M <= B_TILE_ROWS and groups >= TARGET_WARPS_PER_SM * multiprocessors
            and not wide_spills(M, block_size, zero_points))


def choose_config(M, N, K, block_size, dtype, zero_points, *, act_aligned16=True,
                  weight_aligned16=True, unroll=None, multiprocessors=132) -> TensorCoreConfig:
    """The configuration for a problem (``unroll`` overrides the segments per step).

    tiles: :data:`WIDE_TILES` where :func:`wide_tiles` holds (then ksplit 1, blocks_per_sm what
    the register file holds at :data:`WIDE_REGISTERS` a thread, no double buffer: the second
    tile's loads already use the registers a second step would need), else 1; ksplit: the
    fewest warps per column group (a power of two, at most the segments of K and 16) that give
    every SM :data:`TARGET_WARPS_PER_SM` warps; unroll: 2 segments per step (1 when a warp's
    slice has one segment); blocks_per_sm: what balances the persistent rounds (see
    :func:`choice_reasons`); double_buffer: with 16-warp blocks (one per SM, 128 registers a
    thread: room for a second step's weights; measured 4-6 % faster on down 2048x6144, and
    slower with 80 registers, where it spilled)."""
    wide = wide_tiles(M, N, multiprocessors, block_size, zero_points)
    tiles = WIDE_TILES if wide else 1
    ksplit, warps = _plan(N, K, tiles, multiprocessors)
    per_warp = -(-(-(-K // SEGMENT)) // ksplit)
    if unroll is None:
        unroll = 1 if per_warp == 1 else 2
    row_bytes = -(-K // block_size) * block_size // 2
    if wide:
        bps = REGISTERS_PER_SM // (warps * 32 * WIDE_REGISTERS)
        double_buffer = False
    else:
        bps = _blocks_per_sm(N, tiles, ksplit, warps, multiprocessors)
        double_buffer = bps * warps * 32 * DOUBLE_BUFFER_REGISTERS <= REGISTERS_PER_SM
    return TensorCoreConfig(dtype=str(dtype), M=int(M), block_size=int(block_size),
                            zero_points=bool(zero_points), tiles=tiles, unroll=int(unroll),
                            ksplit=ksplit, warps=warps,
                            blocks_per_sm=bps,
                            weight_vector=bool(weight_aligned16) and row_bytes % 16 == 0,
                            act_vector=bool(act_aligned16),
                            double_buffer=double_buffer)


def choice_reasons(config: TensorCoreConfig, N: int, K: int, multiprocessors: int) -> dict:
    """Why :func:`choose_config` chose ``config``'s ``unroll`` and ``tiles`` (for ``explain()``,
    which shows the ``unroll`` row: the tiles reason is part of it)."""
    segments = -(-K // SEGMENT)
    per_warp = -(-segments // config.ksplit)
    groups = -(-N // (TILE_COLS * config.tiles))
    wide_groups = -(-N // (TILE_COLS * WIDE_TILES))
    need = TARGET_WARPS_PER_SM * multiprocessors
    if config.M > B_TILE_ROWS:
        why = f"M = {config.M} > {B_TILE_ROWS} needs two row tiles (2 tiles: local memory)"
    elif wide_groups < need:
        why = (f"{wide_groups} groups of {TILE_COLS * WIDE_TILES} columns < {need} warps "
               f"({TARGET_WARPS_PER_SM} x {multiprocessors} SMs) without split-K")
    elif wide_spills(config.M, config.block_size, config.zero_points):
        why = (f"zero points at M = {B_TILE_ROWS} with block_size {config.block_size} < "
               f"{SEGMENT}: 2 tiles spill (offline SASS, session 7)")
    else:
        why = (f"M = {config.M} <= {B_TILE_ROWS} and {wide_groups} groups of "
               f"{TILE_COLS * WIDE_TILES} columns >= {need} warps ({TARGET_WARPS_PER_SM} x "
               f"{multiprocessors} SMs): measured 7-18 % faster on lm_head M = 2..8 "
               f"(bench/NOTES.md, session 7)")
    tiles = f"{config.tiles} tile(s) of {TILE_COLS} columns per warp: {why}"
    return {"tiles": tiles, "unroll": (
        f"{config.unroll} segment(s) of {SEGMENT} per step: K = {K} is {segments} segments; "
        f"{config.ksplit} warp(s) split K for each of the {groups} groups of "
        f"{TILE_COLS * config.tiles} columns ({per_warp} segments each; the fewest, up to 16, for "
        f"{TARGET_WARPS_PER_SM} warps on each of {multiprocessors} SMs); "
        f"{config.blocks_per_sm} blocks of {config.warps} warps per SM"
        + ("; double-buffered (128 registers a thread)" if config.double_buffer else "")
        + f"; {tiles}")}


def geometry(config: TensorCoreConfig, N: int, multiprocessors: int):
    """``(grid, block)``: a persistent grid of at most ``blocks_per_sm`` blocks per SM."""
    blocks = -(-N // (TILE_COLS * config.tiles * config.slots))
    return (max(1, min(blocks, config.blocks_per_sm * multiprocessors)), 1, 1), \
        (32 * config.warps, 1, 1)
