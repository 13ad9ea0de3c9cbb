"""The objects a :class:`~lifecycle.testing.sim_driver.SimDriver` hands out or keeps: streams with a
worker thread, graphs, captures, host-function handles, device arrays and lazily loaded kernels."""

from __future__ import annotations

import collections
import threading

import numpy as np

from ..driver import CaptureStatus

__all__ = ["POISON", "HostFuncHandle", "SimGraph", "SimCapture", "SimStream", "SimDeviceArray", "SimKernel"]

#: Byte written over freed pinned memory (kept, never reused) so late reads are recognizable.
POISON = 0xDB


class HostFuncHandle:
    """The keep-alive handle ``launch_host_func`` returns (held weakly by the driver)."""
    __slots__ = ("fn", "__weakref__")

    def __init__(self, fn):
        self.fn = fn


class SimGraph:
    """A graph or an executable graph: the context it belongs to and its recorded operations."""

    def __init__(self, ctx, ops):
        self.ctx, self.ops = ctx, list(ops)


class SimCapture:
    """An open capture: its thread, its ``CaptureMode``, the operations recorded, its status."""

    def __init__(self, thread, mode):
        self.thread, self.mode, self.ops, self.status = thread, mode, [], CaptureStatus.ACTIVE


class SimStream:
    """A stream: a worker thread runs its operations in order; ``capture`` while capturing."""

    def __init__(self, sim, handle, ctx, *, legacy=False):
        self.sim, self.handle, self.ctx, self.legacy = sim, handle, ctx, legacy
        self.ops = collections.deque()
        self.enqueued = self.completed = 0
        self.capture = None
        self.destroyed = False
        self.worker = threading.Thread(target=self._run, daemon=True, name=f"sim-stream-{handle:#x}")
        self.worker.start()

    def _run(self):
        cv = self.sim._cv
        while True:
            with cv:
                while not self.ops and not self.destroyed:
                    cv.wait(0.5)
                if not self.ops:
                    return
                op = self.ops[0]
            op()
            with cv:
                self.ops.popleft()
                self.completed += 1
                cv.notify_all()


class SimDeviceArray:
    """Simulated device memory with a ``__cuda_array_interface__`` (for tests)."""

    def __init__(self, sim, ctx, shape, dtype):
        self._sim, self.ctx = sim, ctx
        self._host = np.zeros(shape, dtype)
        self.shape, self.dtype, self.nbytes = self._host.shape, self._host.dtype, self._host.nbytes
        self.ptr = self._host.ctypes.data

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def copy_to_host(self) -> np.ndarray:
        """The current contents (synchronize the writing stream first)."""
        return self._host.copy()


class SimKernel:
    """A kernel that, like a Numba kernel on first launch, loads its module lazily: the first
    launch makes a potentially unsafe call (and so invalidates a capture it happens in)."""

    def __init__(self, sim, fn):
        self._sim, self.fn, self.loaded = sim, fn, False

    def launch(self, stream: int, *args) -> None:
        if not self.loaded:
            self._sim._unsafe("cuModuleLoadData")
            self.loaded = True
        self._sim.launch_kernel(stream, self.fn, *args)

