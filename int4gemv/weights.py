"""INT4 weights in ONNX Runtime's MatMulNBits layout (host side, numpy).

Layout (exactly ``com.microsoft.MatMulNBits`` with ``bits=4``), for a weight
``W[N, K]`` quantized along K in blocks of ``block_size`` (``bs``) elements:

* ``packed`` uint8 ``[N, ceil(K/bs), bs/2]``: element ``k`` of column ``n`` is in
  byte ``k // 2`` of that column's run, low nibble for even ``k``. Padding
  nibbles past ``K`` in the last block are ignored.
* ``scales`` ``[N, ceil(K/bs)]`` (ORT's flat ``N*ceil(K/bs)`` vector is accepted);
  fp16 is kept, fp32 is converted to fp16.
* ``zero_points`` optional packed uint8 ``[N, ceil(ceil(K/bs)/2)]`` (flat accepted),
  low nibble for even block. Absent means 8 for every block.
* Dequantization: ``W[n, k] = (q - zp) * scale``.
"""

from __future__ import annotations

import collections

import numpy as np

__all__ = ["QuantizedWeight", "quantize", "BLOCK_SIZES"]

#: Block sizes the kernels support (ORT allows powers of two >= 16).
BLOCK_SIZES = (16, 32, 64, 128)


def _as_array(name, value, dtypes):
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(value).__name__}")
    if value.dtype not in dtypes:
        accepted = ", ".join(str(np.dtype(d)) for d in dtypes)
        raise TypeError(f"{name} must have dtype {accepted}; got {value.dtype}")
    return value


def _reshape(name, value, shape):
    if value.shape == shape:
        return np.ascontiguousarray(value)
    if value.ndim == 1 and value.size == int(np.prod(shape)):
        return np.ascontiguousarray(value).reshape(shape)
    raise ValueError(f"{name} must have shape {shape} (or the flat {int(np.prod(shape))}-vector); got {value.shape}")


