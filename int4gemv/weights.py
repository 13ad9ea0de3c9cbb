"""INT4 weights in ONNX Runtime's MatMulNBits layout.

Layout (exactly ``com.microsoft.MatMulNBits`` with ``bits=4``), for a weight ``W[N, K]``
quantized along K in blocks of ``block_size`` (``bs``) elements, ``G = ceil(K/bs)`` blocks:

* ``packed`` uint8 ``[N, G, bs/2]``: element ``k`` of column ``n`` is in byte ``k // 2`` of that
  column's run, low nibble for even ``k``. Padding nibbles past ``K`` are ignored. Accepted
  shapes: ``[N, G, bs/2]``, ``[N, G*bs/2]`` or the flat ``[N*G*bs/2]`` (nothing else: a
  transposed 2-D array is refused).
* ``scales`` ``[N, G]`` or flat ``[N*G]``: float16, bfloat16 (``ml_dtypes.bfloat16``) or
  float32. The weight's ``dtype`` (``"float16"``/``"bfloat16"``) is that of its scales; float32
  scales become float16 unless ``dtype="bfloat16"`` is asked for, and are refused when they
  overflow it or a nonzero scale would round to zero.
* ``zero_points`` optional packed uint8 ``[N, ceil(G/2)]`` (flat accepted), low nibble for even
  block. Absent means 8 for every block.
* Dequantization: ``W[n, k] = (q - zp) * scale``.

Host weights (``QuantizedWeight(...)``, :func:`quantize`) copy their arrays at construction and
keep them **read-only**, so they can never disagree with the device copy made on first use.
Device weights (:meth:`QuantizedWeight.from_device`) share the caller's device memory: changes
the caller makes there are seen by later calls (and by ``dequantize``, which reads it back).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .arrays import BFLOAT16, DTYPES, check_array, describe, device_view, numpy_dtype

__all__ = ["QuantizedWeight", "quantize", "device_views", "BLOCK_SIZES"]

#: Block sizes the kernels support (ORT allows powers of two >= 16).
BLOCK_SIZES = (16, 32, 64, 128)
_SCALE_DTYPES = (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32))


def _check_int(name, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    return int(v)


def _check_geometry(K, N, block_size, k_name="K", bs_name="block_size"):
    K, N, block_size = _check_int(k_name, K), _check_int("N", N), _check_int(bs_name, block_size)
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"{bs_name} must be one of {BLOCK_SIZES}; got {block_size}")
    if K <= 0 or K % 8:
        raise ValueError(f"{k_name} must be a positive multiple of 8; got {K}")
    if N <= 0:
        raise ValueError(f"N must be positive; got {N}")
    return K, N, block_size


def _shapes(K, N, block_size):
    """Accepted shapes of packed, scales, zero points (the first is the canonical one)."""
    G = -(-K // block_size)
    flat = lambda *s: (s, (int(np.prod(s)),))  # noqa: E731
    return ((N, G, block_size // 2), (N, G * block_size // 2), (N * G * block_size // 2,)), \
        flat(N, G), flat(N, -(-G // 2))


def _check_shape(name, shape, accepted):
    if tuple(shape) not in accepted:
        raise ValueError(f"{name} must have shape {' or '.join(map(str, accepted))}; got {tuple(shape)}")


def _weight_dtype(scales_dtype, dtype):
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES} or None; got {dtype!r}")
    own = {"float16": "float16", "bfloat16": "bfloat16"}.get(np.dtype(scales_dtype).name)
    if own is not None and dtype is not None and own != dtype:
        raise TypeError(f"scales are {own} but dtype={dtype!r} was asked for")
    return own or dtype or "float16"


def _convert_scales(scales, dtype):
    """``scales`` as ``dtype``; ``ValueError`` naming ``scales`` when a value is not finite,
    overflows ``dtype`` or is nonzero but rounds to zero."""
    if not np.all(np.isfinite(scales.astype(np.float32))):
        raise ValueError("scales must be finite")
    with np.errstate(over="ignore"):
        out = scales.astype(numpy_dtype(dtype))
    wide = scales.astype(np.float64)
    back = out.astype(np.float64)
    if not np.all(np.isfinite(back)):
        raise ValueError(f"scales overflow {dtype}: largest magnitude {np.abs(wide).max():.6g} "
                         f"(the largest {dtype} is {float(ml_dtypes.finfo(numpy_dtype(dtype)).max):.6g})")
    if np.any((back == 0) & (wide != 0)):
        raise ValueError(f"scales underflow {dtype}: a nonzero scale (smallest magnitude "
                         f"{np.abs(wide[wide != 0]).min():.3g}) rounds to zero")
    return out


def _host_array(name, value, dtypes):
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(value).__name__}")
    if value.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {', '.join(d.name for d in dtypes)}; got {value.dtype}")
    return value


def _frozen(array, shape):
    out = np.array(array, copy=True, order="C").reshape(shape)
    out.setflags(write=False)
    return out


class QuantizedWeight:
    """An INT4 weight ``W[N, K]`` in MatMulNBits layout (see the module docstring).

    Args:
        packed, scales, zero_points: host (numpy) arrays in the accepted shapes; copied and kept
            read-only. ``zero_points=None`` means 8 for every block.
        K, N: the logical weight shape (keyword-only). ``K`` must be a positive multiple of 8.
        block_size: one of :data:`BLOCK_SIZES`.
        dtype: ``"float16"`` or ``"bfloat16"``; ``None`` takes the scales' dtype (float32 →
            float16). Activations, bias and output of a GEMV must have this dtype.

    The arrays move to the current device once, on first use (or :meth:`to_device`).
    """

    def __init__(self, packed, scales, zero_points=None, *, K, N, block_size, dtype=None):
        K, N, block_size = _check_geometry(K, N, block_size)
        shapes = _shapes(K, N, block_size)
        _check_shape("packed", _host_array("packed", packed, (np.dtype(np.uint8),)).shape, shapes[0])
        _check_shape("scales", _host_array("scales", scales, _SCALE_DTYPES).shape, shapes[1])
        self.dtype = _weight_dtype(scales.dtype, dtype)
        scales = _convert_scales(scales, self.dtype)
        if zero_points is not None:
            _host_array("zero_points", zero_points, (np.dtype(np.uint8),))
            _check_shape("zero_points", zero_points.shape, shapes[2])
            zero_points = _frozen(zero_points, shapes[2][0])
        self._init(K, N, block_size, zero_points is not None)
        self._host = (_frozen(packed, shapes[0][0]), _frozen(scales, shapes[1][0]), zero_points)

    def _init(self, K, N, block_size, has_zero_points):
        self.K, self.N, self.block_size = K, N, block_size
        self.n_blocks = -(-K // block_size)
        self.has_zero_points = has_zero_points
        self._device = None

    @classmethod
    def from_device(cls, packed, scales, zero_points=None, *, K, N, block_size):
        """A weight over arrays already on the current device (Numba, ``__cuda_array_interface__``
        or torch CUDA tensors), without a copy: the caller keeps them alive, and changes made to
        them are seen by later calls. Shapes as in the module docstring; ``scales`` float16 or
        bfloat16 (the weight's dtype); ``packed`` aligned to 16 bytes."""
        K, N, block_size = _check_geometry(K, N, block_size)
        shapes = _shapes(K, N, block_size)
        infos = [describe(n, x) for n, x in (("packed", packed), ("scales", scales),
                                              ("zero_points", zero_points)) if x is not None]
        for info, dtypes, accepted, align in zip(infos, (("uint8",), DTYPES, ("uint8",)), shapes,
                                                 (16, 2, 1)):
            if info.kind != "device":
                raise TypeError(f"{info.name} must be a device array for from_device; got "
                                f"{type(info.obj).__name__} (use QuantizedWeight(...) for host arrays)")
            check_array(info, info.dtype if info.dtype in dtypes else dtypes[0],
                        lambda s, a=accepted: tuple(s) in a, " or ".join(map(str, accepted)),
                        align=align)
        self = cls.__new__(cls)
        self.dtype = infos[1].dtype
        self._init(K, N, block_size, zero_points is not None)
        self._host = None
        G, Z = self.n_blocks, -(-self.n_blocks // 2)
        zp = device_view(infos[2]).reshape(N, Z) if zero_points is not None else None
        self._device = _views(self, device_view(infos[0]), device_view(infos[1]).reshape(N, G), zp)
        return self

    # -- host-side views -------------------------------------------------------------
    @property
    def packed(self) -> np.ndarray:
        """uint8 ``[N, G, bs/2]`` (read-only; a device weight's is read back from the device)."""
        if self._host is not None:
            return self._host[0]
        return self._device["packed"].copy_to_host().reshape(self.N, self.n_blocks, -1)

    @property
    def scales(self) -> np.ndarray:
        """``[N, G]`` in the weight's dtype (numpy float16 or ``ml_dtypes.bfloat16``)."""
        if self._host is not None:
            return self._host[1]
        return self._device["scales"].copy_to_host().view(numpy_dtype(self.dtype))

    @property
    def zero_points(self):
        """uint8 ``[N, ceil(G/2)]``, or ``None`` (zero point 8)."""
        if not self.has_zero_points:
            return None
        if self._host is not None:
            return self._host[2]
        return self._device["zero_points"].copy_to_host()

    def __repr__(self):
        zp = "with zero points" if self.has_zero_points else "symmetric (zp=8)"
        where = "on device" if self._device is not None else "host only"
        return (f"QuantizedWeight(N={self.N}, K={self.K}, block_size={self.block_size}, "
                f"{self.dtype}, {zp}, {self.nbytes / 1e6:.2f} MB, {where})")

    @property
    def nbytes(self) -> int:
        """Bytes a GEMV must read for this weight: packed nibbles, scales, zero points."""
        G = self.n_blocks
        zp = self.N * (-(-G // 2)) if self.has_zero_points else 0
        return self.N * G * self.block_size // 2 + self.N * G * 2 + zp

    def unpacked(self) -> np.ndarray:
        """The quantized integers ``q`` as uint8 ``[N, K]`` (values 0..15)."""
        packed = self.packed
        q = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(self.N, -1)
        return q[:, : self.K]

    def zero_point_values(self) -> np.ndarray:
        """Per-block zero points as uint8 ``[N, G]`` (8 when absent)."""
        if not self.has_zero_points:
            return np.full((self.N, self.n_blocks), 8, np.uint8)
        zp = self.zero_points
        return np.stack([zp & 0x0F, zp >> 4], axis=-1).reshape(self.N, -1)[:, : self.n_blocks]

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
        """Copy a host weight's arrays to the current CUDA device once (later calls do nothing);
        returns ``self``."""
        if self._device is None:
            from .backend import require_gpu

            require_gpu("QuantizedWeight.to_device")
            from numba import cuda

            packed, scales, zp = self._host
            self._device = _views(
                self, cuda.to_device(packed.reshape(-1), stream=stream),
                cuda.to_device(scales.view(np.uint16) if self.dtype == "bfloat16" else scales,
                               stream=stream),
                None if zp is None else cuda.to_device(zp, stream=stream))
        return self

    def device_arrays(self) -> dict:
        """The device arrays, uploading on first use. Keys: ``packed`` (uint8, flat), ``words``
        (uint32 ``[N, G*bs/8]``), ``words_flat``, ``words64_flat`` (the same bytes as 1-D uint32 /
        uint64), ``scales`` (``[N, G]`` float16, or uint16 bf16 bits) and ``scales_flat``,
        ``zero_points`` (uint8 ``[N, ceil(G/2)]``; a 1x1 placeholder when absent) and
        ``zero_points_flat``, ``no_bias`` (a 1-element placeholder in the scales' storage dtype
        that kernels never read). All share memory."""
        return self.to_device()._device


def _views(w, packed_flat, scales, zero_points):
    from numba import cuda

    store = np.uint16 if w.dtype == "bfloat16" else np.float16
    if zero_points is None:
        zero_points = cuda.to_device(np.zeros((1, 1), np.uint8))
    words = packed_flat.view(np.uint32).reshape(w.N, -1)
    views = device_views(words, scales, zero_points, cuda.to_device(np.zeros(1, store)))
    views["packed"] = packed_flat
    return views


def device_views(words, scales, zero_points, no_bias) -> dict:
    """The views kernels take of a weight's device arrays (uint32 ``words [N, W]``, ``scales
    [N, G]``, uint8 ``zero_points``, a 1-element ``no_bias``); see
    :meth:`QuantizedWeight.device_arrays`."""
    return {"words": words, "words_flat": words.reshape(-1),
            "words64_flat": words.reshape(-1).view(np.uint64), "scales": scales,
            "scales_flat": scales.reshape(-1), "zero_points": zero_points,
            "zero_points_flat": zero_points.reshape(-1), "no_bias": no_bias}
