"""Float64 reference for ``Y = A · ((q - zp) · scale)ᵀ + bias`` (ORT MatMulNBits semantics)."""

from __future__ import annotations

import numpy as np

from .weights import QuantizedWeight

__all__ = ["reference_gemv"]


def reference_gemv(a, w: QuantizedWeight, bias=None) -> np.ndarray:
    """Compute ``a @ w.dequantize().T + bias`` in float64 on the host.

    ``a`` is ``[K]`` or ``[M, K]`` (any float dtype; device arrays are copied back).
    Returns float64 ``[N]`` or ``[M, N]`` matching ``a``'s rank.
    """
    a = _host(a).astype(np.float64)
    y = a @ w.dequantize(np.float64).T
    if bias is not None:
        y = y + _host(bias).astype(np.float64)
    return y


def _host(x):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    if hasattr(x, "cpu"):  # torch
        return x.detach().cpu().numpy()
    if hasattr(x, "get"):  # cupy
        return x.get()
    return np.asarray(x)
