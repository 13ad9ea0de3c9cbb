"""L2 lookahead: a side branch of the decode step that streams the weights of later GEMVs into L2.

Each chain GEMV pays a dependency boundary (its predecessor's grid completes, memory is flushed,
its ``griddepcontrol.wait`` returns) and then a DRAM round trip before its weights arrive; its
early (pre-wait) loads need register space its predecessor still holds (bench/NOTES.md, issue 21).
A bulk L2 prefetch needs neither registers nor residency. With ``DecodeChain(lookahead=D)`` the
step gets a second branch: when the ``g``-th GEMV of the step completes, a small kernel issues
``cp.async.bulk.prefetch.L2`` over the weights (packed words, scales, zero points) of the
``(g + D)``-th GEMV; the first ``D`` GEMVs' weights are prefetched when the step begins. The GEMV
kernels are unchanged and read what the prefetch brought as L2 hits; the branch writes nothing, so
the step's results are bit-identical with and without it.

Constraints: sm_90 or newer (the bulk prefetch). At most ``limit_bytes`` of a weight are prefetched
(its first rows: every array's same leading fraction), so a weight larger than the L2 (lm_head) is
not pushed out by its own tail. On Numba's simulator the prefetch is a bounds-checked no-op.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, int64

from ..kernels.intrinsics import prefetch_l2
from .launches import KernelLaunch

__all__ = ["LookaheadPlan", "prefetch_launches", "lookahead_kernel", "THREADS", "CHUNK_BYTES",
           "LIMIT_BYTES"]

THREADS = 32            #: threads per block of the prefetch kernel
CHUNK_BYTES = 16384     #: bytes one thread's single bulk prefetch covers
LIMIT_BYTES = 16 << 20  #: default cap on the bytes prefetched of one weight (the L2 holds 60 MB)


@functools.lru_cache(maxsize=None)
def lookahead_kernel():
    """The kernel ``(array, count, chunk)``: thread ``t`` of the grid prefetches elements
    ``t chunk .. min((t + 1) chunk, count)`` of the 1-D ``array`` into L2 (nothing past ``count``)."""

    @cuda.jit
    def kernel(array, count, chunk):
        first = int64(cuda.grid(1)) * chunk
        if first < count:
            prefetch_l2(array, first, min(chunk, count - first))

    return kernel


def _weight_arrays(w):
    """The flat device arrays a GEMV of ``w`` reads: words, scales and (when present) zero points."""
    d = w.device_arrays()
    names = ("words_flat", "scales_flat") + (("zero_points_flat",) if w.has_zero_points else ())
    return [d[n] for n in names]


def prefetch_launches(w, limit_bytes: int = LIMIT_BYTES) -> list:
    """The :class:`~int4gemv.decode.launches.KernelLaunch` list that prefetches ``w``'s arrays
    into L2: all of them when ``w.nbytes <= limit_bytes``, else the same leading fraction
    ``limit_bytes / w.nbytes`` of each (rounded up to whole elements)."""
    arrays = _weight_arrays(w)
    total = sum(a.nbytes for a in arrays)
    launches = []
    for a in arrays:
        count = a.size if total <= limit_bytes else -(-a.size * limit_bytes // total)
        chunk = max(1, CHUNK_BYTES // a.dtype.itemsize)
        threads = -(-count // chunk)
        grid = -(-threads // THREADS)
        launches.append(KernelLaunch(lookahead_kernel(), grid, THREADS, a, np.int64(count), np.int64(chunk)))
    return launches


class LookaheadPlan:
    """Which prefetches follow which operation of a step.

    ``weights`` is the step's operations' weights in launch order (``None`` for an operation
    without weights, e.g. silu·mul); ``distance`` the lookahead ``D >= 1`` in GEMVs. Attributes:
    ``first`` (the prefetch launches issued as the step begins: the first ``D`` GEMVs) and
    ``after`` (``{operation index: prefetch launches}``: when the ``g``-th GEMV's operation
    completes, the ``(g + D)``-th GEMV's weights).
    """

    def __init__(self, weights, distance: int, limit_bytes: int = LIMIT_BYTES):
        for name, v in (("distance", distance), ("limit_bytes", limit_bytes)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"lookahead {name} must be a positive int; got {v!r}")
        gemvs = [i for i, w in enumerate(weights) if w is not None]
        fetch = functools.lru_cache(maxsize=None)(lambda i: prefetch_launches(weights[i], int(limit_bytes)))
        self.distance, self.limit_bytes = int(distance), int(limit_bytes)
        self.first = [op for i in gemvs[:distance] for op in fetch(i)]
        self.after = {i: fetch(j) for i, j in zip(gemvs, gemvs[distance:])}

    def __len__(self) -> int:
        """Prefetch launches per step."""
        return len(self.first) + sum(len(v) for v in self.after.values())
