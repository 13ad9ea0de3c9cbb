"""``quantize``: a float weight to INT4 blocks along K, as ONNX Runtime's quantizer does."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .arrays import BFLOAT16, DTYPES, numpy_dtype
from .weights import BLOCK_SIZES, QuantizedWeight

__all__ = ["quantize"]

_FLOATS = (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32), np.dtype(np.float64))


def _round_half_away(t):
    """C's ``roundf``: to nearest, ties away from zero (computed in float64, where ``t ± 0.5``
    of a float32 ``t`` is exact)."""
    t = t.astype(np.float64)
    return np.where(t >= 0, np.floor(t + 0.5), np.ceil(t - 0.5))


def quantize(w, block_size: int = 32, symmetric: bool = True, *, dtype: str = "float16") -> QuantizedWeight:
    """Quantize a float ``[N, K]`` weight (``K`` a multiple of 8) to INT4 blocks along K, as ONNX
    Runtime's ``quantize_matmul_4bits`` (MLAS ``BlockwiseQuantizer``) does for float16 weights.

    Arithmetic in float32 (``w`` is read as float32: float16/bfloat16 exactly, float64 rounded).
    Per block of ``block_size`` consecutive k, over its real elements (the last block's padding
    is not quantized: its bytes are 0, as in ORT's zero-filled buffer):

    * ``symmetric=True``: ``m = max if |max| > |min| else min`` (a tie takes the minimum),
      ``scale = -m / 8``, zero point 8 (not stored).
    * ``symmetric=False``: ``lo = min(min, 0)``, ``hi = max(max, 0)``,
      ``scale = (hi - lo) / 15``, ``zp = roundf(-lo / scale)`` (with that float32 scale, before it
      is stored) clipped to 0..15; zero points are stored.

    The scale is stored in ``dtype`` (``"float16"``, or ``"bfloat16"``: the weight's dtype),
    rounded to nearest even, and the elements are rounded **with the stored scale**:
    ``q = clip(roundf(x * (1 / scale) + zp), 0, 15)`` in float32, ``roundf`` rounding ties
    **away from zero**. For float16 weights the result is ORT's bit for bit
    (``tests/test_ort_interop.py``), with one difference: an all-zero block gets scale 1 where
    ORT stores 0 (both dequantize to 0; its q and zero point are ORT's).

    Raises ``TypeError``/``ValueError`` naming ``w``, ``block_size``, ``symmetric`` or ``dtype``:
    ``block_size`` must be an int in :data:`~int4gemv.weights.BLOCK_SIZES` (``32.0`` is a
    ``TypeError``), ``symmetric`` a bool, ``w`` a finite 2-D float array whose scales fit ``dtype``
    (a scale that overflows it, or a nonzero scale that rounds to 0, is refused; ORT would store
    inf or 0).
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
    if not np.all(np.isfinite(w.astype(np.float64))):
        raise ValueError("w must be finite (it has inf or NaN entries)")
    with np.errstate(over="ignore"):
        v32 = w.astype(np.float32)
    if not np.all(np.isfinite(v32)):
        raise ValueError("w must be finite in float32 (a float64 entry overflows float32)")
    block_size = int(block_size)
    n_blocks = -(-K // block_size)
    padded = n_blocks * block_size
    x = np.zeros((N, padded), np.float32)
    x[:, :K] = v32
    real = (np.arange(padded) < K).reshape(n_blocks, block_size)
    x = x.reshape(N, n_blocks, block_size)
    lo = np.where(real, x, np.float32(np.inf)).min(axis=-1)
    hi = np.where(real, x, np.float32(-np.inf)).max(axis=-1)
    f32 = np.float32
    if symmetric:
        m = np.where(np.abs(hi) > np.abs(lo), hi, lo)
        scale = -m / f32(8)
        zp = np.full((N, n_blocks), f32(8))
    else:
        lo, hi = np.minimum(lo, f32(0)), np.maximum(hi, f32(0))
        scale = (hi - lo) / f32(15)
        with np.errstate(divide="ignore", invalid="ignore"):
            zp_fp = np.where(scale != 0, f32(0) - lo / scale, lo)
        zp = np.clip(_round_half_away(zp_fp), 0, 15).astype(np.float32)
    limit = float(ml_dtypes.finfo(numpy_dtype(dtype)).max)
    with np.errstate(over="ignore"):
        stored = scale.astype(numpy_dtype(dtype))
    if not np.all(np.isfinite(stored.astype(np.float64))):
        raise ValueError(f"w is too large to quantize with {dtype} scales: a block's scale "
                         f"{np.abs(scale).max():.6g} exceeds {limit:.6g}")
    if np.any((stored.astype(np.float64) == 0) & (scale != 0)):
        raise ValueError(f"w has a block whose scale underflows {dtype} (values too small)")
    s32 = stored.astype(np.float32)
    with np.errstate(divide="ignore"):
        reciprocal = np.where(s32 != 0, f32(1) / s32, f32(0))
    t = x * reciprocal[..., None] + zp[..., None]  # float32, as ORT: v * (1 / scale) + zp
    q = np.clip(_round_half_away(t), 0, 15).astype(np.uint8)
    q = np.where(real, q, np.uint8(0))  # padding: ORT leaves its zero-filled buffer
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    stored = np.where(scale == 0, np.ones_like(stored), stored)  # all-zero blocks: scale 1
    zero_points = None
    if not symmetric:
        zpi = zp.astype(np.uint8)
        if n_blocks % 2:  # the unused high nibble: 8, as ORT writes it
            zpi = np.concatenate([zpi, np.full((N, 1), 8, np.uint8)], axis=1)
        zero_points = (zpi[:, 0::2] | (zpi[:, 1::2] << 4)).astype(np.uint8)
    return QuantizedWeight(packed, stored, zero_points, K=K, N=N, block_size=block_size)
