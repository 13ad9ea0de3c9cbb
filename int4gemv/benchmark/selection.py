"""The one place the benchmark turns a tuning into int4gemv keyword arguments.

A *tuning* here is ``None`` (the environment decides, as for any caller), a variant string
(``"default"``, ``"single_warp"``, ``"auto"``, optionally with a launch suffix ``"+pdl"`` or
``"+pdl+l2"``), or any object with ``variant``, ``pdl`` and ``prefetch`` attributes (and
optionally ``cols``, ``unroll``, ``activations``), such as ``int4gemv.Tuning``.

:func:`gemv_options` is the only function of the benchmark that decides how a kernel is
selected; every timing, check and ``explain`` call goes through it, and nothing here reads or
writes ``os.environ``.
"""

from __future__ import annotations

__all__ = ["LAUNCH_SUFFIXES", "VARIANTS", "gemv_options", "selects_tuning_fields", "tuning_fields", "tuning_label"]

VARIANTS = ("default", "single_warp", "auto")

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
            raise ValueError(f"tuning {tuning!r}: variant must be one of {', '.join(VARIANTS)} "
                             f"(optionally + {' or '.join(LAUNCH_SUFFIXES)})")
        fields["variant"] = variant
        return fields
    if not hasattr(tuning, "variant"):
        raise TypeError(f"tuning must be None, a variant string or an object with .variant/.pdl/.prefetch "
                        f"(e.g. int4gemv.Tuning); got {type(tuning).__name__}")
    for name in _FIELDS:
        value = getattr(tuning, name, fields[name])
        fields[name] = bool(value) if name in ("pdl", "prefetch") else value
    return fields


def selects_tuning_fields() -> bool:
    """Whether :func:`gemv_options` can select ``cols``/``unroll``/``activations`` (it can when
    int4gemv has ``Tuning`` and the ``tuning=`` keyword)."""
    import int4gemv

    return getattr(int4gemv, "Tuning", None) is not None


def gemv_options(tuning, *, launch: bool = True) -> dict:
    """Keyword arguments that select ``tuning`` in ``int4gemv.gemv``/``prepare`` (``launch=True``)
    or ``int4gemv.explain`` (``launch=False``: no launch options).

    With ``int4gemv.Tuning`` available the result is ``{"tuning": int4gemv.Tuning(...)}``;
    otherwise the ``variant=``/``pdl=``/``prefetch=`` keywords, and a tuning that sets ``cols``,
    ``unroll`` or ``activations`` is refused with ``ValueError`` (those need ``tuning=``).
    ``None`` gives ``{}``: the environment decides.
    """
    if tuning is None:
        return {}
    fields = tuning_fields(tuning)
    import int4gemv

    make = getattr(int4gemv, "Tuning", None)
    if make is not None:
        chosen = {k: v for k, v in fields.items() if v is not None}
        if not launch:
            chosen.pop("pdl", None)
            chosen.pop("prefetch", None)
        return {"tuning": make(**chosen)}
    extra = [k for k in ("cols", "unroll", "activations") if fields[k] is not None]
    if extra:
        raise ValueError(f"tuning {tuning_label(tuning)!r} sets {', '.join(extra)}: this int4gemv has no "
                         "tuning= keyword (int4gemv.Tuning), only variant=, pdl= and prefetch=")
    options = {"variant": fields["variant"]}
    if launch:
        options.update(pdl=fields["pdl"], prefetch=fields["prefetch"])
    return options


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
