"""``quantize``: a float weight to INT4 blocks along K, as ONNX Runtime's quantizer does."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .arrays import BFLOAT16, DTYPES, numpy_dtype
from .weights import BLOCK_SIZES, QuantizedWeight

__all__ = ["quantize"]

_FLOATS = (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32), np.dtype(np.float64))


def quantize(w, block_size: int = 32, symmetric: bool = True, *, dtype: str = "float16") -> QuantizedWeight:
    """Quantize a float ``[N, K]`` weight (``K`` a multiple of 8) to INT4 blocks along K.

    Per block of ``block_size`` consecutive k (the last block is padded with zeros):

    * ``symmetric=True``: ``m`` = the element of largest magnitude (its sign kept),
      ``scale = m / -8``, zero point 8, so ``m`` maps to q = 0 exactly and the range is
      [-8, 7] around 8. No zero points are stored.
    * ``symmetric=False``: ``lo = min(min(x), 0)``, ``hi = max(max(x), 0)``,
      ``scale = (hi - lo) / 15``, ``zp = round(clip(-lo / scale, 0, 15))``; zero points
      are stored.

    ``q = clip(round(x / scale) + zp, 0, 15)`` with round-half-to-even (ORT's ``nearbyint``);
    all-zero blocks get scale 1. Scales are stored in ``dtype`` (``"float16"`` or
    ``"bfloat16"``: the weight's dtype) and the rounding uses the stored scale, so
    ``dequantize`` reproduces what the kernels use.

    Raises ``TypeError``/``ValueError`` naming ``w``, ``block_size``, ``symmetric`` or ``dtype``:
    ``block_size`` must be an int in :data:`~int4gemv.weights.BLOCK_SIZES` (``32.0`` is a
    ``TypeError``), ``symmetric`` a bool, ``w`` a finite 2-D float array whose scales fit ``dtype``.
    """
    if not isinstance(w, np.ndarray):
        raise TypeError(f"w must be a numpy.ndarray, got {type(w).__name__}")
    if w.dtype not in _FLOATS or w.ndim != 2:
        raise TypeError(f"w must be a 2-D float16/bfloat16/float32/float64 array [N, K]; got "
                        f"{w.dtype} with shape {w.shape}")
    if isinstance(block_size, (bool, np.bool_)) or not isinstance(block_size, (int, np.integer)):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {BLOCK_SIZES}; got {block_size}")
    if not isinstance(symmetric, (bool, np.bool_)):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}; got {dtype!r}")
    N, K = w.shape
    if N == 0 or K == 0 or K % 8:
        raise ValueError(f"w must have shape [N, K] with N > 0 and K a positive multiple of 8; "
                         f"got {w.shape}")
    block_size = int(block_size)
    n_blocks = -(-K // block_size)
    x = np.zeros((N, n_blocks * block_size), np.float64)
    x[:, :K] = w.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError("w must be finite (it has inf or NaN entries)")
    x = x.reshape(N, n_blocks, block_size)
    if symmetric:
        idx = np.abs(x).argmax(axis=-1)[..., None]
        scale = np.take_along_axis(x, idx, axis=-1)[..., 0] / -8.0
        zp = np.full((N, n_blocks), 8.0)
    else:
        lo = np.minimum(x.min(axis=-1), 0.0)
        hi = np.maximum(x.max(axis=-1), 0.0)
        scale = (hi - lo) / 15.0
        zp = np.round(np.clip(-lo / np.where(scale == 0, 1.0, scale), 0, 15))
    scale = np.where(scale == 0, 1.0, scale)
    limit = float(ml_dtypes.finfo(numpy_dtype(dtype)).max)
    if np.abs(scale).max() > limit:
        raise ValueError(f"w is too large to quantize with {dtype} scales: a block's scale "
                         f"{np.abs(scale).max():.6g} exceeds {limit:.6g}")
    stored = scale.astype(numpy_dtype(dtype))
    if np.any(stored.astype(np.float64) == 0):
        raise ValueError(f"w has a block whose scale underflows {dtype} (values too small)")
    s = stored.astype(np.float64)[..., None]
    q = np.clip(np.round(x / s) + zp[..., None], 0, 15).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    zero_points = None
    if not symmetric:
        zpi = zp.astype(np.uint8)
        if n_blocks % 2:
            zpi = np.concatenate([zpi, np.zeros((N, 1), np.uint8)], axis=1)
        zero_points = (zpi[:, 0::2] | (zpi[:, 1::2] << 4)).astype(np.uint8)
    return QuantizedWeight(packed, stored, zero_points, K=K, N=N, block_size=block_size)
