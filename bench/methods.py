"""The int4gemv configurations a run measures.

Each :class:`Method` is a tuning in the sense of :mod:`int4gemv.benchmark.selection` (an object
with ``variant``, ``cols``, ``unroll``, ``pdl``, ``prefetch``) plus a table label; the library's
one adapter turns it into ``int4gemv.gemv`` keywords. Nothing here touches ``os.environ``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["QUICK_TUNINGS", "Method", "int4gemv_methods", "parse_tunings"]

#: Tunings measured by ``--quick`` (besides the default tuning, always measured).
QUICK_TUNINGS = [(2, 4), (4, 4), (8, 2), (16, 1), (16, 2)]


@dataclass(frozen=True)
class Method:
    """One int4gemv configuration: ``name`` (a table label), ``variant`` and an optional
    single-warp tuning (``cols``, ``unroll``) and launch options."""

    name: str
    variant: str
    cols: int | None = None
    unroll: int | None = None
    pdl: bool = False
    prefetch: bool = False


def parse_tunings(spec):
    """``"all"``/``None`` → every compiled tuning; ``"none"`` → none; ``"4x2,2x4"`` → those.

    Raises ``ValueError`` for a pair that is not in ``int4gemv.kernels.single_warp.TUNINGS``.
    """
    from int4gemv.kernels.single_warp import TUNINGS

    if spec in (None, "", "all"):
        return list(TUNINGS)
    if spec == "none":
        return []
    out = []
    for item in spec.split(","):
        try:
            cols, unroll = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise ValueError(f"tuning {item!r} is not COLSxUNROLL (e.g. 4x2)") from None
        if (cols, unroll) not in TUNINGS:
            raise ValueError(f"tuning {item!r} is not compiled; accepted: "
                             f"{', '.join(f'{c}x{u}' for c, u in TUNINGS)}")
        out.append((cols, unroll))
    return out


def int4gemv_methods(tunings, *, auto: bool = True) -> list:
    """``default``, ``single_warp`` (its default tuning), ``sw CxU`` for each other tuning in
    ``tunings`` and, with ``auto``, ``auto`` (the committed autotune table's choice).
    """
    from int4gemv.kernels.single_warp import DEFAULT_TUNING


    methods = [Method("default", "default"), Method("single_warp", "single_warp")]
    methods += [Method(f"sw {c}x{u}", "single_warp", c, u) for c, u in tunings if (c, u) != tuple(DEFAULT_TUNING)]
    if auto:
        methods.append(Method("auto", "auto"))
    return methods
