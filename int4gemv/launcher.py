"""Launching a compiled Numba kernel with its arguments bound once.

A Numba launch from Python types every argument and packs it again on every call (about
100 microseconds per call for these kernels, measured on the H200). :class:`BoundLaunch` does that work once for a fixed set of arguments: it keeps the
kernel's ``CUfunction``, the launch geometry and a packed ``void**`` parameter block (Numba's
kernel ABI: each array is ``meminfo, parent, nitems, itemsize, data, shape..., strides...``), and
each call is a single ``cuLaunchKernel``. Errors name the call and the CUDA error code.
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


class BoundLaunch:
    """One kernel with fixed arguments and geometry; ``launch(stream_handle)`` runs it."""

    __slots__ = ("_driver", "_function", "_grid", "_block", "_shared", "_params", "_values")

    def __init__(self, dispatcher, args, grid, block, shared=0):
        from cuda.bindings import driver
        from numba.cuda.typing.typeof import Purpose, typeof

        sig = tuple(typeof(a, Purpose.argument) for a in args)
        kernel = dispatcher.overloads.get(sig)
        if kernel is None:
            kernel = dispatcher.compile(sig)
        handle = kernel._codelibrary.get_cufunc().handle
        self._driver = driver
        self._function = driver.CUfunction(int(handle))
        self._grid, self._block, self._shared = tuple(grid), tuple(block), int(shared)
        values = []
        for a in args:
            values += _array_params(a) if hasattr(a, "__cuda_array_interface__") else _scalar_param(a)
        self._values = values
        self._params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])

    def launch(self, stream_handle: int = 0):
        g, b = self._grid, self._block
        (err,) = self._driver.cuLaunchKernel(self._function, g[0], g[1], g[2], b[0], b[1], b[2],
                                             self._shared, stream_handle,
                                             ctypes.addressof(self._params), 0)
        if err != self._driver.CUresult.CUDA_SUCCESS:
            raise CudaCallError("cuLaunchKernel", err)


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
