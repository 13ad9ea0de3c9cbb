"""Environment controls, read at call time in one place.

Precedence, highest first:

1. the ``variant=`` argument of :func:`int4gemv.gemv` / :func:`int4gemv.explain`;
2. ``INT4GEMV_SINGLE_WARP`` = ``0`` | ``1`` | ``auto``;
3. the legacy alias ``INT4GEMV_ENABLE_SINGLE_WARP_GEMV`` = ``0`` | ``1``;
4. the default: ``0`` (the default tiling; the single-warp specialization is opt-in).

If both variables are set and disagree, the primary wins and a warning names both. Tuning
overrides for the specialization: ``INT4GEMV_SINGLE_WARP_COLS`` and
``INT4GEMV_SINGLE_WARP_UNROLL``. Any invalid value raises ``ValueError`` naming the variable
and the accepted values.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

__all__ = [
    "Controls", "read_controls", "raw_environment", "PRIMARY", "LEGACY", "COLS", "UNROLL",
    "VARIANTS",
]

PRIMARY = "INT4GEMV_SINGLE_WARP"
LEGACY = "INT4GEMV_ENABLE_SINGLE_WARP_GEMV"
COLS = "INT4GEMV_SINGLE_WARP_COLS"
UNROLL = "INT4GEMV_SINGLE_WARP_UNROLL"

#: Accepted ``variant=`` values and the mode each one asks for.
VARIANTS = {"default": "off", "single_warp": "on", "auto": "auto"}
_PRIMARY_VALUES = {"0": "off", "1": "on", "auto": "auto"}
_LEGACY_VALUES = {"0": "off", "1": "on"}
_NAMES = (PRIMARY, LEGACY, COLS, UNROLL)
_ENCODED = tuple(map(os.environ.encodekey, _NAMES)) if hasattr(os.environ, "encodekey") else None


def raw_environment() -> tuple:
    """The four variables' raw values as ``os.environ`` holds them now (``None`` when unset): the
    key under which a resolved decision may be reused. Read from ``os.environ``'s own mapping
    (about 0.1 µs; ``os.environ.get`` costs about 0.5 µs per unset name), with the same values."""
    data = getattr(os.environ, "_data", None)
    if data is None or _ENCODED is None:
        return tuple(map(os.environ.get, _NAMES))
    return data.get(_ENCODED[0]), data.get(_ENCODED[1]), data.get(_ENCODED[2]), data.get(_ENCODED[3])


@dataclass(frozen=True)
class Controls:
    """What the caller and the environment ask for.

    mode: ``"off"`` (default tiling), ``"on"`` (single-warp when eligible) or ``"auto"``.
    source: the control that decided the mode, e.g. ``"INT4GEMV_SINGLE_WARP=1"``.
    cols, unroll: tuning overrides (``None`` when unset) and ``tuning_source`` naming them.
    warnings: messages about conflicting controls (the caller emits them).
    """

    mode: str
    source: str
    cols: int | None = None
    unroll: int | None = None
    tuning_source: str | None = None
    warnings: tuple = ()


def _choice(name, raw, accepted):
    value = raw.strip().lower()
    if value not in accepted:
        raise ValueError(f"{name}={raw!r} is not valid; accepted values: {', '.join(accepted)}")
    return accepted[value]


def _positive_int(name, raw, accepted):
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value not in accepted:
        raise ValueError(f"{name}={raw!r} is not valid; accepted values: "
                         f"{', '.join(map(str, accepted))}")
    return value


_ACCEPTED_COLS = (1, 2, 4, 8, 16)
_ACCEPTED_UNROLL = (1, 2, 4, 8)


def read_controls(variant=None, environ=None) -> Controls:
    """Resolve the controls for one call (``environ`` defaults to ``os.environ``)."""
    env = os.environ if environ is None else environ
    if variant is not None and not isinstance(variant, str):
        raise ValueError(f"variant={variant!r} is not valid; accepted values: None, "
                         f"{', '.join(map(repr, VARIANTS))}")
    return _resolve(variant, env.get(PRIMARY), env.get(LEGACY), env.get(COLS), env.get(UNROLL))


@functools.lru_cache(maxsize=256)
def _resolve(variant, primary_raw, legacy_raw, cols_raw, unroll_raw) -> Controls:
    warnings = []
    primary = None if primary_raw is None else _choice(PRIMARY, primary_raw, _PRIMARY_VALUES)
    legacy = None if legacy_raw is None else _choice(LEGACY, legacy_raw, _LEGACY_VALUES)
    if primary is not None and legacy is not None and primary != legacy:
        warnings.append(f"{PRIMARY}={primary_raw} and {LEGACY}={legacy_raw} disagree; "
                        f"{PRIMARY} wins")

    if variant is not None:
        if variant not in VARIANTS:
            raise ValueError(f"variant={variant!r} is not valid; accepted values: "
                             f"None, {', '.join(map(repr, VARIANTS))}")
        mode, source = VARIANTS[variant], f"variant={variant!r} argument"
    elif primary is not None:
        mode, source = primary, f"{PRIMARY}={primary_raw}"
    elif legacy is not None:
        mode, source = legacy, f"{LEGACY}={legacy_raw} (legacy alias)"
    else:
        mode, source = "off", f"default ({PRIMARY} unset)"

    cols = None if cols_raw is None else _positive_int(COLS, cols_raw, _ACCEPTED_COLS)
    unroll = None if unroll_raw is None else _positive_int(UNROLL, unroll_raw, _ACCEPTED_UNROLL)
    named = [f"{n}={r}" for n, r in ((COLS, cols_raw), (UNROLL, unroll_raw)) if r is not None]
    return Controls(mode, source, cols, unroll, ", ".join(named) or None, tuple(warnings))
