"""The decode chain's operations: kernel launches bound once, each ``op(stream)`` one driver call.

:class:`KernelLaunch` is any Numba kernel with fixed geometry and arguments (silu·mul, the
persistent chain's kernels). :class:`GemvLaunch` is one GEMV; it goes the pipeline's way (``validate → plan → descriptor.bind → bind``, the
same functions :func:`int4gemv.prepare` calls) and adds what only a chain needs:

* ``max_blocks`` caps the grid. The default and single-warp tilings are persistent (a warp takes column groups
  ``w, w + warps in the grid, ...``), so any grid of at least one block computes every column; a
  smaller grid leaves SM slots for the next kernel's first blocks, which issue their weight loads
  before ``griddepcontrol.wait``.
* ``stamps``, ``slot``: launch the :func:`~int4gemv.decode.stamps.stamped` form of the planned
  kernel, which writes per-block ``%globaltimer`` stamps into ``stamps[slot]``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..arrays import device_view
from ..descriptor import Operands
from ..device import stream_handle
from ..launcher import bind
from ..pipeline import check_options, emit_warnings, plan, validate
from ..registry import descriptor
from ..tuning import resolve_tuning
from .stamps import stamped

__all__ = ["GemvLaunch", "KernelLaunch", "bound_kernel", "PERSISTENT_KERNELS"]

#: Kernels whose warps walk column groups ``w, w + warps in the grid, ...`` (any grid computes
#: every column), so ``max_blocks`` may shrink their grid. Another kernel refuses ``max_blocks``.
PERSISTENT_KERNELS = ("default", "single_warp")


def _dims(name, value):
    """``value`` (an int or up to 3 ints) as a 3-tuple of positive ints (ValueError naming it)."""
    value = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(value) <= 3 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1
                                       for v in value):
        raise ValueError(f"{name} must be a positive int or 1-3 positive ints; got {value!r}")
    return tuple(int(v) for v in value) + (1,) * (3 - len(value))


def bound_kernel(kernel, args, grid, block, *, shared=0, programmatic=False, cooperative=False,
                 stamps=None, slot=0):
    """``launcher.bind`` of ``kernel`` (or its stamped form when ``stamps`` is given, the stamp
    buffer and ``slot`` appended to ``args``) on a 1-D ``grid`` (an int or a tuple), with
    ``shared`` bytes of dynamic shared memory."""
    grid, block = _dims("grid", grid), _dims("block", block)
    if grid[1:] != (1, 1):
        raise ValueError(f"grid must be a 1-D launch (x, 1, 1); got {grid}")
    if stamps is not None:
        kernel, args = stamped(kernel), tuple(args) + (stamps, int(slot))
    return bind(kernel, tuple(args), grid, block, int(shared), programmatic, cooperative)


class GemvLaunch:
    """``out = a · wᵀ (+ bias)`` as a chain operation: ``op(stream)`` enqueues it.

    Parameters
    ----------
    a, w, out, bias
        As in :func:`int4gemv.prepare` (device arrays; ``out`` required).
    options : dict, optional
        The :func:`int4gemv.prepare` keywords ``variant``, ``pdl``, ``prefetch``.
    tuning : int4gemv.Tuning, optional
        A full tuning instead of ``options`` (exactly one of the two is given).
    max_blocks : int, optional
        Cap on the grid (``None``: the planned grid).
    stamps, slot
        A :func:`~int4gemv.decode.stamps.stamp_buffer` and this launch's row of it.
    words : bool
        Compile the planned default-tiling kernel to poll its activations for
        :mod:`~int4gemv.kernels.handoff` sentinels instead of waiting for the previous grid (the
        chain's ``handoff="words"``): needs a ``pdl`` plan of the default kernel at M = 1 with
        16-byte aligned activations (ValueError otherwise).
    ordered : bool
        An ordinary launch even where the plan is programmatic: it starts once the previous
        launch has completed and its writes are visible to every later launch (the words
        handoff's first GEMV, after the fill).

    Attributes: ``plan`` (the :class:`~int4gemv.Plan`), ``grid`` (the launched grid), ``out``,
    ``programmatic`` (whether it launches as a programmatic dependent launch).
    """

    def __init__(self, a, w, out, bias=None, *, options=None, tuning=None, max_blocks=None, stamps=None,
                 slot=0, words=False, ordered=False):
        if max_blocks is not None and (isinstance(max_blocks, bool) or not isinstance(max_blocks, (int, np.integer))
                                       or max_blocks < 1):
            raise ValueError(f"max_blocks must be None or a positive int; got {max_blocks!r}")
        if (options is None) == (tuning is None):
            raise TypeError("GemvLaunch takes exactly one of options= and tuning=")
        resolved = resolve_tuning(tuning) if options is None else resolve_tuning(None, **options)
        call = validate(a, w, bias, out)
        check_options(resolved, call)
        if not call.on_device:
            raise TypeError(f"a must be a CUDA array; got {type(a).__name__}")
        self.plan = plan(call, resolved)
        if words:
            if self.plan.kernel != "default" or not self.plan.config.pdl:
                raise ValueError(f"words needs a pdl plan of the default kernel; the plan runs "
                                 f"{self.plan.kernel!r} (pdl {self.plan.tuning.pdl})")
            self.plan = replace(self.plan, config=replace(self.plan.config, words=True))
        if max_blocks is not None and self.plan.kernel not in PERSISTENT_KERNELS:
            raise ValueError(f"max_blocks needs a persistent kernel {PERSISTENT_KERNELS}; the plan "
                             f"runs {self.plan.kernel!r}, whose grid must stay as planned")
        emit_warnings(self.plan.warnings)
        ops = Operands(device_view(call.a), device_view(call.out),
                       None if call.bias is None else device_view(call.bias), w.device_arrays())
        launch = descriptor(self.plan.kernel).bind(self.plan, ops)
        grid = tuple(launch.grid)
        if max_blocks is not None:
            grid = (min(grid[0], int(max_blocks)),) + grid[1:]
        self.grid, self.out, self._keep = grid, out, (a, w, bias, ops)
        self.programmatic = launch.programmatic and not ordered
        self.bound = bound_kernel(launch.kernel, launch.args, grid, launch.block, shared=launch.shared,
                                  programmatic=self.programmatic, stamps=stamps, slot=slot)

    def __call__(self, stream=None):
        self.bound.launch(stream_handle(stream))
        return self.out


class KernelLaunch:
    """A Numba kernel with fixed geometry and arguments, as a chain operation: ``op(stream)``
    launches it on ``stream`` (anything :func:`int4gemv.device.stream_handle` accepts).
    ``programmatic``: a programmatic dependent launch (the kernel must call
    ``griddepcontrol.wait`` before reading what earlier launches wrote); ``cooperative``: every
    block resident at once (see :class:`~int4gemv.launcher.BoundLaunch`); ``shared``: dynamic
    shared memory in bytes; ``stamps``, ``slot``: launch its stamped form (see :class:`GemvLaunch`)."""

    def __init__(self, kernel, grid, block, *args, programmatic=False, cooperative=False, shared=0,
                 stamps=None, slot=0):
        self.kernel, self.args = kernel, args
        self.grid, self.block = _dims("grid", grid), _dims("block", block)
        self.bound = bound_kernel(kernel, args, self.grid, self.block, shared=shared,
                                  programmatic=programmatic, cooperative=cooperative, stamps=stamps,
                                  slot=slot)

    def __call__(self, stream=None):
        self.bound.launch(stream_handle(stream))
