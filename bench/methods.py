"""The int4gemv variants a run measures, and the environment controls that select them.

Each :class:`Method` is one way to call :func:`int4gemv.gemv`: a ``variant=`` argument plus,
for tuned single-warp variants, ``INT4GEMV_SINGLE_WARP_COLS``/``_UNROLL`` (read at call time).
:func:`int4gemv_env` sets and restores those variables; benchmarks and notebooks use it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

__all__ = ["Method", "int4gemv_env", "int4gemv_methods", "parse_tunings"]


@contextlib.contextmanager
def int4gemv_env(single_warp=None, cols=None, unroll=None):
    """Set ``INT4GEMV_SINGLE_WARP`` / ``_COLS`` / ``_UNROLL`` for the block (``None``: unset);
    the previous values are restored on exit."""
    from int4gemv.tuning import COLS, LEGACY, PRIMARY, UNROLL

    wanted = {PRIMARY: single_warp, LEGACY: None, COLS: cols, UNROLL: unroll}
    saved = {name: os.environ.get(name) for name in wanted}
    try:
        for name, value in wanted.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass(frozen=True)
class Method:
    """One int4gemv configuration: ``name`` (a table label), ``variant`` and an optional tuning."""

    name: str
    variant: str
    cols: int | None = None
    unroll: int | None = None

    def env(self):
        """The environment this method runs under (a context manager)."""
        return int4gemv_env(cols=self.cols, unroll=self.unroll)


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
    ``tunings`` and, with ``auto``, ``auto`` (the committed autotune table's choice)."""
    from int4gemv.kernels.single_warp import DEFAULT_TUNING

    methods = [Method("default", "default"), Method("single_warp", "single_warp")]
    methods += [Method(f"sw {c}x{u}", "single_warp", c, u) for c, u in tunings if (c, u) != tuple(DEFAULT_TUNING)]
    if auto:
        methods.append(Method("auto", "auto"))
    return methods
