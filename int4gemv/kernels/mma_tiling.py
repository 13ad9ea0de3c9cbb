"""The default tiling's tensor-core folds: their fixed tiling (:mod:`.default_mma` at M = 1,
:mod:`.default_mma_batch` at M = 2..16) and where the chooser takes the M > 1 fold, with which
columns, unroll, blocks per SM and K split (measured on an H100, bench/NOTES.md sessions 18-19).
Pure Python: no GPU is touched here."""

from __future__ import annotations

__all__ = ["MMA_LANES", "MMA_COLS", "MMA_WARPS", "MMA_BLOCKS", "MMA_BATCH_COLS",
           "MMA_BATCH_MIN_GROUPS", "KSPLIT_MIN_M", "KSPLIT", "ONE_TILE_MIN_M", "ONE_TILE_MIN_N",
           "ONE_TILE_SHORT_K", "mma_batch_pays", "mma_ksplit_pays", "mma_one_tile_pays",
           "mma_batch_tiling", "mma_batch_reason"]

#: The mma folds' tiling: 4 lanes per column (lane t = chunk stripe t) and 2 columns per lane at
#: M = 1, which its mapping needs; 4 warps per block, 4 blocks per SM (128 registers a thread).
MMA_LANES, MMA_COLS, MMA_WARPS, MMA_BLOCKS = 4, 2, 4, 4
#: The columns per lane the M > 1 fold takes: 2 (one A tile of 16 columns per warp) or 4 (two
#: tiles sharing each activation fragment).
MMA_BATCH_COLS = (2, 4)
#: Groups of 16 columns each warp of a full persistent grid of :data:`MMA_WARPS` x
#: :data:`MMA_BLOCKS` x SMs warps must have for the M > 1 fold to run without a K split
#: (lm_head, 151936 columns: 4.5 per warp). Measured on an H100 (session 18, fp16 bs 32, against
#: the tensor-core kernel in one process): M = 2 68.1 against 81.2 us, M = 8 73.2 / 83.5.
MMA_BATCH_MIN_GROUPS = 2
#: Narrower N takes the fold with a K split (:data:`KSPLIT` warps of a block share a group of
#: 32 columns) from :data:`KSPLIT_MIN_M` rows, where its grid still gives every SM a block. H100,
#: session 19, fp16 bs 32 against the tensor-core kernel in one process: gate/up 6144 x 2048
#: M = 16 8.46 against 10.51 us (192 groups of 32 columns); M = 8 level (6.86 / 6.89); down
#: 2048 x 6144 (64 groups, half the SMs idle) M = 16 15.55 against 10.95: the kernel keeps it.
KSPLIT_MIN_M, KSPLIT = 9, 4
#: N narrower still (no group of 32 columns per SM: k/v, q/o, down) takes the K split with one
#: column tile a warp (groups of 16 columns: twice the blocks) from :data:`ONE_TILE_MIN_M` rows
#: and :data:`ONE_TILE_MIN_N` columns, below :data:`KSPLIT_MIN_M` rows only where K <=
#: :data:`ONE_TILE_SHORT_K` (one step a lane). H100, session 20, fp16 bs 32, one process each M
#: against the tensor-core kernel: M = 16 k/v 3.97 against 4.93 us, q/o 4.72 / 6.11, down
#: 10.17 / 10.87; M = 8 k/v 3.37 / 3.72, q/o 3.96 / 4.29, but down (K = 6144, 3 steps a lane)
#: 8.62 / 8.04. Rows 5..8 share the one row tile measured at 8; narrower N was not measured.
ONE_TILE_MIN_M, ONE_TILE_MIN_N, ONE_TILE_SHORT_K = 5, 1024, 2048


