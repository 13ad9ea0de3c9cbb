"""What a kernel tells the pipeline about itself: one :class:`KernelDescriptor` per kernel.

A descriptor owns everything kernel-specific, in one place: which problems it serves
(``eligibility``), how a :class:`~int4gemv.tuning.Tuning` becomes its compile-time configuration
and launch geometry (``configure``), and how it binds its own arguments from a validated call
(``bind``). The dispatcher (:mod:`.dispatch`) and the pipeline (:mod:`.pipeline`) only call these;
no other module knows a kernel's argument order. Adding a kernel is one descriptor module under
:mod:`int4gemv.descriptors` and one line in :mod:`.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Problem", "Operands", "Launch", "KernelDescriptor", "TuningRefused", "MAX_M"]

#: The largest batch a call may have (rows of ``a``); larger batches are refused.
MAX_M = 16


def _positive_ints(name, values, length=None):
    if length is not None and len(values) != length:
        raise ValueError(f"{name} must have {length} entries; got {values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must hold positive ints; got {values!r}")


class TuningRefused(ValueError):
    """A descriptor's ``configure`` cannot honour tuning ``fields`` (their effective values in
    ``values``); ``what`` says why and what it accepts. The dispatcher re-raises it as a
    ``ValueError`` naming where each field came from (the ``tuning=`` argument or the
    environment variables the user set)."""

    def __init__(self, fields: tuple, values: dict, what: str):
        self.fields, self.values, self.what = tuple(fields), dict(values), what
        shown = ", ".join(f"{f}={values[f]}" for f in self.fields)
        super().__init__(f"tuning ({shown}) {what}")


@dataclass(frozen=True)
class Problem:
    """What the dispatcher knows of a call (no arrays): batch ``M``, weight ``N x K``, its
    ``block_size``, ``dtype`` (``"float16"``/``"bfloat16"``), ``zero_points`` and ``bias``
    presence, and ``act_align``, the alignment in bytes (2..16) of the activations' address."""

    M: int
    N: int
    K: int
    block_size: int
    dtype: str
    zero_points: bool
    bias: bool
    act_align: int = 16

    def __post_init__(self):
        _positive_ints("Problem sizes", (self.M, self.N, self.K, self.block_size))
        if self.M > MAX_M:
            raise ValueError(f"batch M={self.M} is above {MAX_M}")
        if self.dtype not in ("float16", "bfloat16"):
            raise ValueError(f"Problem.dtype must be 'float16' or 'bfloat16'; got {self.dtype!r}")
        if self.act_align not in (2, 4, 8, 16):
            raise ValueError(f"Problem.act_align must be 2, 4, 8 or 16; got {self.act_align!r}")


@dataclass(frozen=True)
class Operands:
    """A validated call's device operands, as flat 1-D views in their storage dtype (float16, or
    uint16 bf16 bits): ``act`` ``[M*K]``, ``out`` ``[M*N]``, ``bias`` ``[N]`` or ``None``, and
    ``weight``, the weight's :meth:`~int4gemv.QuantizedWeight.device_arrays`."""

    act: object
    out: object
    bias: object
    weight: dict


@dataclass(frozen=True)
class Launch:
    """A kernel, its arguments in order, and its geometry; ``shared`` is dynamic shared memory in
    bytes; ``programmatic`` asks for a programmatic dependent launch."""

    kernel: object
    args: tuple
    grid: tuple
    block: tuple
    shared: int = 0
    programmatic: bool = False

    def __post_init__(self):
        _positive_ints("Launch.grid", self.grid, 3)
        _positive_ints("Launch.block", self.block, 3)
        if isinstance(self.shared, bool) or not isinstance(self.shared, int) or self.shared < 0:
            raise ValueError(f"Launch.shared must be a non-negative int; got {self.shared!r}")


@dataclass(frozen=True)
class KernelDescriptor:
    """One kernel as the dispatcher and the pipeline see it.

    name: the variant name that selects it (``Tuning.variant``).
    summary: one line for ``explain()``.
    eligibility: ``(problem) -> (eligible, reason)``; a pure function.
    configure: ``(problem, tuning, multiprocessors) -> (config, grid, block, shared_bytes)``;
        ``config`` is the kernel's own frozen configuration (the tuning's ``None`` fields filled
        with the kernel's choices); raises :class:`TuningRefused` naming the fields the kernel
        cannot honour.
    bind: ``(plan, operands) -> Launch`` for a :class:`~int4gemv.dispatch.Plan` of this kernel
        and the call's :class:`Operands`.
    choices: optional ``(problem, config, multiprocessors) -> {tuning field: why}``: why the
        kernel chose the fields the tuning left open (shown by ``explain()``).
    """

    name: str
    summary: str
    eligibility: Callable
    configure: Callable
    bind: Callable
    choices: Callable | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"KernelDescriptor.name must be an identifier; got {self.name!r}")
        for field in ("eligibility", "configure", "bind"):
            if not callable(getattr(self, field)):
                raise TypeError(f"KernelDescriptor.{field} must be callable")
        if self.choices is not None and not callable(self.choices):
            raise TypeError("KernelDescriptor.choices must be callable or None")
