"""The split-K down projection as a chain operation (:mod:`.split_k_kernel`), and its shape.

:class:`SplitK` names a shape (columns per warp, unroll, column warps per K chunk);
:class:`SplitKLaunch` validates its arguments, sizes the block (``chunks × col_warps`` warps,
``chunks = ceil(K / (512 unroll))``) and the persistent grid, and binds the launch once, like
:class:`~int4gemv.decode.launches.GemvLaunch` (``op(stream)`` enqueues it; ``stamps``/``slot``
for the timeline).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import check_array, describe, device_view
from ..device import device_facts, stream_handle
from ..weights import QuantizedWeight
from .launches import bound_kernel
from .split_k_kernel import WORDS_PER_LANE_STEP, split_k_kernel

__all__ = ["SplitK", "SplitKLaunch", "MAX_BLOCKS_PER_SM"]

#: Persistent grid: at most this many blocks per multiprocessor (the hardware's resident cap).
MAX_BLOCKS_PER_SM = 32
#: Threads in a block at most (CUDA's limit).
MAX_THREADS = 1024
_ELEMENTS_PER_WORD = 16  # int4 nibbles per uint64 weight word


@dataclass(frozen=True)
class SplitK:
    """A split-K shape: ``cols`` columns per warp (a power of two <= 16), ``unroll`` words per
    lane per chunk (1, 2, 4 or 8: a chunk is ``512 unroll`` elements of K), ``col_warps`` warps
    per K chunk (the block computes ``cols × col_warps`` columns per step)."""

    cols: int = 4
    unroll: int = 4
    col_warps: int = 4

    def __post_init__(self):
        for name in ("cols", "unroll", "col_warps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"SplitK.{name} must be a positive int; got {v!r}")
        if self.cols & (self.cols - 1) or self.cols > 16:
            raise ValueError(f"SplitK.cols must be a power of two <= 16; got {self.cols}")
        if self.unroll not in (1, 2, 4, 8):
            raise ValueError(f"SplitK.unroll must be 1, 2, 4 or 8; got {self.unroll}")

    def chunks(self, K: int) -> int:
        """K chunks (warps per column sub-group) for a weight of ``K``."""
        return -(-K // (_ELEMENTS_PER_WORD * WORDS_PER_LANE_STEP * self.unroll))


def _fp16_vector(name, x, length, align=2):
    """``x`` checked as a C-contiguous fp16 device vector of ``length`` (TypeError/ValueError
    naming it); returns its :class:`~int4gemv.arrays.ArrayInfo`."""
    if isinstance(x, np.ndarray) or not hasattr(x, "copy_to_host"):
        raise TypeError(f"{name} must be a Numba device array; got {type(x).__name__}")
    info = describe(name, x)
    check_array(info, "float16", lambda s: s == (length,), f"({length},)", align=align)
    return info


class SplitKLaunch:
    """``out = act · wᵀ (+ bias)`` with the split-K kernel, as a chain operation.

    Parameters
    ----------
    a : device array
        fp16 ``[K]``; with ``fused``, the gate/up output ``[2K]`` (``g`` then ``u``), and the
        activations are ``silu(g)·u``. 8-byte aligned (16 with ``words``).
    w : QuantizedWeight
        Block size 32, K a multiple of 32, fp16 scales.
    out, bias
        fp16 ``[N]`` device vectors (``bias`` optional, added in float32).
    shape : SplitK
    fused, pdl, words : bool
        See :func:`~int4gemv.decode.split_k_kernel.split_k_kernel`.
    max_blocks : int, optional
        Cap on the (persistent) grid.
    stamps, slot
        As for :class:`~int4gemv.decode.launches.GemvLaunch`.

    Raises TypeError/ValueError naming the argument before anything is launched.
    """

    def __init__(self, a, w, out, bias=None, *, shape: SplitK = SplitK(), fused: bool = False,
                 pdl: bool = False, words: bool = False, max_blocks=None, stamps=None, slot=0):
        if not isinstance(shape, SplitK):
            raise TypeError(f"shape must be a SplitK; got {type(shape).__name__}")
        for name, v in (("fused", fused), ("pdl", pdl), ("words", words)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool; got {type(v).__name__}")
        if max_blocks is not None and (isinstance(max_blocks, bool) or not isinstance(max_blocks, (int, np.integer))
                                       or max_blocks < 1):
            raise ValueError(f"max_blocks must be None or a positive int; got {max_blocks!r}")
        if not isinstance(w, QuantizedWeight):
            raise TypeError(f"w must be an int4gemv.QuantizedWeight; got {type(w).__name__}")
        if w.block_size != 32 or w.K % 32 or w.dtype != "float16":
            raise ValueError(f"w must have block_size 32, K a multiple of 32 and fp16 scales; got "
                             f"block_size {w.block_size}, K {w.K}, {w.dtype}")
        act = device_view(_fp16_vector("a", a, 2 * w.K if fused else w.K, align=16 if words else 8), np.uint64)
        _fp16_vector("out", out, w.N)
        if bias is not None:
            _fp16_vector("bias", bias, w.N)
        chunks = shape.chunks(w.K)
        threads = 32 * chunks * shape.col_warps
        if threads > MAX_THREADS:
            raise ValueError(f"shape {shape} needs {chunks} chunks x {shape.col_warps} warps = {threads} "
                             f"threads for K={w.K}; a block has at most {MAX_THREADS}")
        groups = -(-w.N // (shape.cols * shape.col_warps))
        grid = min(groups, MAX_BLOCKS_PER_SM * device_facts()[1])
        if max_blocks is not None:
            grid = min(grid, int(max_blocks))
        d = w.device_arrays()
        zp = w.zero_points is not None
        kernel = split_k_kernel(shape.cols, shape.unroll, chunks, shape.col_warps, fused, zp, pdl, words)
        args = (act, d["words64_flat"], d["scales_flat"], d["zero_points_flat"],
                d["no_bias"] if bias is None else bias, bias is not None, out, w.K)
        self.grid, self.block, self.out, self._keep = (grid,), (threads,), out, (a, w, bias)
        self.bound = bound_kernel(kernel, args, grid, threads, programmatic=pdl, stamps=stamps, slot=slot)

    def __call__(self, stream=None):
        self.bound.launch(stream_handle(stream))
        return self.out
