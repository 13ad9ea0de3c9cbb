"""One measured GEMV configuration (:class:`GemvTiming`): the row :func:`~.gemv_timing.time_gemv`,
:class:`~.gemv_timing.GemvBench` and :func:`~.comparison.compare` return, as text and as a dict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["GemvTiming"]


@dataclass
class GemvTiming:
    """One measured configuration. Times in µs per launch (``None`` when not timed: simulator,
    or an ``error``); ``gbs`` = bytes one launch must read / time; ``pct_copy`` = that against the
    device-to-device copy bandwidth ``copy_gbs``; ``floor_us`` = the ``stream`` peer's time for the
    same bytes in the same run and ``pct_floor`` = 100 * floor / time (int4gemv rows); ``rel_err``
    against float64 (``None``: no reference for this peer); ``ok`` = finite output within
    :data:`REL_ERR_OK`."""

    method: str
    family: str                  # "int4gemv" or "peer"
    N: int
    K: int
    M: int
    block_size: int
    bytes: int | None
    simulated: bool
    us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None
    replays: int | None = None
    launches: int | None = None
    eager_us: float | None = None
    gbs: float | None = None
    pct_copy: float | None = None
    copy_gbs: float | None = None
    rel_err: float | None = None
    ok: bool | None = None
    kernel: str | None = None
    cols: int | None = None
    unroll: int | None = None
    grid: list | None = None
    copies: int | None = None
    description: str | None = None
    error: str | None = None
    floor_us: float | None = None
    pct_floor: float | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(d.pop("extra"))
        return d

    def __str__(self) -> str:
        head = f"{self.method} {self.N}x{self.K} M={self.M} bs={self.block_size}"
        if self.kernel:
            head += f" ({self.kernel}" + (f" {self.cols}x{self.unroll}" if self.cols is not None else "") + ")"
        err = "" if self.rel_err is None else f", rel err {self.rel_err:.1e}"
        if self.error:
            return f"{head}: ERROR {self.error}"
        if self.simulated:
            return f"{head}: simulated (Numba CUDA simulator): checked{err}, not timed"
        if self.us is None:
            return f"{head}: not timed{err}"
        copy = "" if self.pct_copy is None else f", {self.pct_copy:.1f}% of copy ({self.copy_gbs:.0f} GB/s)"
        if self.pct_floor is not None:
            copy += f", {self.pct_floor:.1f}% of floor ({self.floor_us:.2f} µs)"
        eager = "" if self.eager_us is None else f"; eager {self.eager_us:.1f} µs/call"
        return (f"{head}: {self.us:.2f} µs (p10 {self.p10_us:.2f}, p90 {self.p90_us:.2f}), "
                f"{self.gbs:.0f} GB/s{copy}{err}{eager}")
