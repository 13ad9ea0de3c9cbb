"""The decode chain's element-wise kernel: ``m = silu(g) · u`` on fp16 vectors.

``g`` and ``u`` are the two halves of one ``[2n]`` vector (the output of a merged gate/up GEMV,
or of separate gate and up GEMVs writing its halves), so one kernel serves both layouts.
Arithmetic is float32 (``sigmoid`` from ``exp(-|g|)``, so no overflow at any fp16 input), with
the hardware's one-instruction exponential and reciprocal (:mod:`int4gemv.kernels.approx`: their
errors, 2 ulp and 1 ulp, are far below the fp16 rounding); the result is rounded once to fp16.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from ..kernels.approx import exp2_approx, rcp_approx
from ..kernels.intrinsics import allow_next_grid, wait_for_previous_grid

__all__ = ["silu_mul_kernel", "silu_times", "silu_mul_geometry", "check_silu_mul", "THREADS"]

THREADS = 256  # threads per block; one element per thread
_LOG2E = float32(1.4426950408889634)  # exp(y) = 2**(y log2 e)


@cuda.jit(device=True, inline=True)
def silu_times(g, u):
    """``silu(g) · u`` in float32 for float32 ``g``, ``u``: the one formula of the chain, so
    the fused form (:mod:`.split_k_kernel`) rounds to the same fp16 values as this kernel.
    ``sigmoid(g)`` is ``1 / (1 + e)`` for ``g >= 0`` and ``e / (1 + e)`` below, ``e = exp(-|g|)``
    (never overflows), each through one approximate instruction: 8 instructions from ``g`` to
    the product, where ``math.exp`` and ``/`` took 27 and a slow-path branch (ptxas 13.0)."""
    e = exp2_approx(-abs(g) * _LOG2E)
    r = rcp_approx(float32(1.0) + e)
    sigmoid = r if g >= 0 else e * r
    return float32(g * sigmoid * u)


@functools.lru_cache(maxsize=None)
def silu_mul_kernel(pdl: bool = False):
    """The kernel ``(gu, m)``: ``m[i] = silu(gu[i]) · gu[n + i]`` for ``i < n = m.shape[0]``;
    fp16 ``gu [2n]``, ``m [n]``. ``pdl`` (sm_90+): compiled for a programmatic dependent launch:
    it lets the next launch start at entry and waits for the previous grid before reading ``gu``
    (it reads nothing else, so nothing can be issued before the wait)."""
    PDL = bool(pdl)

    @cuda.jit
    def kernel(gu, m):
        if PDL:
            allow_next_grid()
            wait_for_previous_grid()
        i = cuda.grid(1)
        n = m.shape[0]
        if i < n:
            m[i] = silu_times(float32(gu[i]), float32(gu[n + i]))

    return kernel


def silu_mul_geometry(n: int):
    """``(grid, block)`` covering ``n`` outputs."""
    return (max(1, -(-n // THREADS)),), (THREADS,)


def check_silu_mul(gu, m) -> int:
    """Validate the arguments of :func:`silu_mul_kernel` (device arrays, fp16, 1-D, ``gu`` twice
    as long as ``m``); returns ``n``. Raises TypeError/ValueError naming the argument."""
    for name, x in (("gu", gu), ("m", m)):
        if isinstance(x, np.ndarray) or not hasattr(x, "copy_to_host"):
            raise TypeError(f"{name} must be a Numba device array; got {type(x).__name__}")
        if np.dtype(x.dtype) != np.float16 or len(x.shape) != 1:
            raise TypeError(f"{name} must be a 1-D float16 array; got {x.dtype} {tuple(x.shape)}")
    n = m.shape[0]
    if gu.shape[0] != 2 * n or n == 0:
        raise ValueError(f"gu must have shape ({2 * n},) = 2 x m's length; got {tuple(gu.shape)}")
    return n
