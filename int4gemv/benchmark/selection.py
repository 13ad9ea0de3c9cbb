"""The one place the benchmark turns a tuning into int4gemv keyword arguments.

A *tuning* here is ``None`` (the environment decides, as for any caller), a variant string
(``"default"``, ``"single_warp"``, ``"auto"``, ``"tensor_core"``, optionally with a launch suffix ``"+pdl"`` or
``"+pdl+l2"``), or any object with ``variant``, ``pdl`` and ``prefetch`` attributes (and
optionally ``cols``, ``unroll``, ``activations``), such as ``int4gemv.Tuning``.

:func:`gemv_options` is the only function of the benchmark that decides how a kernel is
selected; every timing, check and ``explain`` call goes through it, and nothing here reads or
writes ``os.environ``.
"""

from __future__ import annotations

from ..tuning import VARIANTS  # the one list of variant names

__all__ = ["LAUNCH_SUFFIXES", "VARIANTS", "check_tunings", "gemv_options", "tuning_fields", "tuning_label"]

#: Suffixes of a variant string and the launch options they stand for.
LAUNCH_SUFFIXES = {"+pdl": {"pdl": True}, "+pdl+l2": {"pdl": True, "prefetch": True}}

_FIELDS = ("variant", "cols", "unroll", "activations", "pdl", "prefetch")


def tuning_fields(tuning) -> dict:
    """``{variant, cols, unroll, activations, pdl, prefetch}`` of ``tuning`` (see the module doc).

    Raises ``TypeError`` for an object without a ``variant`` attribute and ``ValueError`` for an
    unknown variant string.
    """
    fields = dict.fromkeys(_FIELDS)
    fields.update(pdl=False, prefetch=False)
    if tuning is None:
        return fields
    if isinstance(tuning, str):
        variant = tuning
        for suffix in sorted(LAUNCH_SUFFIXES, key=len, reverse=True):
            if variant.endswith(suffix):
                variant = variant[: -len(suffix)]
                fields.update(LAUNCH_SUFFIXES[suffix])
                break
        if variant not in VARIANTS:
            raise ValueError(f"unknown tuning {tuning!r}; accepted: {', '.join(VARIANTS)}, each optionally "
                             f"followed by {' or '.join(LAUNCH_SUFFIXES)} (e.g. 'auto+pdl'), or an "
                             f"int4gemv.Tuning")
        fields["variant"] = variant
        return fields
    if not hasattr(tuning, "variant"):
        raise TypeError(f"tuning must be None, a variant string or an object with .variant/.pdl/.prefetch "
                        f"(e.g. int4gemv.Tuning); got {type(tuning).__name__}")
    for name in _FIELDS:
        value = getattr(tuning, name, fields[name])
        fields[name] = bool(value) if name in ("pdl", "prefetch") else value
    return fields


def gemv_options(tuning, *, launch: bool = True) -> dict:
    """Keyword arguments that select ``tuning`` in ``int4gemv.gemv``/``prepare`` (``launch=True``)
    or ``int4gemv.explain`` (``launch=False``: no launch options): ``{"tuning": int4gemv.Tuning(...)}``.
    ``None`` gives ``{}``: the environment decides.
    """
    if tuning is None:
        return {}
    from int4gemv import Tuning

    chosen = {k: v for k, v in tuning_fields(tuning).items() if v is not None}
    if not launch:
        chosen.pop("pdl", None)
        chosen.pop("prefetch", None)
    return {"tuning": Tuning(**chosen)}


def check_tunings(tunings) -> list:
    """``tunings`` as a list (a single string or tuning is one), each checked the way a run would
    use it: ``ValueError`` for an unknown variant or field value (listing what is accepted),
    ``TypeError`` for a wrong type, before anything runs."""
    if tunings is None or isinstance(tunings, str) or hasattr(tunings, "variant"):
        tunings = [tunings]
    tunings = list(tunings)
    for tuning in tunings:
        gemv_options(tuning)
    return tunings


def tuning_label(tuning) -> str:
    """A short name for tables: ``"env"``, ``"auto"``, ``"auto+pdl"``, ``"sw 4x2"``, ...

    An object with a ``name`` attribute is labelled by it.
    """
    if tuning is None:
        return "env"
    if isinstance(tuning, str):
        return tuning
    name = getattr(tuning, "name", None)
    if isinstance(name, str) and name:
        return name
    f = tuning_fields(tuning)
    label = f["variant"] or "env"
    if f["cols"] is not None or f["unroll"] is not None:
        label = f"sw {f['cols']}x{f['unroll']}" if f["variant"] == "single_warp" else f"{label} {f['cols']}x{f['unroll']}"
    if f["activations"]:
        label += f" {f['activations'][:3]}"
    if f["prefetch"]:
        label += "+pdl+l2"
    elif f["pdl"]:
        label += "+pdl"
    return label
