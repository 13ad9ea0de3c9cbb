"""``prepare``: a device-path ``gemv`` validated, planned and bound once, launched many times.

``gemv`` already skips validation and binding when it sees the same arrays and controls again, but
each call still builds a key from the environment and the arrays (a few microseconds of Python on
a slow host). A :class:`PreparedGemv` skips that too: calling it is one driver launch.
"""

from __future__ import annotations

import numpy as np

from .api import _bind_device, _check_flags, _check_pdl, _plan, _stream_handle, _validate

__all__ = ["prepare", "PreparedGemv"]


class PreparedGemv:
    """One bound launch of ``out = a · wᵀ (+ bias)``; ``prepared(stream=None)`` enqueues it and
    returns ``out``. Each launch reads the current contents of ``a`` (and ``bias``): write new
    activations into ``a`` in place between calls. It keeps ``a``, ``w``, ``bias`` and ``out``
    alive. The environment controls were read when it was made; ``plan`` says what it runs."""

    __slots__ = ("plan", "out", "_bound", "_keep")

    def __init__(self, plan, bound, out, keep):
        self.plan, self._bound, self.out, self._keep = plan, bound, out, keep

    def __call__(self, stream=None):
        """Launch on ``stream`` (as in :func:`int4gemv.gemv`); returns ``out``. Nothing syncs."""
        self._bound.launch(_stream_handle(stream))
        return self.out

    def __repr__(self):
        p = self.plan
        tuning = "" if p.cols is None else f" {p.cols}x{p.unroll}"
        return f"PreparedGemv({p.kernel}{tuning}, M={p.M}, N={p.N}, K={p.K})"


def prepare(a, w, *, out, bias=None, variant=None, pdl=False, prefetch=False) -> PreparedGemv:
    """Validate, plan and bind ``gemv(a, w, bias=bias, out=out, variant=variant, pdl=pdl,
    prefetch=prefetch)`` once (see :func:`int4gemv.gemv` for the arguments).

    Device arrays only (``a``, ``out`` and ``bias`` on the GPU; numpy arrays are refused), and
    ``out`` is required. The kernel is compiled here, so a prepared launch is safe inside CUDA
    graph capture. Raises ``TypeError``/``ValueError`` naming the argument, launching nothing.
    """
    pdl, prefetch = _check_flags(pdl, prefetch)
    if out is None:
        raise ValueError("out is required: a prepared launch writes into a fixed output array")
    M, on_device = _validate(a, w, bias, out)
    if not on_device:
        raise TypeError(f"a must be a CUDA array for prepare (the host path copies on every call); "
                        f"got {type(a).__name__}")
    _check_pdl(pdl, on_device)
    plan = _plan(M, w, np.float16, variant)  # warns here about conflicting controls
    bound = _bind_device(plan, a, w, bias, out, M, pdl, prefetch)
    return PreparedGemv(plan, bound, out, (a, w, bias))
