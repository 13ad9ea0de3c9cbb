"""The :class:`~lifecycle.driver.Driver` over ``cuda.bindings.driver`` (a real GPU).

Importing this module touches no GPU; the first call does (``cuInit``). On a machine without a
driver, :meth:`RealDriver.available` says why instead of raising.

Host functions go through ``ctypes`` to ``libcuda`` directly, with one static trampoline and a
registry of callables keyed by an integer passed as ``userData``: ``cuda.bindings``'s own
``cuLaunchHostFunc`` wrapper frees its callback record after the first call, so a captured host
function would be a use-after-free on the second graph replay (NVIDIA/cuda-python#790).
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
import weakref

from cuda.bindings import driver as cu

from .driver import CALLS, CaptureMode, CaptureStatus, check
from .errors import DriverError

__all__ = ["RealDriver"]

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _HostFuncHandle:
    """Keep-alive handle returned by ``launch_host_func``; the registry holds it weakly."""
    __slots__ = ("fn", "errors", "__weakref__")

    def __init__(self, fn):
        self.fn, self.errors = fn, []


_registry: "weakref.WeakValueDictionary[int, _HostFuncHandle]" = weakref.WeakValueDictionary()
_keys = itertools.count(1)
#: What a machine without a usable GPU is told (with the driver's own cause).
_NO_GPU = ("no usable CUDA GPU here. Two ways out: run on a machine with an NVIDIA GPU and its "
           "driver; or, without one, give the provider lifecycle.SimDriver() (the CPU model of "
           "the driver: GraphProvider(SimDriver()))")
_libcuda = None
_libcuda_lock = threading.Lock()


@_HOST_FN
def _trampoline(user_data):
    handle = _registry.get(user_data or 0)
    if handle is None:  # dropped: its graph was released; nothing to call
        return
    try:
        handle.fn()
    except BaseException as exc:  # cannot propagate into the driver thread
        handle.errors.append(exc)


def _cu_launch_host_func():
    global _libcuda
    with _libcuda_lock:
        if _libcuda is None:
            lib = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
            fn = lib.cuLaunchHostFunc
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            fn.restype = ctypes.c_int
            _libcuda = fn
    return _libcuda


class RealDriver:
    """``cuda.bindings.driver`` adapter. Thread-safe: it keeps no state besides device handles."""

    def __init__(self):
        self._devices: dict[int, cu.CUdevice] = {}

    @staticmethod
    def available() -> tuple[bool, str]:
        """``(True, "")`` when ``cuInit`` succeeds and a device exists, else ``(False, why)``."""
        try:
            check("cuInit", cu.cuInit(0))
            count = check("cuDeviceGetCount", cu.cuDeviceGetCount())
        except Exception as exc:  # no libcuda at all raises a non-CUDA error
            return False, f"CUDA driver unavailable: {type(exc).__name__}: {exc}"
        if count < 1:
            return False, "CUDA driver found no device"
        return True, ""

    # -- devices and contexts ----------------------------------------------------------
    def init(self) -> None:
        """``cuInit``; a machine without the driver library fails as ``CUDA_ERROR_NO_DEVICE``.

        Without a usable GPU (no driver library, or no device) the :class:`DriverError` says so
        and names the two ways out: a GPU, or :class:`~lifecycle.testing.SimDriver`.
        """
        code = int(cu.CUresult.CUDA_ERROR_NO_DEVICE)
        try:
            result = cu.cuInit(0)
        except Exception as exc:  # cuda.bindings could not load libcuda at all
            raise DriverError("cuInit", code, "CUDA_ERROR_NO_DEVICE", detail=f"{exc}; {_NO_GPU}") from exc
        if int(result[0]) == code:
            raise DriverError("cuInit", code, "CUDA_ERROR_NO_DEVICE", detail=_NO_GPU)
        check("cuInit", result)

    def device_count(self) -> int:
        return check("cuDeviceGetCount", cu.cuDeviceGetCount())

    def _device(self, ordinal: int):
        dev = self._devices.get(ordinal)
        if dev is None:
            dev = self._devices[ordinal] = check("cuDeviceGet", cu.cuDeviceGet(int(ordinal)))
        return dev

    def primary_ctx_retain(self, ordinal: int) -> int:
        return int(check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(self._device(ordinal))))

    def primary_ctx_release(self, ordinal: int) -> None:
        check("cuDevicePrimaryCtxRelease", cu.cuDevicePrimaryCtxRelease(self._device(ordinal)))

    def ctx_get_current(self) -> int:
        return int(check("cuCtxGetCurrent", cu.cuCtxGetCurrent()))

    def ctx_set_current(self, ctx: int) -> None:
        check("cuCtxSetCurrent", cu.cuCtxSetCurrent(cu.CUcontext(int(ctx))))

    def ctx_get_device(self) -> int:
        return int(check("cuCtxGetDevice", cu.cuCtxGetDevice()))

    def ctx_synchronize(self) -> None:
        check("cuCtxSynchronize", cu.cuCtxSynchronize())

    # -- streams and capture -------------------------------------------------------------
    def stream_create(self) -> int:
        flags = int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
        return int(check("cuStreamCreate", cu.cuStreamCreate(flags)))

    def stream_destroy(self, stream: int) -> None:
        check("cuStreamDestroy", cu.cuStreamDestroy(cu.CUstream(stream)))

    def stream_get_ctx(self, stream: int) -> int:
        return int(check("cuStreamGetCtx", cu.cuStreamGetCtx(cu.CUstream(stream))))

    def stream_synchronize(self, stream: int) -> None:
        check("cuStreamSynchronize", cu.cuStreamSynchronize(cu.CUstream(stream)))

    def stream_begin_capture(self, stream: int, mode: CaptureMode = CaptureMode.THREAD_LOCAL) -> None:
        check("cuStreamBeginCapture",
              cu.cuStreamBeginCapture(cu.CUstream(stream), cu.CUstreamCaptureMode(int(mode))))

    def stream_end_capture(self, stream: int):
        return check("cuStreamEndCapture", cu.cuStreamEndCapture(cu.CUstream(stream)))

    def stream_capture_status(self, stream: int) -> CaptureStatus:
        status = check("cuStreamIsCapturing", cu.cuStreamIsCapturing(cu.CUstream(stream)))
        return CaptureStatus(int(status))

    def exchange_capture_mode(self, mode: CaptureMode) -> CaptureMode:
        previous = check("cuThreadExchangeStreamCaptureMode",
                         cu.cuThreadExchangeStreamCaptureMode(cu.CUstreamCaptureMode(int(mode))))
        return CaptureMode(int(previous))

    # -- graphs ---------------------------------------------------------------------------
    def graph_instantiate(self, graph):
        return check("cuGraphInstantiate", cu.cuGraphInstantiate(graph, 0))

    def graph_launch(self, graph_exec, stream: int) -> None:
        check("cuGraphLaunch", cu.cuGraphLaunch(graph_exec, cu.CUstream(stream)))

    def graph_exec_destroy(self, graph_exec) -> None:
        check("cuGraphExecDestroy", cu.cuGraphExecDestroy(graph_exec))

    def graph_destroy(self, graph) -> None:
        check("cuGraphDestroy", cu.cuGraphDestroy(graph))

    # -- events ---------------------------------------------------------------------------
    def event_create(self) -> int:
        flags = int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        return int(check("cuEventCreate", cu.cuEventCreate(flags)))

    def event_record(self, event: int, stream: int) -> None:
        check("cuEventRecord", cu.cuEventRecord(cu.CUevent(event), cu.CUstream(stream)))

    def event_synchronize(self, event: int) -> None:
        check("cuEventSynchronize", cu.cuEventSynchronize(cu.CUevent(event)))

    def event_destroy(self, event: int) -> None:
        check("cuEventDestroy", cu.cuEventDestroy(cu.CUevent(event)))

    # -- memory ---------------------------------------------------------------------------
    def mem_host_alloc(self, nbytes: int) -> int:
        flags = int(cu.CU_MEMHOSTALLOC_PORTABLE)
        return int(check("cuMemHostAlloc", cu.cuMemHostAlloc(int(nbytes), flags)))

    def mem_free_host(self, ptr: int) -> None:
        check("cuMemFreeHost", cu.cuMemFreeHost(int(ptr)))

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        check("cuMemcpyHtoDAsync",
              cu.cuMemcpyHtoDAsync(cu.CUdeviceptr(int(dst)), int(src), int(nbytes), cu.CUstream(stream)))

    def launch_host_func(self, stream: int, fn) -> _HostFuncHandle:
        handle = _HostFuncHandle(fn)
        key = next(_keys)
        _registry[key] = handle
        err = _cu_launch_host_func()(ctypes.c_void_p(int(stream)),
                                     ctypes.cast(_trampoline, ctypes.c_void_p), ctypes.c_void_p(key))
        if err != 0:
            _registry.pop(key, None)
            check(CALLS["launch_host_func"], (err,))
        return handle
