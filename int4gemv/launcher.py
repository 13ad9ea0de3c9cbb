"""Launching a compiled Numba kernel with its arguments bound once.

A Numba launch from Python types every argument and packs it again on every call (about
100 microseconds per call for these kernels, measured on the H200). :class:`BoundLaunch` does that work once for a fixed set of arguments: it keeps the
kernel's ``CUfunction``, the launch geometry and a packed ``void**`` parameter block (Numba's
kernel ABI: each array is ``meminfo, parent, nitems, itemsize, data, shape..., strides...``), and
each call is a single ``cuLaunchKernel``, called through ctypes (a cuda.bindings call costs a few
microseconds of argument conversion more). Errors name the call and the CUDA error code.
A binding holds raw pointers and no references: the caller keeps the arrays alive and re-binds
when any pointer, shape or stride changes.

On Numba's simulator there is no CUfunction: :func:`bind` returns a launch through Numba.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .kernels.intrinsics import SIMULATED

__all__ = ["bind", "BoundLaunch", "CudaCallError"]


class CudaCallError(RuntimeError):
    """A CUDA driver call failed; ``call`` and ``code`` name it."""

    def __init__(self, call, code):
        self.call, self.code = call, code
        super().__init__(f"{call} failed: {code!r}")


def _array_params(arr):
    cai = arr.__cuda_array_interface__
    itemsize = np.dtype(cai["typestr"]).itemsize
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:
        strides, acc = [], itemsize
        for dim in reversed(shape):
            strides.append(acc)
            acc *= dim
        strides = tuple(reversed(strides))
    size = int(np.prod(shape)) if shape else 1
    return ([ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_int64(size), ctypes.c_int64(itemsize),
             ctypes.c_void_p(cai["data"][0])]
            + [ctypes.c_int64(d) for d in shape] + [ctypes.c_int64(s) for s in strides])


def _scalar_param(value):
    if isinstance(value, (bool, np.bool_)):
        return [ctypes.c_uint8(int(value))]
    if isinstance(value, (int, np.integer)):
        return [ctypes.c_int64(int(value))]
    raise TypeError(f"unsupported kernel argument {type(value).__name__}")


_LIBCUDA = []


def _launch_kernel():
    """``cuLaunchKernel`` from the driver library, typed for ctypes (loaded on first use)."""
    if not _LIBCUDA:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuLaunchKernel
        fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        fn.restype = ctypes.c_int
        _LIBCUDA.append(fn)
    return _LIBCUDA[0]


def _error_name(code):
    from cuda.bindings import driver
    try:
        return driver.CUresult(code)
    except ValueError:
        return code


class BoundLaunch:
    """One kernel with fixed arguments and geometry; ``launch(stream_handle)`` runs it."""

    __slots__ = ("_call", "_head", "_tail", "_params", "_values")

    def __init__(self, dispatcher, args, grid, block, shared=0):
        from numba.cuda.typing.typeof import Purpose, typeof

        sig = tuple(typeof(a, Purpose.argument) for a in args)
        kernel = dispatcher.overloads.get(sig)
        if kernel is None:
            kernel = dispatcher.compile(sig)
        handle = int(kernel._codelibrary.get_cufunc().handle)
        values = []
        for a in args:
            values += _array_params(a) if hasattr(a, "__cuda_array_interface__") else _scalar_param(a)
        self._values = values
        self._params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        self._call = _launch_kernel()
        self._head = (handle, *grid, *block, int(shared))
        self._tail = (ctypes.addressof(self._params), None)

    def launch(self, stream_handle: int = 0):
        err = self._call(*self._head, stream_handle, *self._tail)
        if err:
            raise CudaCallError("cuLaunchKernel", _error_name(err))


class _NumbaLaunch:
    """The simulator's launch: through Numba, with the same interface."""

    __slots__ = ("_kernel", "_args")

    def __init__(self, dispatcher, args, grid, block, shared=0):
        self._kernel, self._args = dispatcher[tuple(grid), tuple(block), 0, shared], args

    def launch(self, stream_handle=0):
        self._kernel(*self._args)


def bind(dispatcher, args, grid, block, shared=0):
    """A launch of ``dispatcher`` with ``args`` bound (compiling for their types if needed);
    ``shared`` is the dynamic shared memory in bytes."""
    if SIMULATED:
        return _NumbaLaunch(dispatcher, args, grid, block, shared)
    return BoundLaunch(dispatcher, args, grid, block, shared)
