"""int4gemv launches captured into lifecycle-owned CUDA graphs, on a GPU or on the simulator.

:class:`GemvGraphs` pairs a :class:`lifecycle.GraphProvider` with the way int4gemv launches enter
its captures:

* **GPU**: ``lifecycle.numba_provider(device)`` (Numba's deferred frees held during capture);
  each launch is ``int4gemv.gemv(a, w, out=out, stream=capture.stream)`` on device arrays.
* **Simulator** (``NUMBA_ENABLE_CUDASIM=1``): a provider on :class:`lifecycle.SimDriver`, the CPU
  model of the driver with real capture, replay and release semantics; each launch is captured
  as a simulated kernel that runs ``int4gemv.gemv`` (Numba's simulator) on the arrays' memory.

Both offer the same vocabulary (:meth:`~GemvGraphs.empty`, :meth:`~GemvGraphs.upload`,
:meth:`~GemvGraphs.record_step`, replay, synchronize, release, counters, :meth:`~GemvGraphs.read`,
close), so the decode-step benchmark and the notebook are written once.
"""

from __future__ import annotations

import numpy as np

from int4gemv.benchmark.gemv_timing import simulated as on_simulator
from int4gemv.benchmark.selection import gemv_options

__all__ = ["GemvGraphs"]


class GemvGraphs:
    """A graph provider for int4gemv steps; use as a context manager (``close()`` on exit).

    Args:
        simulated: force the simulator backend (default: ``numba.config.ENABLE_CUDASIM``).
        device: the GPU ordinal (GPU backend).
        timeout: seconds a simulated synchronization may wait.
    """

    def __init__(self, *, simulated: bool | None = None, device: int = 0, timeout: float = 300.0):
        import lifecycle

        self.simulated = on_simulator() if simulated is None else bool(simulated)
        self._sim = None
        if self.simulated:
            self._sim = lifecycle.SimDriver(timeout=timeout)
            self._prev_ctx = self._sim.ctx_get_current()
            self._sim.ctx_set_current(self._sim.primary_ctx_retain(0))
            self.provider = lifecycle.GraphProvider(self._sim, device=0)
            self.backend = "lifecycle.GraphProvider(SimDriver) + Numba CUDA simulator"
        else:
            self.provider = lifecycle.numba_provider(device)
            self.backend = f"lifecycle.numba_provider({device}) (RealDriver)"

    # -- memory -----------------------------------------------------------------------------------
    def empty(self, shape, dtype=np.float16):
        """A device array (contents undefined on the GPU, zeros on the simulator)."""
        if self.simulated:
            return self._sim.device_array(shape, dtype)
        from numba import cuda

        return cuda.device_array(shape, dtype)

    def upload(self, host):
        """A device array holding a copy of the host array ``host`` (synchronous)."""
        host = np.ascontiguousarray(host)
        if not self.simulated:
            from numba import cuda

            dst = cuda.to_device(host)
            cuda.synchronize()  # the copy went on the legacy stream; graphs run on their own
            return dst
        import lifecycle

        dst = self._sim.device_array(host.shape, host.dtype)
        staging = lifecycle.PinnedBuffer(self._sim, -1, host.shape, host.dtype).allocate(relaxed=False)
        try:
            staging.array[...] = host
            stream = self.provider.stream
            self._sim.memcpy_htod_async(dst.ptr, staging.ptr, host.nbytes, stream)
            self._sim.stream_synchronize(stream)
        finally:
            staging.free()
        return dst

    @staticmethod
    def read(array) -> np.ndarray:
        """The contents of a device array as numpy (synchronize the graph first)."""
        return array.copy_to_host()

    # -- launches and graphs ------------------------------------------------------------------------
    def gemv(self, capture, a, w, out, *, variant=None) -> None:
        """Enqueue ``out = a · wᵀ`` on ``capture.stream`` (captured, or eager when graphs are off).
        ``variant``: a tuning for :func:`int4gemv.benchmark.selection.gemv_options` (e.g.
        ``"auto+pdl"``); on the simulator its launch options (pdl, prefetch) are dropped."""
        if not self.simulated:
            import int4gemv

            int4gemv.gemv(a, w, out=out, stream=capture.stream, **gemv_options(variant))
            return
        self._sim.launch_kernel(capture.stream, _SimulatedGemv(w, gemv_options(variant, launch=False)), a, out)

    def record_step(self, graph_id: int, launches, *, staged=None) -> None:
        """Capture one step as graph ``graph_id``: the staged copy, then every launch in order.

        ``launches``: ``(a, w, out, variant)`` tuples of device arrays and weights.
        ``staged``: ``(device_array, host_array)``; the host array is copied into a pinned buffer
        retained for this graph (``buffers(graph_id)[0]``), which every replay copies to the device
        array first. On the GPU one eager run precedes capture (it compiles, loads and binds).
        """
        launches = list(launches)

        def step(cap):
            if staged is not None:
                dst, host = staged
                cap.copy_to_device(dst, cap.stage(host))
            for a, w, out, variant in launches:
                self.gemv(cap, a, w, out, variant=variant)

        self.provider.record(graph_id, step, warmup=not self.simulated)

    @property
    def stream(self) -> int:
        """The provider's own stream (the one ``record_step`` captures and replays on)."""
        return self.provider.stream

    def replay(self, graph_id: int) -> None:
        self.provider.replay(graph_id)

    def synchronize(self, graph_id: int) -> None:
        self.provider.synchronize(graph_id)

    def release(self, graph_id: int) -> None:
        self.provider.release(graph_id)

    def buffers(self, graph_id: int) -> tuple:
        return self.provider.buffers(graph_id)

    @property
    def counters(self):
        """:class:`lifecycle.Counters`: graphs alive, pinned buffers and bytes, pending cleanup."""
        return self.provider.counters

    # -- teardown -------------------------------------------------------------------------------
    def close(self) -> None:
        """Release every graph and buffer (idempotent); on the simulator also stop the driver."""
        self.provider.close()
        if self._sim is not None and not self._sim.closed:
            self._sim.ctx_set_current(self._prev_ctx)
            self._sim.primary_ctx_release(0)
            self._sim.close()

    def __enter__(self) -> GemvGraphs:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        return f"GemvGraphs({self.backend}, {self.counters})"


class _SimulatedGemv:
    """The body of a simulated kernel: ``int4gemv.gemv`` on the host views of the arrays."""

    __slots__ = ("options", "w")

    def __init__(self, w, options):
        self.w, self.options = w, options

    def __call__(self, a, out):
        import int4gemv

        int4gemv.gemv(a, self.w, out=out, **self.options)
