"""``gemv`` and ``explain``: validate once, plan, launch.

Host path: ``a`` is a numpy array. It is copied to the device, the kernel runs on the default
stream, the result is copied back and returned as numpy (synchronous).

Device path: ``a`` is a Numba device array or any ``__cuda_array_interface__`` object (torch,
CuPy). Nothing is copied and nothing synchronizes; the launch goes on ``stream`` (a Numba stream,
an object with ``.cuda_stream`` such as ``torch.cuda.Stream``, or a raw ``CUstream`` handle as an
int; ``None`` is Numba's default stream). With ``out`` given, the call allocates nothing, so it
is safe inside CUDA graph capture once the kernel was compiled by an earlier call.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
from numba import cuda

from .controls import raw_environment, read_controls
from .dispatch import Plan, plan_gemv
from .kernels import default_kernel, single_warp_kernel
from .kernels.intrinsics import SIMULATED
from .launcher import bind
from .weights import QuantizedWeight

if SIMULATED:
    _DeviceNDArray = None
else:
    from numba.cuda.cudadrv.devicearray import DeviceNDArray as _DeviceNDArray

__all__ = ["gemv", "explain"]

_device_facts = {}  # device id -> (name, multiprocessors, compute capability)
_MAX_BINDINGS = 64  # bound launches kept per weight


def _current_device_facts():
    """``(name, multiprocessors, compute_capability)`` of the current device, read once per device."""
    dev = cuda.get_current_device()
    facts = _device_facts.get(dev.id)
    if facts is None:
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        facts = _device_facts[dev.id] = (name, dev.MULTIPROCESSOR_COUNT,
                                         tuple(dev.compute_capability))
    return facts


def _device_name():
    return "simulator" if SIMULATED else _current_device_facts()[0]


def _multiprocessor_count():
    return 1 if SIMULATED else _current_device_facts()[1]


def _stream_handle(stream):
    """The raw ``CUstream`` handle (0: the legacy default stream) of a supported stream object."""
    if stream is None:
        return 0
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, (bool, np.bool_)):
        if stream < 0:
            raise ValueError(f"stream handle must be non-negative; got {stream}")
        return int(stream)
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream, cupy.cuda.Stream
        return int(stream.cuda_stream)
    if hasattr(stream, "__cuda_stream__"):  # Numba and cuda.core streams
        return int(stream.__cuda_stream__()[1])
    raise TypeError(f"stream must be None, a Numba/cuda.core stream, a torch/CuPy stream or a raw "
                    f"CUstream int; got {type(stream).__name__}")


def _is_device(x):
    """A Numba device array (real or simulated) or any ``__cuda_array_interface__`` object."""
    return not isinstance(x, np.ndarray) and (
        hasattr(x, "__cuda_array_interface__") or hasattr(x, "copy_to_host"))


def _device_view(name, x):
    try:
        return x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x, sync=False)
    except Exception as exc:  # malformed interface
        raise TypeError(f"{name} is not a usable CUDA array: {exc}") from None


def _describe(name, x):
    """``(dtype, shape, strides in bytes)`` of a numpy, Numba or ``__cuda_array_interface__`` array."""
    if isinstance(x, np.ndarray) or hasattr(x, "copy_to_host"):
        return np.dtype(x.dtype), tuple(x.shape), tuple(x.strides)
    try:
        cai = x.__cuda_array_interface__
        dtype, shape = np.dtype(cai["typestr"]), tuple(cai["shape"])
    except Exception as exc:
        raise TypeError(f"{name} has no usable __cuda_array_interface__: {exc}") from None
    strides = cai.get("strides")
    if strides is None:  # C-contiguous by the interface's definition
        strides, acc = [], dtype.itemsize
        for dim in reversed(shape):
            strides.insert(0, acc)
            acc *= dim
    return dtype, shape, tuple(strides)


def _check_array(name, x, shape_ok, expect, dtype=np.float16):
    x_dtype, shape, strides = _describe(name, x)
    if x_dtype != dtype:
        raise TypeError(f"{name} must be {np.dtype(dtype)}; got {x_dtype}")
    if not shape_ok(shape):
        raise ValueError(f"{name} must have shape {expect}; got {shape}")
    expected = x_dtype.itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim > 1 and stride != expected:
            raise ValueError(f"{name} must be C-contiguous; got strides {strides} for shape {shape}")
        expected *= dim


def _pointer(x):
    if isinstance(x, np.ndarray):
        return x.ctypes.data
    if hasattr(x, "__cuda_array_interface__"):
        return x.__cuda_array_interface__["data"][0]
    return x._ary.ctypes.data  # simulator device array


def _validate(a, w, bias, out):
    """Shapes, dtypes, strides, alignment and host/device agreement. Returns (M, on_device)."""
    if not isinstance(w, QuantizedWeight):
        raise TypeError(f"w must be an int4gemv.QuantizedWeight; got {type(w).__name__}")
    on_device = _is_device(a)
    if not on_device and not isinstance(a, np.ndarray):
        raise TypeError(f"a must be a numpy array or a CUDA array (__cuda_array_interface__); "
                        f"got {type(a).__name__}")
    K, N = w.K, w.N
    _, a_shape, _ = _describe("a", a)
    if len(a_shape) not in (1, 2):
        raise ValueError(f"a must have shape [K] or [M, K] with K={K}; got {a_shape}")
    _check_array("a", a, lambda s: s[-1] == K and (len(s) == 1 or s[0] >= 1), f"[K] or [M, K] with K={K}")
    M = 1 if len(a_shape) == 1 else a_shape[0]
    for name, x in (("bias", bias), ("out", out)):
        if x is None:
            continue
        if _is_device(x) != on_device:
            where = "a CUDA array" if on_device else "a numpy array"
            raise TypeError(f"{name} must be {where} like a (no host/device mix)")
        if not on_device and not isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be a numpy array; got {type(x).__name__}")
    if bias is not None:
        _check_array("bias", bias, lambda s: s == (N,), f"[N] = [{N}]")
    if out is not None:
        want = (N,) if len(a_shape) == 1 else (M, N)
        _check_array("out", out, lambda s: s == want, f"{list(want)}")
    for name, x in (("a", a), ("bias", bias), ("out", out)):
        if x is not None and _pointer(x) % 2:
            raise ValueError(f"{name} is misaligned: fp16 data must start on a 2-byte boundary")
    return M, on_device


def _plan(M, w, a_dtype, variant):
    controls = read_controls(variant)
    for message in controls.warnings:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    device_name = _device_name() if controls.mode == "auto" else None
    return _cached_plan(M, w.N, w.K, w.block_size, np.dtype(a_dtype).str, controls, device_name,
                        _multiprocessor_count())


@functools.lru_cache(maxsize=4096)
def _cached_plan(M, N, K, block_size, a_dtype, controls, device_name, multiprocessors):
    return plan_gemv(M, N, K, block_size, a_dtype, controls, device_name,
                     multiprocessors=multiprocessors)


def explain(a, w, *, bias=None, out=None, variant=None) -> Plan:
    """The :class:`~int4gemv.dispatch.Plan` that :func:`gemv` would use for these arguments.

    Validates like ``gemv`` but launches nothing; ``print(explain(...))`` shows kernel, grid,
    block, shared memory, the control that decided and the reason.
    """
    M, _ = _validate(a, w, bias, out)
    return _plan(M, w, np.float16, variant)


def _supports_pdl():
    """Programmatic dependent launch needs compute capability 9.0 (Hopper) or newer."""
    return SIMULATED or _current_device_facts()[2] >= (9, 0)


def _bind(plan, a2, w, bias, out2, pdl=False, prefetch=False):
    """A launch of the planned kernel with these arguments bound (see :mod:`.launcher`).
    ``pdl`` and ``prefetch`` apply to the single-warp kernel only (the default tiling has no
    wait point)."""
    d = w.device_arrays()
    has_zp = w.zero_points is not None
    has_bias = bias is not None
    bias_arg = bias if has_bias else d["no_bias"]
    if plan.kernel == "single_warp":
        wide = _pointer(a2) % 8 == 0  # 8-byte activation loads where aligned
        kernel = single_warp_kernel(plan.cols, plan.unroll, plan.activations, has_zp,
                                    plan.blocks_per_sm, wide, pdl, prefetch)
        args = (a2.reshape(w.K).view(np.uint64 if wide else np.uint16), d["words64_flat"],
                d["scales_flat"], d["zero_points_flat"], has_zp, bias_arg, has_bias,
                out2.reshape(w.N), w.K)
        return bind(kernel, args, plan.grid, plan.block, programmatic=pdl)
    args = (a2, d["words"], d["words_flat"], d["scales"], d["zero_points"], has_zp, bias_arg,
            has_bias, out2, w.K, w.block_size)
    return bind(default_kernel, args, plan.grid, plan.block)


def _check_flags(pdl, prefetch):
    """``(pdl, prefetch)`` as bools; ``TypeError``/``ValueError`` naming the flag otherwise."""
    for name, flag in (("pdl", pdl), ("prefetch", prefetch)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool; got {type(flag).__name__}")
    if prefetch and not pdl:
        raise ValueError("prefetch needs pdl=True (it runs while the previous kernel drains)")
    return bool(pdl), bool(prefetch)


def _check_pdl(pdl, on_device):
    if pdl and not on_device:
        raise ValueError("pdl is only accepted with device arrays (the host path is synchronous)")
    if pdl and not _supports_pdl():
        raise ValueError("pdl needs a GPU of compute capability 9.0 or newer")


def _bind_device(plan, a, w, bias, out, M, pdl=False, prefetch=False):
    """The bound launch of ``plan`` on validated device arrays (any CUDA array interface)."""
    d_a = _device_view("a", a).reshape(M, w.K)
    d_bias = None if bias is None else _device_view("bias", bias)
    d_out = _device_view("out", out).reshape(M, w.N)
    return _bind(plan, d_a, w, d_bias, d_out, pdl, prefetch)


def _device_key(x):
    """What validation and binding depend on for a device array: type, dtype, shape, strides and
    data pointer; ``None`` for anything that is not a device array. Numba arrays are read
    through attributes (building their ``__cuda_array_interface__`` dict costs microseconds)."""
    if type(x) is _DeviceNDArray:
        return (_DeviceNDArray, x.dtype, x.shape, x.strides, x.device_ctypes_pointer.value)
    if x is None or isinstance(x, np.ndarray):
        return None
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        return None
    return (type(x), cai["typestr"], tuple(cai["shape"]), cai.get("strides"), cai["data"][0])


def _fast_key(a, w, bias, out, variant, pdl):
    """The key of a launch bound earlier for exactly these arrays, controls and ``pdl`` (False,
    True or ``"prefetch"``), or
    ``None`` when the call cannot take that path (host arrays, no ``out``, weight not on the
    device). The controls enter as the raw environment strings they are resolved from."""
    if (SIMULATED or out is None or not isinstance(w, QuantizedWeight) or w._device is None
            or not (variant is None or isinstance(variant, str))):
        return None
    keys = _device_key(a), _device_key(out), _device_key(bias)
    if keys[0] is None or keys[1] is None or (bias is not None and keys[2] is None):
        return None
    return (variant, pdl) + raw_environment() + keys


def gemv(a, w, *, bias=None, out=None, stream=None, variant=None, pdl=False, prefetch=False):
    """``Y = A · ((q − zp) · scale)ᵀ + bias`` with fp16 ``a`` ``[K]`` or ``[M, K]``.

    Args:
        a: fp16 activations; numpy (host path) or a CUDA array (device path).
        w: an :class:`~int4gemv.QuantizedWeight`; moved to the device on first use.
        bias: optional fp16 ``[N]``, on the same side as ``a``.
        out: optional fp16 ``[N]`` / ``[M, N]``, on the same side as ``a``; written in place.
        stream: device path only; see the module docstring.
        variant: ``None`` (use the environment), ``"default"``, ``"single_warp"`` or ``"auto"``.
        pdl: device path, compute capability 9.0+: launch the single-warp kernel as a
            programmatic dependent launch. It may start while the previous kernel on ``stream``
            still runs: it issues its first weight loads, then waits for that kernel to finish
            before it reads ``a`` or ``bias`` or writes ``out``. So the weights must not be
            written by a kernel that may still be running. Default-tiling launches ignore it.
        prefetch: with ``pdl=True`` only: before that wait the kernel also prefetches its whole
            weight (packed nibbles and scales, when at most
            :data:`~int4gemv.kernels.single_warp.PREFETCH_LIMIT_BYTES`) into L2, and lets the
            next launch start only once the wait is over, so in a chain of such launches each
            kernel's weights stream in while the kernel before it runs.

    Returns: device path, ``out`` itself when given, else a new Numba device array; host path,
    a numpy array (``out`` when given).

    Raises ``TypeError``/``ValueError`` naming the argument before any launch.
    """
    if pdl.__class__ is not bool or prefetch.__class__ is not bool or prefetch:
        pdl, prefetch = _check_flags(pdl, prefetch)
    # Launches bound earlier for the same arrays, controls and pdl live on the weight itself.
    fast_key = _fast_key(a, w, bias, out, variant, "prefetch" if prefetch else pdl)
    hit = None if fast_key is None else w._launches.get(fast_key)
    if hit is not None:
        bound, messages = hit
        for message in messages:
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        bound.launch(_stream_handle(stream))
        return out
    M, on_device = _validate(a, w, bias, out)
    vector = len(_describe("a", a)[1]) == 1
    plan = _plan(M, w, np.float16, variant)  # _validate accepted only fp16
    _check_pdl(pdl, on_device)
    if not on_device:
        if stream is not None:
            raise ValueError("stream is only accepted with device arrays (the host path is synchronous)")
        d_a = cuda.to_device(np.ascontiguousarray(a).reshape(M, w.K))
        d_bias = None if bias is None else cuda.to_device(bias)
        d_out = cuda.device_array((M, w.N), np.float16)
        _bind(plan, d_a, w, d_bias, d_out).launch(0)
        result = d_out.copy_to_host().reshape((w.N,) if vector else (M, w.N))
        if out is not None:
            out[...] = result
            return out
        return result
    handle = _stream_handle(stream)
    if out is None:
        d_out = cuda.device_array((M, w.N), np.float16)
        out_arg = result = d_out.reshape(w.N) if vector else d_out
    else:
        out_arg = result = out
    bound = _bind_device(plan, a, w, bias, out_arg, M, pdl, prefetch)
    bound.launch(handle)
    if fast_key is not None:
        # Later calls with the same arrays and controls skip validation and binding.
        w._launches[fast_key] = (bound, plan.warnings)
        if len(w._launches) > _MAX_BINDINGS:
            w._launches.popitem(last=False)
    return result
