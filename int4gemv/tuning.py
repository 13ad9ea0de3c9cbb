"""Tunings as data: one frozen :class:`Tuning` for every kernel, and where each field came from.

A call's tuning is resolved in exactly one place, :func:`resolve_tuning`:

* ``tuning=`` given (a :class:`Tuning`, or a variant string as shorthand for
  ``Tuning(variant=...)``): used as given; the environment is not read.
* otherwise each field is resolved on its own, highest first:

  - ``variant``: the ``variant=`` keyword; ``INT4GEMV_SINGLE_WARP`` = ``0`` | ``1`` | ``auto``;
    the legacy alias ``INT4GEMV_ENABLE_SINGLE_WARP_GEMV`` = ``0`` | ``1``; the default
    ``"default"`` (the single-warp specialization is opt-in). If both variables are set and
    disagree, the primary wins and a warning names both.
  - ``cols`` / ``unroll``: ``INT4GEMV_SINGLE_WARP_COLS`` / ``INT4GEMV_SINGLE_WARP_UNROLL``;
    else ``None`` (the autotune table's or the kernel's choice, see :mod:`.dispatch`).
  - ``pdl`` / ``prefetch``: the keywords (default ``False``); ``activations``: ``None``.

Any invalid environment value raises ``ValueError`` naming the variable and the accepted values;
an invalid field raises ``TypeError``/``ValueError`` naming the field. The variables are read from
``os.environ`` at call time (:func:`read_environment`), so a change applies to the next call.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields

import numpy as np

__all__ = [
    "Tuning", "Resolved", "resolve_tuning", "read_environment", "PRIMARY", "LEGACY", "COLS",
    "UNROLL", "ENV_VARS", "VARIANTS", "ACTIVATIONS", "COLS_VALUES", "UNROLL_VALUES",
]

PRIMARY = "INT4GEMV_SINGLE_WARP"
LEGACY = "INT4GEMV_ENABLE_SINGLE_WARP_GEMV"
COLS = "INT4GEMV_SINGLE_WARP_COLS"
UNROLL = "INT4GEMV_SINGLE_WARP_UNROLL"
ENV_VARS = (PRIMARY, LEGACY, COLS, UNROLL)

VARIANTS = ("default", "single_warp", "auto", "tensor_core")
ACTIVATIONS = ("registers", "streaming")
COLS_VALUES = (1, 2, 4, 8, 16)
UNROLL_VALUES = (1, 2, 4, 8)
_PRIMARY_VALUES = {"0": "default", "1": "single_warp", "auto": "auto"}
_LEGACY_VALUES = {"0": "default", "1": "single_warp"}


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_bool(v):
    return isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class Tuning:
    """How to run a GEMV, in one vocabulary for every kernel.

    variant: ``"default"`` (the multi-warp default tiling; for M >= 2 the tensor-core kernel),
        ``"single_warp"`` (the single-warp specialization where eligible, else the default),
        ``"auto"`` (the measured autotune table's choice per shape) or ``"tensor_core"`` (the
        ``mma.sync`` kernel, every problem).
    cols: columns per lane step (default tiling) or per warp step (single-warp kernel), one of
        :data:`COLS_VALUES`, or ``None`` (the table's or the kernel's choice). unroll: loads per
        step of each kernel (see its descriptor), one of :data:`UNROLL_VALUES`, or ``None``. activations: the single-warp activation mode,
        ``"registers"`` (needs ``K <= 512 * unroll``) or ``"streaming"``, or ``None``.
    pdl: programmatic dependent launch (device arrays, compute capability 9.0+; the single-warp
        kernel and the default tiling wait for the previous kernel before reading ``a``; the
        tensor-core kernel does not use it).
    prefetch: with ``pdl`` only: L2 prefetch of the weights before that wait.
    """

    variant: str = "default"
    cols: int | None = None
    unroll: int | None = None
    activations: str | None = None
    pdl: bool = False
    prefetch: bool = False

    def __post_init__(self):
        if not isinstance(self.variant, str) or self.variant not in VARIANTS:
            raise ValueError(f"Tuning.variant must be one of {VARIANTS}; got {self.variant!r}")
        for name, accepted in (("cols", COLS_VALUES), ("unroll", UNROLL_VALUES)):
            v = getattr(self, name)
            if v is None:
                continue
            if not _is_int(v):
                raise TypeError(f"Tuning.{name} must be an int or None; got {type(v).__name__}")
            if v not in accepted:
                raise ValueError(f"Tuning.{name} must be one of {accepted} or None; got {v}")
            object.__setattr__(self, name, int(v))
        if self.activations is not None and self.activations not in ACTIVATIONS:
            raise ValueError(f"Tuning.activations must be one of {ACTIVATIONS} or None; "
                             f"got {self.activations!r}")
        for name in ("pdl", "prefetch"):
            if not _is_bool(getattr(self, name)):
                raise TypeError(f"Tuning.{name} must be a bool; got {type(getattr(self, name)).__name__}")
            object.__setattr__(self, name, bool(getattr(self, name)))
        if self.prefetch and not self.pdl:
            raise ValueError("Tuning.prefetch needs pdl=True (it runs while the previous kernel drains)")
        # Launch caches key on tunings: hash once.
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self))))

    def __hash__(self):
        return self._hash

    def __str__(self):
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if getattr(self, f.name) != f.default]
        return f"Tuning({', '.join(parts)})"


@dataclass(frozen=True)
class Resolved:
    """A resolved :class:`Tuning`, ``sources`` (``(field, where it came from)`` for every field)
    and ``warnings`` about conflicting controls (the caller emits them)."""

    tuning: Tuning
    sources: tuple
    warnings: tuple = ()

    def source(self, field: str) -> str:
        return dict(self.sources)[field]


_UNSET = (None, None, None, None)
_direct = [None, None, ()]  # [the os.environ it reads, its backing dict (or None), encoded names]


def _bind_direct(environ):
    """Read :data:`ENV_VARS` from ``environ``'s backing dict where it is CPython's ``os._Environ``
    (what ``os.environ.get`` itself reads, without encoding each name on every call); anything
    else (a mapping put in its place) is read through ``.get``."""
    data = getattr(environ, "_data", None)
    encode = getattr(environ, "encodekey", None)
    if isinstance(data, dict) and callable(encode) and callable(getattr(environ, "decodevalue", None)):
        _direct[:] = [environ, data, tuple(encode(name) for name in ENV_VARS)]
    else:
        _direct[:] = [environ, None, ()]


def read_environment() -> tuple:
    """The values of :data:`ENV_VARS` in ``os.environ`` now (``None`` when unset), as
    ``os.environ.get`` returns them: what a resolution reads. Called on every ``tuning=None``
    call, so it reads ``os.environ``'s backing dict directly (four membership tests when none is
    set) and decodes only the variables that are set; ``os.environ`` replaced by another mapping
    is read with ``.get``."""
    environ = os.environ
    if environ is not _direct[0]:
        _bind_direct(environ)
    data = _direct[1]
    if data is None:
        get = environ.get
        return get(PRIMARY), get(LEGACY), get(COLS), get(UNROLL)
    k0, k1, k2, k3 = _direct[2]
    if k0 not in data and k1 not in data and k2 not in data and k3 not in data:
        return _UNSET  # the common case: four membership tests
    decode = environ.decodevalue
    raw = data.get(k0), data.get(k1), data.get(k2), data.get(k3)
    return tuple(None if v is None else decode(v) for v in raw)


def _choice(name, raw, accepted):
    value = raw.strip().lower()
    if value not in accepted:
        raise ValueError(f"{name}={raw!r} is not valid; accepted values: {', '.join(accepted)}")
    return accepted[value]


def _env_int(name, raw, accepted):
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value not in accepted:
        raise ValueError(f"{name}={raw!r} is not valid; accepted values: "
                         f"{', '.join(map(str, accepted))}")
    return value


def _flag(name, value):
    if not _is_bool(value):
        raise TypeError(f"{name} must be a bool; got {type(value).__name__}")
    return bool(value)


def resolve_tuning(tuning=None, *, variant=None, pdl=False, prefetch=False, environ=None) -> Resolved:
    """The one resolution of a call's tuning (see the module docstring for the precedence).

    ``tuning``: ``None``, a :class:`Tuning` or a variant string. ``variant``, ``pdl``,
    ``prefetch``: the older keyword shorthands; with ``tuning`` given they must be left unset.
    ``environ``: a mapping to read instead of ``os.environ`` (tests).
    """
    pdl, prefetch = _flag("pdl", pdl), _flag("prefetch", prefetch)
    if tuning is not None:
        if variant is not None or pdl or prefetch:
            raise TypeError("pass either tuning= or the variant=/pdl=/prefetch= shorthands, not both")
        if not isinstance(tuning, (str, Tuning)):
            raise TypeError(f"tuning must be None, an int4gemv.Tuning or a variant string; got "
                            f"{type(tuning).__name__}")
        return _given(tuning)
    if variant is not None and (not isinstance(variant, str) or variant not in VARIANTS):
        raise ValueError(f"variant={variant!r} is not valid; accepted values: None, "
                         f"{', '.join(map(repr, VARIANTS))}")
    if prefetch and not pdl:
        raise ValueError("prefetch needs pdl=True (it runs while the previous kernel drains)")
    env = read_environment() if environ is None else tuple(environ.get(n) for n in ENV_VARS)
    return _from_environment(variant, pdl, prefetch, *env)


def _given(tuning):
    """A given tuning resolves to itself (the very object: not an equal one cached earlier)."""
    if isinstance(tuning, str):
        return _given_variant(tuning)
    return Resolved(tuning, tuple((f.name, "argument tuning=") for f in fields(Tuning)))


@functools.lru_cache(maxsize=len(VARIANTS))
def _given_variant(variant):
    if variant not in VARIANTS:
        raise ValueError(f"tuning={variant!r} is not valid; accepted: a Tuning or one of "
                         f"{', '.join(map(repr, VARIANTS))}")
    return _given(Tuning(variant=variant))


@functools.lru_cache(maxsize=256)
def _from_environment(variant, pdl, prefetch, primary_raw, legacy_raw, cols_raw, unroll_raw):
    warnings = []
    primary = None if primary_raw is None else _choice(PRIMARY, primary_raw, _PRIMARY_VALUES)
    legacy = None if legacy_raw is None else _choice(LEGACY, legacy_raw, _LEGACY_VALUES)
    if primary is not None and legacy is not None and primary != legacy:
        warnings.append(f"{PRIMARY}={primary_raw} and {LEGACY}={legacy_raw} disagree; {PRIMARY} wins")
    if variant is not None:
        source = f"argument variant={variant!r}"
    elif primary is not None:
        variant, source = primary, f"{PRIMARY}={primary_raw}"
    elif legacy is not None:
        variant, source = legacy, f"{LEGACY}={legacy_raw} (legacy alias)"
    else:
        variant, source = "default", f"default ({PRIMARY} unset)"
    sources = {"variant": source, "activations": "default"}
    values = {}
    for field, name, raw, accepted in (("cols", COLS, cols_raw, COLS_VALUES),
                                       ("unroll", UNROLL, unroll_raw, UNROLL_VALUES)):
        values[field] = None if raw is None else _env_int(name, raw, accepted)
        sources[field] = "default" if raw is None else f"{name}={raw}"
    for field, value in (("pdl", pdl), ("prefetch", prefetch)):
        sources[field] = f"argument {field}=True" if value else "default"
    tuning = Tuning(variant, values["cols"], values["unroll"], None, pdl, prefetch)
    return Resolved(tuning, tuple((f.name, sources[f.name]) for f in fields(Tuning)),
                    tuple(warnings))
