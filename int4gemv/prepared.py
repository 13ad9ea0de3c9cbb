"""``prepare``: a device-path ``gemv`` validated, planned and bound once, launched many times.

``gemv`` already reuses a bound launch when it sees the same arrays and tuning again, but each
call still builds the cache key (and, with ``tuning=None``, reads the environment). A
:class:`PreparedGemv` skips that too: calling it is one driver launch.
"""

from __future__ import annotations

from .arrays import describe
from .backend import require_gpu
from .device import stream_handle
from .pipeline import bind, check_options, emit_warnings, plan, validate
from .tuning import resolve_tuning

__all__ = ["prepare", "PreparedGemv"]


class PreparedGemv:
    """One bound launch of ``out = a · wᵀ (+ bias)``; ``prepared(stream=None)`` enqueues it and
    returns ``out``. Each launch reads the current contents of ``a`` (and ``bias``): write new
    activations into ``a`` in place between calls. It keeps ``a``, ``w``, ``bias`` and ``out``
    alive. The tuning was resolved when it was made; ``plan`` says what it runs and ``bound``
    is the bound launch itself (``bound.launch(stream_handle)``)."""

    __slots__ = ("plan", "out", "bound", "_keep")

    def __init__(self, plan, bound, out, keep):
        self.plan, self.bound, self.out, self._keep = plan, bound, out, keep

    def __call__(self, stream=None):
        """Launch on ``stream`` (as in :func:`int4gemv.gemv`); returns ``out``. Nothing syncs."""
        self.bound.launch(stream_handle(stream))
        return self.out

    def __repr__(self):
        p = self.plan
        tuning = "" if p.cols is None else f" {p.cols}x{p.unroll}"
        return f"PreparedGemv({p.kernel}{tuning}, M={p.M}, N={p.N}, K={p.K}, {p.dtype})"


def prepare(a, w, *, out, bias=None, tuning=None, variant=None, pdl=False,
            prefetch=False) -> PreparedGemv:
    """Validate, plan and bind ``gemv(a, w, bias=bias, out=out, tuning=tuning, ...)`` once (see
    :func:`int4gemv.gemv` for the arguments).

    Device arrays only (``a``, ``out`` and ``bias`` on the GPU; numpy arrays are refused), and
    ``out`` is required. The kernel is compiled here, so a prepared launch is safe inside CUDA
    graph capture. Raises ``TypeError``/``ValueError`` naming the argument, launching nothing.
    """
    resolved = resolve_tuning(tuning, variant=variant, pdl=pdl, prefetch=prefetch)
    if out is None:
        raise ValueError("out is required: a prepared launch writes into a fixed output array")
    if describe("a", a).kind != "device":  # before validate, which would blame out or bias
        raise TypeError(f"a must be a CUDA array for prepare (the host path copies on every call); "
                        f"got {type(a).__name__}")
    call = validate(a, w, bias, out)
    check_options(resolved, call)
    chosen = plan(call, resolved)
    emit_warnings(chosen.warnings)
    require_gpu("int4gemv.prepare")
    bound = bind(chosen, w, call.a, call.out, call.bias)
    return PreparedGemv(chosen, bound, out, (a, w, bias))
