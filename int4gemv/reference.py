"""Float64 reference for ``Y = A · ((q - zp) · scale)ᵀ + bias`` (ORT MatMulNBits semantics)."""

from __future__ import annotations

import numpy as np

from .weights import QuantizedWeight

__all__ = ["reference_gemv", "relative_error"]


def reference_gemv(a, w: QuantizedWeight, bias=None) -> np.ndarray:
    """Compute ``a @ w.dequantize().T + bias`` in float64 on the host.

    ``a`` is ``[K]`` or ``[M, K]``: numpy (any float dtype, ``ml_dtypes.bfloat16`` included), a
    Numba device array or a torch tensor (bf16 included; device arrays are copied back). The
    values are taken exactly (fp16/bf16 to float64 is exact). Returns float64 ``[N]`` or
    ``[M, N]`` matching ``a``'s rank.
    """
    y = _host(a) @ w.dequantize(np.float64).T
    if bias is not None:
        y = y + _host(bias)
    return y


def _host(x) -> np.ndarray:
    """``x`` as a float64 numpy array."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host().astype(np.float64)
    if hasattr(x, "detach"):  # torch: through float32 (exact for fp16/bf16; numpy has no bf16)
        return x.detach().float().cpu().numpy().astype(np.float64)
    if hasattr(x, "get"):  # cupy
        return x.get().astype(np.float64)
    return np.asarray(x, dtype=np.float64)


def relative_error(y, ref) -> float:
    """Norm-wise ``‖y − ref‖₂ / ‖ref‖₂`` in float64; ``inf`` when ``y`` has a non-finite entry (an
    unwritten, NaN-poisoned output); an all-zero ``ref`` divides by the smallest normal float64."""
    y = np.asarray(y, np.float64)
    ref = np.asarray(ref, np.float64)
    if not np.all(np.isfinite(y)):
        return float("inf")
    return float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), np.finfo(np.float64).tiny))
