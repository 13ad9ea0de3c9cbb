"""The arrays a call is made of: what they are, checked by name, and flat device views of them.

Accepted kinds, read through one function, :func:`describe`:

* ``host``: a ``numpy.ndarray`` (fp16 as ``numpy.float16``, bf16 as ``ml_dtypes.bfloat16``);
* ``device``: a Numba device array or any object with ``__cuda_array_interface__`` (CuPy, torch
  fp16, ...);
* ``device``: a torch-like tensor read through ``data_ptr()``, ``shape``, ``stride()``,
  ``element_size()``, ``dtype`` and ``device`` (torch bf16 tensors have no
  ``__cuda_array_interface__``). A tensor whose ``device.type`` is not ``"cuda"`` is refused.

Dtypes are named ``"float16"`` / ``"bfloat16"`` (see :data:`DTYPES`); on the device both travel
as their 16-bit storage (:func:`storage_dtype`: ``float16``, or ``uint16`` holding bf16 bits).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .device import current_device_id, simulated

__all__ = ["ArrayInfo", "describe", "check_array", "device_view", "torch_like", "numba_pointer",
           "dtype_name", "numpy_dtype", "storage_dtype", "DTYPES", "BFLOAT16"]

DTYPES = ("float16", "bfloat16")
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_TORCH_DTYPES = {"torch.float16": "float16", "torch.half": "float16",
                 "torch.bfloat16": "bfloat16", "torch.float32": "float32",
                 "torch.uint8": "uint8", "torch.int8": "int8"}


def dtype_name(dtype) -> str:
    """A numpy (or ml_dtypes) dtype's name: ``"float16"``, ``"bfloat16"``, ``"float32"``, ..."""
    return np.dtype(dtype).name


def numpy_dtype(name: str) -> np.dtype:
    """The host numpy dtype of ``"float16"`` / ``"bfloat16"``."""
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def storage_dtype(name: str) -> np.dtype:
    """The device storage dtype of ``"float16"`` / ``"bfloat16"``: float16, or uint16 (bf16 bits)."""
    return np.dtype(np.uint16) if name == "bfloat16" else np.dtype(name)


@dataclass(frozen=True)
class ArrayInfo:
    """What validation and binding need of one array: ``kind`` (``"host"``/``"device"``),
    ``dtype`` name, ``shape``, ``strides`` in bytes, ``pointer`` (data address), ``device``
    (the CUDA device index where known, else ``None``), the array itself (``obj``) and
    ``readonly`` (a numpy array that is not writeable, or a ``__cuda_array_interface__`` whose
    ``data`` says read-only)."""

    name: str
    kind: str
    dtype: str
    shape: tuple
    strides: tuple
    pointer: int
    device: int | None
    obj: object
    readonly: bool = False

    @property
    def itemsize(self) -> int:
        return 1 if self.dtype in ("uint8", "int8") else (4 if self.dtype == "float32" else 2)


def _contiguous_strides(shape, itemsize):
    strides, acc = [], itemsize
    for dim in reversed(shape):
        strides.insert(0, acc)
        acc *= dim
    return tuple(strides)


def torch_like(x):
    """Whether ``x`` is read like a torch tensor (``data_ptr()``, ``stride()``, ``dtype``,
    ``device``)."""
    return callable(getattr(x, "data_ptr", None)) and callable(getattr(x, "stride", None)) \
        and hasattr(x, "dtype") and hasattr(x, "device")


def describe(name: str, x) -> ArrayInfo:
    """The :class:`ArrayInfo` of ``x``; ``TypeError`` naming ``name`` if it is not an array of a
    supported kind."""
    if isinstance(x, np.ndarray):
        return ArrayInfo(name, "host", x.dtype.name, x.shape, x.strides, x.ctypes.data, None, x,
                         not x.flags.writeable)
    if hasattr(x, "copy_to_host") and hasattr(x, "dtype"):  # Numba device array (or simulated)
        return ArrayInfo(name, "device", np.dtype(x.dtype).name, tuple(x.shape),
                         tuple(x.strides), numba_pointer(x), None, x)
    if torch_like(x):
        return _describe_torch(name, x)
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        raise TypeError(f"{name} must be a numpy array or a CUDA array (Numba, "
                        f"__cuda_array_interface__ or a torch CUDA tensor); got "
                        f"{type(x).__name__}") from None
    except Exception as exc:
        raise TypeError(f"{name} has no usable __cuda_array_interface__: {exc}") from None
    try:
        dtype, shape = np.dtype(cai["typestr"]), tuple(int(d) for d in cai["shape"])
        strides = cai.get("strides")
        strides = _contiguous_strides(shape, dtype.itemsize) if strides is None else tuple(strides)
        pointer, readonly = int(cai["data"][0]), bool(cai["data"][1])
    except Exception as exc:
        raise TypeError(f"{name} has a malformed __cuda_array_interface__: {exc}") from None
    return ArrayInfo(name, "device", dtype.name, shape, strides, pointer, None, x, readonly)