def mma_batch_pays(M, N, multiprocessors) -> bool:
    """Whether the M > 1 fold runs without a K split: M >= 2 and N gives every warp of the full
    persistent grid :data:`MMA_BATCH_MIN_GROUPS` groups of 16 columns."""
    stride = MMA_WARPS * MMA_BLOCKS * multiprocessors
    return M >= 2 and -(-N // 16) >= MMA_BATCH_MIN_GROUPS * stride


def mma_ksplit_pays(M, N, multiprocessors) -> bool:
    """Whether the M > 1 fold runs with a K split: M >= :data:`KSPLIT_MIN_M`, N too narrow for
    :func:`mma_batch_pays`, and at least one group of 32 columns (a block) per SM."""
    return (M >= KSPLIT_MIN_M and not mma_batch_pays(M, N, multiprocessors)
            and -(-N // 32) >= multiprocessors)


def mma_one_tile_pays(M, N, K, multiprocessors) -> bool:
    """Whether the M > 1 fold runs with the one-tile K split: N from :data:`ONE_TILE_MIN_N` up to
    where it would not give every SM a group of 32 columns, and M >= :data:`KSPLIT_MIN_M`, or M
    >= :data:`ONE_TILE_MIN_M` with K <= :data:`ONE_TILE_SHORT_K`."""
    return (M >= ONE_TILE_MIN_M and ONE_TILE_MIN_N <= N and -(-N // 32) < multiprocessors
            and (M >= KSPLIT_MIN_M or K <= ONE_TILE_SHORT_K))


def mma_batch_tiling(M, N, K, zero_points, multiprocessors) -> tuple:
    """``(cols, unroll, blocks_per_sm, ksplit)`` of the M > 1 fold for an ``M x N`` call (H100,
    lm_head bs 32 fp16 unless said):

    - up to 4 rows 2 x 4 (M = 2 68.1 against 73.7 us at 4 x 2);
    - up to 8 rows 4 x 2 (M = 8 73.2 against 76.5 at 2 x 4: one activation fragment feeds 32
      columns); 4 x 4 at 3 blocks per SM measured 74.5 / 76.6 fp16 and 77.1 / 77.6 bf16 but
      spills 24 B at bs 16 bf16 (ptxas 13): not taken;
    - zero points up to 4 rows 2 x 2; 5..8 rows 4 x 2 at 3 blocks (bs 16 + zp M = 8: 90.0
      against 97.4 at 2 x 2 x 4);
    - past 8 rows 4 x 2 at 3 blocks per SM (168 registers; M = 16 fp16 83.2 against 91.3 at
      4 x 1, bf16 85.1 / 101.6), zero points included although ptxas then keeps 24-48 B in local
      memory (bs 64 + zp 79.0 against 86.1, bs 16 + zp 106.5 / 111.1);
    - narrow N past 8 rows (:func:`mma_ksplit_pays`): 4 x 1 at 3 blocks, :data:`KSPLIT` warps per
      group of 32 columns;
    - narrower N (:func:`mma_one_tile_pays`): 2 x 4 at 3 blocks, :data:`KSPLIT` warps per group of
      16 columns (168 registers at M = 16, no local memory); with zero points past 8 rows 2 x 2,
      where 2 x 4 keeps 20-52 B in local memory and 2 x 2 none (ptxas 13, not timed).

    Blocks per SM :data:`MMA_BLOCKS` unless said."""
    if mma_ksplit_pays(M, N, multiprocessors):
        return 4, 1, 3, KSPLIT
    if mma_one_tile_pays(M, N, K, multiprocessors):
        return 2, 2 if zero_points and M > 8 else 4, 3, KSPLIT
    if M > 8 or (zero_points and M > 4):
        return 4, 2, 3, 1
    if zero_points:
        return 2, 2, MMA_BLOCKS, 1
    return (2, 4, MMA_BLOCKS, 1) if M <= 4 else (4, 2, MMA_BLOCKS, 1)


def mma_batch_reason(M, N, K, multiprocessors) -> str | None:
    """Why the chooser gives an ``M x N x K`` call to the M > 1 fold, or ``None`` where it does
    not (the tensor-core kernel's split K keeps it)."""
    if mma_batch_pays(M, N, multiprocessors):
        return (f"N = {N} gives each of the {MMA_WARPS * MMA_BLOCKS * multiprocessors} warps of "
                f"its persistent grid >= {MMA_BATCH_MIN_GROUPS} groups of 16 columns on "
                f"{multiprocessors} SMs")
    if mma_ksplit_pays(M, N, multiprocessors):
        return (f"M = {M} >= {KSPLIT_MIN_M} and N = {N} gives its {multiprocessors} SMs >= 1 "
                f"group of 32 columns each, folded by {KSPLIT} warps with a K split")
    if mma_one_tile_pays(M, N, K, multiprocessors):
        return (f"M = {M} and N = {N} ({ONE_TILE_MIN_N} <= N < 32 x {multiprocessors} SMs"
                + (f", K = {K} <= {ONE_TILE_SHORT_K}" if M < KSPLIT_MIN_M else "")
                + f"): groups of 16 columns, folded by {KSPLIT} warps with a K split")
    return None
