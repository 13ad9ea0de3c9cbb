"""Launching a compiled Numba kernel with its arguments bound once.

A Numba launch from Python types every argument and packs it again on every call (about
100 microseconds per call for these kernels, measured on the H200). :class:`BoundLaunch` does
that work once for a fixed set of arguments: it keeps the kernel's handle (a ``CUkernel``: Numba
loads modules through ``cuLibrary*``), the launch geometry and a packed ``void**`` parameter
block (Numba's kernel ABI: each array is ``meminfo, parent, nitems, itemsize, data, shape...,
strides...``), and each call is a single ``cuLaunchKernelEx``, called through ctypes with its
four arguments prebuilt per stream (a cuda.bindings call costs a few microseconds of argument
conversion more; moving from ``cuLaunchKernel``'s eleven arguments took 0.9–1.0 µs off a
launch on an H100, sessions 20 and 24 of bench/NOTES.md).
Errors name the call and the CUDA error code. A binding holds raw pointers and no references:
the caller keeps the arrays alive and re-binds when any pointer, shape or stride changes.

On Numba's simulator there is no kernel handle: :func:`bind` returns a launch through Numba.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .device import simulated

__all__ = ["bind", "BoundLaunch", "CudaCallError", "launch_config", "STATIC_SHARED_LIMIT", "MAX_STREAMS"]


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


_LIBCUDA = {}
#: ``CU_LAUNCH_ATTRIBUTE_COOPERATIVE``, ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``
_COOPERATIVE, _PROGRAMMATIC = 2, 6
#: ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``, and the dynamic shared memory a kernel
#: gets without raising it (48 KB).
_MAX_DYNAMIC_SHARED, STATIC_SHARED_LIMIT = 8, 48 * 1024
#: Streams a :class:`BoundLaunch` keeps launch arguments for (past this, it starts afresh).
MAX_STREAMS = 16


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def launch_config(grid, block, shared=0, programmatic=False, cooperative=False):
    """``(CUlaunchConfig, its attribute array)`` for ``cuLaunchKernelEx``, with the programmatic
    and cooperative attributes asked for (each set to 1; none: a plain launch, the attribute
    array empty). The config keeps its attribute array alive; the caller keeps the config alive
    and sets its stream."""
    ids = [i for i, on in ((_PROGRAMMATIC, programmatic), (_COOPERATIVE, cooperative)) if on]
    attributes = (_LaunchAttribute * len(ids))()
    for attribute, i in zip(attributes, ids):
        attribute.id, attribute.value[0] = i, 1
    config = _LaunchConfig((ctypes.c_uint * 3)(*map(int, grid)), (ctypes.c_uint * 3)(*map(int, block)),
                           int(shared), None,
                           ctypes.cast(attributes, ctypes.POINTER(_LaunchAttribute)) if ids else None,
                           len(ids))
    return config, attributes


def _driver_function(name):
    """``cuLaunchKernelEx`` / ``cuKernelSetAttribute`` from the driver library.
    ``cuLaunchKernelEx`` has no ``argtypes``: :class:`BoundLaunch` passes its four arguments as
    ctypes objects of the C parameters' types (a conversion through ``argtypes`` on every launch
    costs about 0.2 microseconds; 11 arguments of ``cuLaunchKernel``, twice that)."""
    if not _LIBCUDA:
        lib = ctypes.CDLL("libcuda.so.1")
        fx = lib.cuLaunchKernelEx
        fx.restype = ctypes.c_int
        fa = lib.cuKernelSetAttribute   # (attribute, value, CUkernel, CUdevice)
        fa.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        fa.restype = ctypes.c_int
        _LIBCUDA.update(cuLaunchKernelEx=fx, cuKernelSetAttribute=fa)
    return _LIBCUDA[name]


def _error_name(code):
    from cuda.bindings import driver
    try:
        return driver.CUresult(code)
    except ValueError:
        return code


class BoundLaunch:
    """One kernel with fixed arguments and geometry; ``launch(stream_handle)`` runs it.

    ``programmatic``: launch with programmatic stream serialization: the
    kernel may start before the previous kernel in the stream has finished, so it must call
    ``griddepcontrol.wait`` before touching anything that kernel writes. ``cooperative``: a
    cooperative launch: every block of the grid is resident at once (the driver refuses a grid
    that cannot be), so blocks may wait for each other. ``shared``: dynamic shared memory in
    bytes; past :data:`STATIC_SHARED_LIMIT` the kernel's limit is raised to it once, here.
    """

    __slots__ = ("_call", "_function", "_geometry", "_params", "_values", "_by_stream")

    def __init__(self, dispatcher, args, grid, block, shared=0, programmatic=False, cooperative=False):
        from numba.cuda.typing.typeof import Purpose, typeof

        sig = tuple(typeof(a, Purpose.argument) for a in args)
        kernel = dispatcher.overloads.get(sig)
        if kernel is None:
            kernel = dispatcher.compile(sig)
        cufunc = kernel._codelibrary.get_cufunc()
        handle = int(cufunc.handle)   # a CUkernel (Numba loads through cuLibrary*)
        if shared > STATIC_SHARED_LIMIT:   # past 48 KB the kernel must opt in to its dynamic size
            err = _driver_function("cuKernelSetAttribute")(_MAX_DYNAMIC_SHARED, int(shared), handle,
                                                           int(cufunc.device.id))
            if err:
                raise CudaCallError("cuKernelSetAttribute", _error_name(err))
        values = []
        for a in args:
            values += _array_params(a) if hasattr(a, "__cuda_array_interface__") else _scalar_param(a)
        self._values = values
        self._params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        self._geometry = (grid, block, shared, programmatic, cooperative)
        self._function = ctypes.c_void_p(handle)
        self._call = _driver_function("cuLaunchKernelEx")
        self._by_stream = {}

    def launch(self, stream_handle: int = 0):
        args = self._by_stream.get(stream_handle)
        if args is None:
            args = self._arguments(stream_handle)
        err = self._call(*args)
        if err:
            raise CudaCallError("cuLaunchKernelEx", _error_name(err))

    def _arguments(self, stream_handle):
        """``cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
        void **extra)``'s arguments on stream ``stream_handle``, each a ctypes object of its C
        type, made once per stream: a config of its own per stream, never written after, so
        threads launching one binding on different streams do not race (at most
        :data:`MAX_STREAMS` kept)."""
        config, _ = launch_config(*self._geometry)  # the config keeps its attributes alive
        config.hStream = stream_handle
        if len(self._by_stream) >= MAX_STREAMS:
            self._by_stream.clear()
        # byref keeps the config alive as long as these arguments (a launch in flight included)
        args = self._by_stream[stream_handle] = (ctypes.byref(config), self._function,
                                                 ctypes.c_void_p(ctypes.addressof(self._params)), None)
        return args


class _NumbaLaunch:
    """The simulator's launch: through Numba, with the same interface. The simulator's
    ``kernel[grid, block]`` sets the geometry on the kernel object itself, so it is applied at
    each launch (two bindings of one kernel would otherwise share the last one's geometry)."""

    __slots__ = ("_dispatcher", "_config", "_args")

    def __init__(self, dispatcher, args, grid, block, shared=0, programmatic=False, cooperative=False):
        self._dispatcher, self._config, self._args = dispatcher, (tuple(grid), tuple(block), 0, shared), args

    def launch(self, stream_handle=0):
        self._dispatcher[self._config](*self._args)


def bind(dispatcher, args, grid, block, shared=0, programmatic=False, cooperative=False):
    """A launch of ``dispatcher`` with ``args`` bound (compiling for their types if needed);
    ``shared`` is the dynamic shared memory in bytes; ``programmatic``, ``cooperative`` see
    :class:`BoundLaunch` (the simulator runs every launch in order, its blocks one by one: a
    kernel whose blocks wait for each other runs there as one block)."""
    if simulated():
        return _NumbaLaunch(dispatcher, args, grid, block, shared)
    return BoundLaunch(dispatcher, args, grid, block, shared, programmatic, cooperative)
