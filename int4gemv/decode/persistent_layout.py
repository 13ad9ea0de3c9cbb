"""The persistent chain kernel's geometry and shared-memory layout: constants and pure functions.

:mod:`.persistent_kernel` builds the kernel from these, :class:`.persistent.PersistentChain` sizes
its grid and launch with them. The staged activation row uses the default tiling's stride
(:data:`~int4gemv.kernels.default_m1.CHUNK_STRIDE` words a 32-element chunk).
"""

from __future__ import annotations

from ..kernels.default_m1 import CHUNK_STRIDE

__all__ = ["WARPS_PER_SM", "WARP_CHOICES", "PHASE_START", "STAGED", "ARRIVED", "SLOTS", "MAX_COLS", "RING",
           "RING_WORDS", "MAX_K", "STAGE_PASS", "SHARED_PER_SM", "SHARED_PER_BLOCK_RESERVED", "SHARED_PER_BLOCK",
           "PHASE_FIELDS", "stage_words", "shared_bytes", "blocks_per_sm"]

#: Warps per SM of the GPU's grid at most (128 registers a thread fill the register file), and the
#: warps a block may have (:func:`blocks_per_sm`: fewer where the rings fill the shared memory).
WARPS_PER_SM, WARP_CHOICES = 16, (1, 2, 4, 8, 16)
#: Indices of the phase stamps (``timed``): the block starts the phase (passed the barrier),
#: has staged its activations, has stored its outputs and counted itself.
PHASE_START, STAGED, ARRIVED = 0, 1, 2
#: Weight copies (16 bytes) a lane makes an item; the most columns per lane a phase may take (a
#: step is ``cols x unroll <= SLOTS`` copies, ``unroll`` a power of two).
SLOTS, MAX_COLS = 4, 4
#: Item slots of a warp's ring (``RING - 1`` in flight while one folds), and the ring words of one
#: item slot (``SLOTS`` copies of 4 words for 32 lanes; its scales take a quarter as many more).
RING, RING_WORDS = 4, SLOTS * 4 * 32
#: The longest activation row the shared stage holds (15 KB a block).
MAX_K = 6144
#: Activation pieces (8 values) a thread loads before it stages any: a 4-warp block's longest
#: row in one pass (6144 / 8 / 128).
STAGE_PASS = 6
#: Shared memory of an SM and the most a block may have (sm_90: 228 KB, 1 KB of it reserved per
#: resident block; 227 KB).
SHARED_PER_SM, SHARED_PER_BLOCK_RESERVED, SHARED_PER_BLOCK = 228 * 1024, 1024, 227 * 1024
#: Columns of the phase table: byte offset of the packed weights, element offset of the scales,
#: K, N, bytes per packed column, scales per column, log2(block size / 32), activation offset,
#: silu flag, bias offset (-1: none), output offset (all in ``acts`` elements), columns per lane,
#: log2(chunks per step).
PHASE_FIELDS = ("words", "scales", "K", "N", "row_bytes", "groups", "group_shift", "act", "silu", "bias",
                "out", "cols", "unroll_shift")


def stage_words() -> int:
    """Words of the staged activation row (the first of the block's shared memory). Pure."""
    return MAX_K // 32 * CHUNK_STRIDE


def shared_bytes(warps: int) -> int:
    """Dynamic shared memory of a block of ``warps`` warps (the launch passes it): the stage,
    then the weight rings, then the scale rings, in uint32 words. Pure."""
    return 4 * (stage_words() + warps * RING * RING_WORDS * 5 // 4)


def blocks_per_sm(warps: int) -> int:
    """Resident blocks of ``warps`` warps per SM: :data:`WARPS_PER_SM` warps at most, as many
    as the shared memory holds. Pure."""
    return min(WARPS_PER_SM // warps, SHARED_PER_SM // (shared_bytes(warps) + SHARED_PER_BLOCK_RESERVED))
