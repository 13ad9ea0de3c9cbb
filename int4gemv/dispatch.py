"""Choosing a kernel for a call: a pure function of the problem, the tuning and the device name.

No GPU and no memory are touched here, so every decision is testable anywhere. The kernels are
the registered descriptors (:mod:`.registry`); ``Tuning.variant`` names one of them, or
``"auto"``:

* ``default`` (the environment unset): the default tiling at M = 1; for M >= 2, where one
  ``mma`` serves every row, the default tiling's tensor-core fold where N fills its persistent
  grid (lm_head-wide N) or its K split gives the SMs enough blocks (groups of 32 columns past 8
  rows, of 16 on narrower N; :func:`~.kernels.mma_tiling.mma_batch_reason`), else the
  tensor-core kernel
  (:mod:`.descriptors.tensor_core`, split K for narrow N);
* a named kernel runs when its eligibility accepts the problem; a specialization that cannot
  take the problem falls back to that default, and the plan says why;
* ``auto``: where the single-warp specialization is eligible, the measured table
  (:mod:`.autotune`, per GPU name, M, block size, zero points and dtype) picks the kernel and its
  ``cols``/``unroll`` (exact ``(N, K)``, else the nearest shape); with no measurement the
  specialization runs. Where it is ineligible (M >= 2, bf16, ...) a measured entry for the
  problem's M, block size, zero points and dtype still chooses, else the default above. Fields given in the tuning win over the table's.

Fields the tuning leaves ``None`` are the kernel's choice. The default tiling and the
tensor-core kernel accept every valid problem; should the chosen one refuse, the call is
refused with a ``ValueError`` saying why.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from . import autotune
from .descriptor import Problem, TuningRefused
from .descriptors import tensor_core
from .kernels.mma_tiling import MMA_BATCH_COLS, mma_batch_reason
from .registry import FALLBACK, descriptor
from .tuning import ENV_VARS, Resolved, Tuning

__all__ = ["Plan", "plan_gemv"]


@dataclass(frozen=True)
class Plan:
    """How one call will run. ``str(plan)`` is a readable summary for notebooks.

    kernel: the descriptor's name; config: its configuration; grid, block, shared_bytes: the
    launch; problem: the :class:`~.descriptor.Problem`; tuning: the resolved request;
    sources: ``(field, effective value, where it came from)`` for every tuning field; reason:
    why this kernel; warnings: conflicting controls; device: the device the plan was made for
    (set by :func:`int4gemv.explain`; the model it assumed when no GPU is usable).
    """

    kernel: str
    config: object
    grid: tuple
    block: tuple
    shared_bytes: int
    problem: Problem
    tuning: Tuning
    sources: tuple
    reason: str
    warnings: tuple = ()
    device: str = ""

    def __getattr__(self, name):  # M, N, K, block_size, dtype; cols, unroll, activations
        if name in ("M", "N", "K", "block_size", "dtype"):
            return getattr(self.problem, name)
        if name in ("cols", "unroll", "activations"):
            return getattr(self.config, name, None)
        raise AttributeError(name)

    @property
    def control(self) -> str:
        """Where the variant came from (an argument, an environment variable or the default)."""
        return self.sources[0][2]

    def __str__(self):
        p = self.problem
        config = ", ".join(f"{f.name}={getattr(self.config, f.name)}" for f in fields(self.config))
        lines = [
            f"kernel   : {self.kernel} ({config})",
            f"problem  : M={p.M} N={p.N} K={p.K} block_size={p.block_size} {p.dtype} "
            f"zero_points={p.zero_points} bias={p.bias}",
            f"launch   : grid={self.grid} block={self.block} shared={self.shared_bytes} B",
        ]
        lines += [f"tuning   : {name} = {value!r}  ({source})" for name, value, source in self.sources]
        lines.append(f"reason   : {self.reason}")
        if self.device:
            lines.append(f"device   : {self.device}")
        lines += [f"warning  : {w}" for w in self.warnings]
        return "\n".join(lines)


def _default_for(problem, tuning, multiprocessors):
    """``(kernel, why)``: what a call runs when no specialization takes it (``why`` is ``None``
    for the default tiling at M = 1). The default tiling's tensor-core fold needs ``cols`` left
    open or one of its column counts."""
    fold = mma_batch_reason(problem.M, problem.N, problem.K, multiprocessors)
    if problem.M >= tensor_core.MIN_M and fold and tuning.cols in (None,) + MMA_BATCH_COLS:
        return FALLBACK, (f"M = {problem.M} >= {tensor_core.MIN_M}: the default tiling's "
                          f"tensor-core fold (one mma.sync.m16n8k16 per 8 rows), since {fold}")
    if problem.M >= tensor_core.MIN_M:
        return tensor_core.NAME, tensor_core.why_chosen(problem)
    return FALLBACK, None


def _from_table(entry, how, tuning):
    filled = [f for f in ("cols", "unroll") if getattr(tuning, f) is None and getattr(entry, f)]
    tuning = replace(tuning, **{f: getattr(entry, f) for f in filled})
    note = f" ({entry.note})" if entry.note else ""
    return entry.variant, tuning, f"auto: {how}: {entry.variant} was faster{note}", \
        tuple((f, f"autotune table, {how}") for f in filled)


def _choose(problem, tuning, device_name, table, multiprocessors):
    """``(kernel name, tuning with the table's fields filled in, reason, table fields)``."""
    if tuning.variant == FALLBACK:
        name, why = _default_for(problem, tuning, multiprocessors)
        return name, tuning, why or "single-warp specialization not requested (opt-in)", ()
    special = "single_warp" if tuning.variant == "auto" else tuning.variant
    eligible, why = descriptor(special).eligibility(problem)
    if not eligible:
        if tuning.variant == "auto":
            entry, how = autotune.lookup(table, device_name, problem)
            if entry is not None and descriptor(entry.variant).eligibility(problem)[0]:
                return _from_table(entry, how, tuning)
        name, because = _default_for(problem, tuning, multiprocessors)
        return name, tuning, (f"{special} requested but ineligible ({why}); fell back to {name}"
                              + (f" ({because})" if because else "")), ()
    if tuning.variant != "auto":
        return special, tuning, f"{special} requested and eligible ({why})", ()
    entry, how = autotune.lookup(table, device_name, problem)
    if entry is None:
        return special, tuning, f"auto: {how}; eligible, so {special}", ()
    return _from_table(entry, how, tuning)


def _refusal(refused, kernel, tuning, sources):
    """The message of a refused tuning, naming where each refused field came from: the
    environment variables the user set, the ``tuning=`` argument, the table, or the kernel's
    default (the field was left ``None``); then every other tuning variable the user set."""
    named = []
    for field in refused.fields:
        value, source = refused.values[field], sources[field]
        if getattr(tuning, field) is None:
            named.append(f"{field}={value} (the {kernel} kernel's default)")
        elif source.startswith(ENV_VARS):
            named.append(source)  # "INT4GEMV_SINGLE_WARP_COLS=16": the variable as the user set it
        else:
            named.append(f"{field}={value} ({source})")
    shown = ", ".join(f"{f}={refused.values[f]}" for f in refused.fields)
    also = [source for field, source in sources.items()
            if field not in refused.fields and source.startswith(ENV_VARS)]   # the rest the user set
    context = f" (also set: {', '.join(also)})" if also else ""
    return f"{' and '.join(named)}: ({shown}) {refused.what}{context}"


def plan_gemv(problem: Problem, resolved: Resolved, *, device_name=None, multiprocessors=132,
              table=None) -> Plan:
    """Plan one call. ``table`` defaults to :func:`~.autotune.load_autotune_table`;
    ``multiprocessors`` (the device's SM count) sizes persistent grids."""
    table = autotune.load_autotune_table() if table is None and resolved.tuning.variant == "auto" \
        else (table or {})
    name, tuning, reason, from_table = _choose(problem, resolved.tuning, device_name, table,
                                               multiprocessors)
    kernel = descriptor(name)
    eligible, why = kernel.eligibility(problem)
    if not eligible:
        raise ValueError(f"no kernel serves this call: {name}: {why}")
    sources = dict(resolved.sources)
    sources.update(from_table)
    try:
        config, grid, block, shared = kernel.configure(problem, tuning, multiprocessors)
    except TuningRefused as refused:
        raise ValueError(_refusal(refused, name, tuning, sources)) from None
    why = kernel.choices(problem, config, multiprocessors) if kernel.choices else {}
    rows = []
    for f in fields(Tuning):
        asked = getattr(tuning, f.name)
        value = asked if f.name == "variant" else getattr(config, f.name, None)
        source = sources[f.name]
        if f.name != "variant" and not hasattr(config, f.name):
            value, source = asked, f"{source}; not used by the {name} kernel"
        elif asked is None and value is not None:
            source = f"{name} kernel's choice" + (f": {why[f.name]}" if f.name in why else "")
        rows.append((f.name, value, source))
    return Plan(name, config, grid, block, shared, problem, resolved.tuning, tuple(rows), reason,
                resolved.warnings)
