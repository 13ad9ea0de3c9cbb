"""Memory, copies, host functions and kernels of the simulated driver (a mixin of
:class:`~lifecycle.testing.sim_driver.SimDriver`, whose lock, tables and capture rules it uses)."""

from __future__ import annotations

import weakref

import numpy as np
from cuda.bindings.driver import CUresult as R

from .sim_objects import POISON, HostFuncHandle, SimDeviceArray, SimKernel

__all__ = ["SimMemory"]


class SimMemory:
    """Pinned and device memory, host-to-device copies, host functions and test kernels."""

    def _block(self, ptr, nbytes, table):
        for base, mem in table.items():
            if base <= ptr and ptr + nbytes <= base + mem.nbytes:
                return base, mem
        return None, None

    def _violation(self, message):
        with self._cv:
            self.violations.append(message)


    # -- memory --------------------------------------------------------------------------------
    def mem_host_alloc(self, nbytes: int) -> int:
        if int(nbytes) <= 0:
            self._fail("cuMemHostAlloc", R.CUDA_ERROR_INVALID_VALUE)
        self._unsafe("cuMemHostAlloc")
        mem = np.zeros(int(nbytes), np.uint8)
        with self._cv:
            self._host[mem.ctypes.data] = mem
        return mem.ctypes.data

    def mem_free_host(self, ptr: int) -> None:
        self._unsafe("cuMemFreeHost")
        with self._cv:
            mem = self._host.pop(int(ptr), None)
            if mem is None:
                self._fail("cuMemFreeHost", R.CUDA_ERROR_INVALID_VALUE)
            mem[:] = POISON
            self._freed_host[int(ptr)] = mem  # kept: no address reuse, no crash on a late read

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        dst, src, nbytes = int(dst), int(src), int(nbytes)
        with self._cv:
            if self._block(src, nbytes, self._host)[1] is None:
                self._fail("cuMemcpyHtoDAsync", R.CUDA_ERROR_INVALID_VALUE)
            if self._block(dst, nbytes, self._device_mem)[1] is None:
                self._fail("cuMemcpyHtoDAsync", R.CUDA_ERROR_INVALID_VALUE)

        def copy():
            with self._cv:
                base, mem = self._block(src, nbytes, self._host)
                if mem is None:
                    self.violations.append(f"use after free: a copy read freed pinned memory {src:#x}")
                    return
                dbase, darr = self._block(dst, nbytes, self._device_mem)
                if darr is None:
                    self.violations.append(f"use after free: a copy wrote freed device memory {dst:#x}")
                    return
                data = mem[src - base: src - base + nbytes]
                darr._host.view(np.uint8).reshape(-1)[dst - dbase: dst - dbase + nbytes] = data

        self._enqueue("cuMemcpyHtoDAsync", stream, [copy])

    def launch_host_func(self, stream: int, fn) -> HostFuncHandle:
        handle = HostFuncHandle(fn)
        ref = weakref.ref(handle)

        def call():
            live = ref()
            if live is None:
                self._violation("host function called after its keep-alive handle was dropped")
                return
            try:
                live.fn()
            except BaseException as exc:
                self._violation(f"host function raised {type(exc).__name__}: {exc}")

        self._enqueue("cuLaunchHostFunc", stream, [call])
        self._host_funcs.add(handle)
        return handle

    # -- sim-only helpers for tests ------------------------------------------------------------
    def device_array(self, shape, dtype=np.float32) -> SimDeviceArray:
        """Device memory on the current context's device (a potentially unsafe call)."""
        ctx = self._need_ctx("cuMemAlloc")
        self._unsafe("cuMemAlloc")
        arr = SimDeviceArray(self, ctx, shape, dtype)
        with self._cv:
            self._device_mem[arr.ptr] = arr
        return arr

    def launch_kernel(self, stream: int, fn, *args) -> None:
        """Enqueue ``fn(*views)``: device arrays in ``args`` arrive as numpy views."""
        def run():
            views = [a._host if isinstance(a, SimDeviceArray) else a for a in args]
            try:
                fn(*views)
            except BaseException as exc:
                self._violation(f"kernel raised {type(exc).__name__}: {exc}")

        self._enqueue("cuLaunchKernel", stream, [run])

    def kernel(self, fn) -> SimKernel:
        """A lazily loaded kernel (see :class:`SimKernel`)."""
        return SimKernel(self, fn)