class QuantizedWeight:
    """An INT4 weight ``W[N, K]`` in MatMulNBits layout.

    Args:
        packed: uint8 ``[N, ceil(K/bs), bs/2]`` (a flat or ``[N, ceil(K/bs)*bs/2]`` array of
            the same bytes is accepted).
        scales: float16 or float32 ``[N, ceil(K/bs)]`` or flat; stored as float16.
        zero_points: optional uint8 ``[N, ceil(ceil(K/bs)/2)]`` or flat; ``None`` means 8.
        K, N: the logical weight shape (keyword-only). ``K`` must be a multiple of 8.
        block_size: one of :data:`BLOCK_SIZES`.

    The arrays are validated and copied to contiguous host arrays here. They are moved
    to the device once, by :meth:`to_device` (``gemv`` calls it on first use), and the
    device copies are kept on the object.
    """

    def __init__(self, packed, scales, zero_points=None, *, K, N, block_size):
        for name, v in (("K", K), ("N", N), ("block_size", block_size)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        K, N, block_size = int(K), int(N), int(block_size)
        if block_size not in BLOCK_SIZES:
            raise ValueError(f"block_size must be one of {BLOCK_SIZES}; got {block_size}")
        if K <= 0 or K % 8:
            raise ValueError(f"K must be a positive multiple of 8; got {K}")
        if N <= 0:
            raise ValueError(f"N must be positive; got {N}")
        n_blocks = -(-K // block_size)
        packed = _as_array("packed", packed, (np.uint8,))
        scales = _as_array("scales", scales, (np.float16, np.float32))
        self.packed = _reshape("packed", packed.reshape(-1) if packed.ndim == 2 else packed,
                               (N, n_blocks, block_size // 2))
        scales = _reshape("scales", scales, (N, n_blocks))
        if not np.all(np.isfinite(scales)):
            raise ValueError("scales must be finite")
        self.scales = scales.astype(np.float16)
        if zero_points is not None:
            zero_points = _as_array("zero_points", zero_points, (np.uint8,))
            zero_points = _reshape("zero_points", zero_points, (N, -(-n_blocks // 2)))
        self.zero_points = zero_points
        self.K, self.N, self.block_size, self.n_blocks = K, N, block_size, n_blocks
        self._device = None
        self._launches = collections.OrderedDict()  # gemv's bound launches for this weight

    # -- host-side views -------------------------------------------------------------
    def __repr__(self):
        zp = "with zero points" if self.zero_points is not None else "symmetric (zp=8)"
        where = "on device" if self._device is not None else "host only"
        return (f"QuantizedWeight(N={self.N}, K={self.K}, block_size={self.block_size}, "
                f"{zp}, {self.nbytes / 1e6:.2f} MB, {where})")

    @property
    def nbytes(self) -> int:
        """Bytes a GEMV must read for this weight: packed nibbles, scales, zero points."""
        zp = 0 if self.zero_points is None else self.zero_points.nbytes
        return self.packed.nbytes + self.scales.nbytes + zp

    def unpacked(self) -> np.ndarray:
        """The quantized integers ``q`` as uint8 ``[N, K]`` (values 0..15)."""
        lo = self.packed & 0x0F
        hi = self.packed >> 4
        q = np.stack([lo, hi], axis=-1).reshape(self.N, -1)
        return q[:, : self.K]

    def zero_point_values(self) -> np.ndarray:
        """Per-block zero points as uint8 ``[N, ceil(K/bs)]`` (8 when absent)."""
        if self.zero_points is None:
            return np.full((self.N, self.n_blocks), 8, np.uint8)
        zp = np.stack([self.zero_points & 0x0F, self.zero_points >> 4], axis=-1)
        return zp.reshape(self.N, -1)[:, : self.n_blocks]

    def dequantize(self, dtype=np.float32) -> np.ndarray:
        """``(q - zp) * scale`` as ``[N, K]`` in ``dtype`` (computed in float64)."""
        q = self.unpacked().astype(np.float64)
        k_block = np.arange(self.K) // self.block_size
        zp = self.zero_point_values().astype(np.float64)[:, k_block]
        scale = self.scales.astype(np.float64)[:, k_block]
        return ((q - zp) * scale).astype(dtype)

    # -- device side -----------------------------------------------------------------
    @property
    def is_on_device(self) -> bool:
        return self._device is not None

    def to_device(self, stream=0):
        """Copy the arrays to the current CUDA device once; later calls do nothing.

        The packed bytes travel as uint32 words ``[N, ceil(K/bs)*bs/8]`` (each word holds
        8 consecutive nibbles of one column); scales as fp16 ``[N, ceil(K/bs)]``; zero
        points as uint8. Returns ``self``.
        """
        if self._device is None:
            from numba import cuda

            words = self.packed.reshape(self.N, -1).view(np.uint32)
            zp = self.zero_points if self.zero_points is not None else np.zeros((1, 1), np.uint8)
            self._device = device_views(cuda.to_device(words, stream=stream),
                                        cuda.to_device(self.scales, stream=stream),
                                        cuda.to_device(zp, stream=stream),
                                        cuda.to_device(np.zeros(1, np.float16), stream=stream))
        return self

    def device_arrays(self) -> dict:
        """The device arrays, uploading on first use: ``words`` (uint32 ``[N, W]``), ``scales``,
        ``zero_points`` (a 1x1 placeholder when absent), flat 1-D views of them
        (``words64_flat`` reads the same bytes as uint64) and ``no_bias`` (a placeholder the
        kernels never read)."""
        return self.to_device()._device


def quantize(w, block_size: int = 32, symmetric: bool = True) -> QuantizedWeight:
    """Quantize a float ``[N, K]`` weight to INT4 blocks along K, as ONNX Runtime does.

    Per block of ``block_size`` consecutive k (the last block is padded with zeros):

    * ``symmetric=True``: ``m`` = the element of largest magnitude (its sign kept),
      ``scale = m / -8``, zero point 8, so ``m`` maps to q = 0 exactly and the range is
      [-8, 7] around 8. No zero points are stored.
    * ``symmetric=False``: ``lo = min(min(x), 0)``, ``hi = max(max(x), 0)``,
      ``scale = (hi - lo) / 15``, ``zp = round(clip(-lo / scale, 0, 15))``; zero points
      are stored.

    ``q = clip(round(x / scale) + zp, 0, 15)`` with round-half-to-even (ORT's
    ``nearbyint``); all-zero blocks get scale 1. Scales are stored as fp16 and the
    rounding uses the fp16 scale, so ``dequantize`` reproduces what the kernels use.
    """
    if not isinstance(w, np.ndarray):
        raise TypeError(f"w must be a numpy.ndarray, got {type(w).__name__}")
    if w.dtype not in (np.float16, np.float32, np.float64) or w.ndim != 2:
        raise TypeError(f"w must be a 2-D float16/float32 array [N, K]; got {w.dtype} {w.shape}")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {BLOCK_SIZES}; got {block_size}")
    N, K = w.shape
    if K % 8:
        raise ValueError(f"K (w.shape[1]) must be a multiple of 8; got {K}")
    n_blocks = -(-K // block_size)
    x = np.zeros((N, n_blocks * block_size), np.float64)
    x[:, :K] = w
    x = x.reshape(N, n_blocks, block_size)
    if symmetric:
        idx = np.abs(x).argmax(axis=-1)[..., None]
        m = np.take_along_axis(x, idx, axis=-1)[..., 0]
        scale = m / -8.0
        zp = np.full((N, n_blocks), 8.0)
    else:
        lo = np.minimum(x.min(axis=-1), 0.0)
        hi = np.maximum(x.max(axis=-1), 0.0)
        scale = (hi - lo) / 15.0
        safe = np.where(scale == 0, 1.0, scale)
        zp = np.round(np.clip(-lo / safe, 0, 15))
    scale16 = np.where(scale == 0, 1.0, scale).astype(np.float16)
    s = scale16.astype(np.float64)[..., None]
    q = np.clip(np.round(x / s) + zp[..., None], 0, 15).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    zero_points = None
    if not symmetric:
        zpi = zp.astype(np.uint8)
        if n_blocks % 2:
            zpi = np.concatenate([zpi, np.zeros((N, 1), np.uint8)], axis=1)
        zero_points = (zpi[:, 0::2] | (zpi[:, 1::2] << 4)).astype(np.uint8)
    return QuantizedWeight(packed, scale16, zero_points, K=K, N=N, block_size=block_size)


def device_views(words, scales, zero_points, no_bias) -> dict:
    """The views the kernels take of a weight's device arrays (uint32 ``words [N, W]``, fp16
    ``scales [N, G]``, uint8 ``zero_points``, a 1-element fp16 ``no_bias``). Benchmarks use it to
    wrap random device-resident weights without a host round trip."""
    return {
        "words": words,
        "words_flat": words.reshape(-1),
        "words64_flat": words.reshape(-1).view(np.uint64),
        "scales": scales,
        "scales_flat": scales.reshape(-1),
        "zero_points": zero_points,
        "zero_points_flat": zero_points.reshape(-1),
        "no_bias": no_bias,
    }
