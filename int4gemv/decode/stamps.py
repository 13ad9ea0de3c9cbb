"""Per-block ``%globaltimer`` stamps around any compiled kernel: the device half of the timeline.

:func:`stamped` turns a Numba kernel ``k(a0, ..., an)`` into ``k'(a0, ..., an, stamps, slot)``
that runs the same body (``k``'s Python function, compiled again as an inlined device function,
with ``k``'s launch bounds) between two stamps. Thread 0 of block ``b`` writes

* ``stamps[slot, b, 0]`` — :func:`~int4gemv.kernels.global_timer.global_timer` at block entry
  (the block is resident: with a programmatic launch this is *before* its
  ``griddepcontrol.wait``);
* ``stamps[slot, b, 1]`` — the clock after a block barrier that follows the body (every warp of
  the block has finished its stores).

``stamps`` is a uint64 device array ``[slots, max_blocks, 2]``; blocks at or past
``max_blocks`` write nothing, and an entry a block never wrote stays 0. Two plain 8-byte stores
and one barrier per block: the stamped kernel is a separate compilation, so the unstamped chain
carries no cost at all (``DecodeChain(timeline=False)``, the default).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..device import simulated
from ..kernels.global_timer import global_timer

__all__ = ["stamped", "stamp_buffer", "ENTRY", "EXIT"]

#: Index of the entry / exit stamp in the last axis of the stamp buffer.
ENTRY, EXIT = 0, 1

_TEMPLATE = """
def stamped_kernel({args}, stamps, slot):
    first = cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0 and cuda.threadIdx.z == 0
    b = cuda.blockIdx.x
    if first and b < stamps.shape[1]:
        stamps[slot, b, ENTRY] = global_timer()
    body({args})
    cuda.syncthreads()
    if first and b < stamps.shape[1]:
        stamps[slot, b, EXIT] = global_timer()
"""


@functools.lru_cache(maxsize=None)
def stamped(kernel):
    """The stamped form of the Numba kernel ``kernel`` (see the module docstring); cached per
    kernel object. ``kernel`` must launch on a 1-D grid."""
    py_func = getattr(kernel, "py_func", None)
    if py_func is None:
        raise TypeError(f"kernel must be a Numba CUDA kernel; got {type(kernel).__name__}")
    n = py_func.__code__.co_argcount
    names = ", ".join(f"a{i}" for i in range(n))
    scope = {"cuda": cuda, "global_timer": global_timer, "ENTRY": ENTRY, "EXIT": EXIT,
             "body": cuda.jit(device=True, inline=True)(py_func)}
    exec(_TEMPLATE.format(args=names), scope)  # a fixed template; only the arity varies
    options = {}
    bounds = None if simulated() else getattr(kernel, "targetoptions", {}).get("launch_bounds")
    if bounds:
        options["launch_bounds"] = bounds
    return cuda.jit(**options)(scope["stamped_kernel"])


def stamp_buffer(slots: int, max_blocks: int):
    """A zeroed uint64 device array ``[slots, max_blocks, 2]`` for :func:`stamped` kernels."""
    for name, v in (("slots", slots), ("max_blocks", max_blocks)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int; got {v!r}")
    return cuda.to_device(np.zeros((int(slots), int(max_blocks), 2), np.uint64))