def numba_pointer(x):
    """The data address of a Numba device array (on the simulator: of the host array it wraps)."""
    if simulated():
        return x._ary.ctypes.data
    return x.device_ctypes_pointer.value or 0


def _describe_torch(name, x):
    dtype = _TORCH_DTYPES.get(str(x.dtype), str(x.dtype))
    device = x.device
    if getattr(device, "type", None) != "cuda":
        raise TypeError(f"{name} is a tensor on {device}; it must be a CUDA tensor (or a numpy "
                        f"array for the host path)")
    try:
        itemsize = int(x.element_size())
        shape = tuple(int(d) for d in x.shape)
        strides = tuple(int(s) * itemsize for s in x.stride())
        pointer = int(x.data_ptr())
    except Exception as exc:
        raise TypeError(f"{name} is not a usable tensor: {exc}") from None
    return ArrayInfo(name, "device", dtype, shape, strides, pointer, device.index, x)


def check_array(info: ArrayInfo, dtype: str, shape_ok, expect: str, *, align: int = 2):
    """Refuse ``info`` unless it has ``dtype``, a shape with ``shape_ok(shape)``, C-contiguous
    strides and a data address aligned to ``align`` bytes, and (for device arrays whose device
    is known) lives on the current device. Errors name the array."""
    name = info.name
    if info.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}; got {info.dtype}")
    if not shape_ok(info.shape):
        raise ValueError(f"{name} must have shape {expect}; got {info.shape}")
    if info.strides != _contiguous_strides(info.shape, info.itemsize):
        expected = info.itemsize
        for dim, stride in zip(reversed(info.shape), reversed(info.strides)):
            if dim > 1 and stride != expected:
                raise ValueError(f"{name} must be C-contiguous; got strides {info.strides} for "
                                 f"shape {info.shape}")
            expected *= dim
    if info.pointer % align:
        raise ValueError(f"{name} is misaligned: its data must start on a {align}-byte boundary")
    if info.device is not None and not simulated() and info.device != current_device_id():
        raise ValueError(f"{name} is on CUDA device {info.device}, but the current device is "
                         f"{current_device_id()}")


class _Interface:
    """A ``__cuda_array_interface__`` for memory described by an :class:`ArrayInfo`."""

    def __init__(self, info, dtype, count):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": np.dtype(dtype).str,
                                         "data": (info.pointer, False), "version": 3,
                                         "strides": None}


def device_view(info: ArrayInfo, dtype=None):
    """A flat 1-D Numba device array over a C-contiguous device array's memory, read as ``dtype``
    (default: its own storage dtype). Shares memory; the caller keeps the array alive."""
    count = int(np.prod(info.shape)) if info.shape else 1
    store = storage_dtype(info.dtype) if dtype is None else np.dtype(dtype)
    count = count * info.itemsize // store.itemsize
    x = info.obj
    if hasattr(x, "copy_to_host") and hasattr(x, "reshape"):
        flat = x.reshape(count * store.itemsize // np.dtype(x.dtype).itemsize)
        return flat if np.dtype(flat.dtype) == store else flat.view(store)
    if simulated():  # the simulator's "device" memory is host memory: wrap it, no copy
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        buf = (ctypes.c_uint8 * (count * store.itemsize)).from_address(info.pointer)
        return FakeCUDAArray(np.frombuffer(buf, store))
    from numba import cuda

    return cuda.as_cuda_array(_Interface(info, store, count), sync=False)
