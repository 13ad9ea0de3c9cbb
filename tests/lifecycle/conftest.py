"""Run the lifecycle suite on the simulated driver (always) and on the real driver (GPU only).

``backend`` is parametrized over ``sim`` and ``real<N>`` for each ordinal in ``LIFECYCLE_DEVICES``
(default ``"0"``; e.g. ``LIFECYCLE_DEVICES=0,1`` on two GPUs). The real driver is skipped, with the
reason printed, when ``NUMBA_ENABLE_CUDASIM=1`` (CUDA is then never initialized) or when
``numba.cuda.is_available()`` is false; ``LIFECYCLE_REQUIRE_GPU=1`` turns that skip into a failure.
``two_devices`` is parametrized over ``sim2`` (the simulator has two devices) and, only when
``LIFECYCLE_DEVICES`` lists two or more ordinals, ``real2`` on devices 0 and 1: a one-GPU run
collects no two-GPU test (nothing is skipped for want of a second card), and a run that names two
GPUs where fewer are present skips them, or fails with ``LIFECYCLE_REQUIRE_GPU=1``.

Each backend offers the same small workload vocabulary (device arrays, an ``add`` kernel launched
on a stream, a forbidden allocation, an invalidating synchronize) so test bodies are driver-blind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time

import numpy as np
import pytest

from lifecycle import CaptureMode, DriverError, GraphProvider, RealDriver
from lifecycle.testing import FaultInjectingDriver, SimDriver

_SIM_LEFTOVERS = {"streams", "ctx_retains"}  # the backend's own streams and context
SIM_SPIN_S = 0.0002    # the simulated spin kernel: long next to the simulator's own steps
SPIN_NS = 100_000      # the real spin kernel: 100 us, far longer than a launch (~3 us)
SPIN_STEP_NS = 1_000   # one nanosleep (the instruction sleeps at most ~1 ms)


@functools.cache
def real_unavailable_reason() -> str | None:
    """Why the real driver cannot be tested here, or ``None``. Never initializes CUDA under the
    simulator."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "NUMBA_ENABLE_CUDASIM=1: the real CUDA driver is not tested under the simulator"
    from numba import cuda
    if not cuda.is_available():
        return "numba.cuda.is_available() is False: no CUDA GPU or driver on this machine"
    ok, why = RealDriver.available()
    return None if ok else why


@functools.cache
def real_device_count() -> int:
    return RealDriver().device_count() if real_unavailable_reason() is None else 0


def require_real(devices_needed: int = 1, ordinal: int = 0) -> None:
    reason = real_unavailable_reason()
    if reason is None and real_device_count() < max(devices_needed, ordinal + 1):
        reason = (f"needs {max(devices_needed, ordinal + 1)} GPUs (device {ordinal}); "
                  f"found {real_device_count()}")
    if reason is None:
        return
    if os.environ.get("LIFECYCLE_REQUIRE_GPU") == "1":
        pytest.fail(f"LIFECYCLE_REQUIRE_GPU=1 but {reason}")
    print(f"SKIP real driver: {reason}")
    pytest.skip(reason)


def pytest_report_header(config):
    reason = real_unavailable_reason()
    devices = os.environ.get("LIFECYCLE_DEVICES", "0")
    if reason is None:
        two = "with" if len(_ordinals()) >= 2 else "without (set LIFECYCLE_DEVICES=0,1 for them)"
        return (f"lifecycle: drivers sim + real (devices {devices}; {real_device_count()} GPUs present), "
                f"{two} the real two-GPU tests")
    return f"lifecycle: driver sim only; real driver skipped: {reason}"


class _Backend:
    """Shared workload vocabulary over ``self.base`` (the un-instrumented driver)."""
    kind = ""

    def __init__(self, base, device: int):
        self.base, self.device = base, device
        base.init()
        self._prev = base.ctx_get_current()
        self.ctx = base.primary_ctx_retain(device)
        base.ctx_set_current(self.ctx)
        self.driver = FaultInjectingDriver(base)  # what providers get by default
        self._streams = []

    def instrumented(self, fail=None) -> FaultInjectingDriver:
        return FaultInjectingDriver(self.base, fail)

    def provider(self, driver=None, **kwargs) -> GraphProvider:
        kwargs.setdefault("device", self.device)
        return GraphProvider(driver or self.driver, **kwargs)

    def stream(self, device: int | None = None) -> int:
        with self.on(self.device if device is None else device):
            handle = self.base.stream_create()
        self._streams.append((handle, device))
        return handle

    @contextlib.contextmanager
    def on(self, device: int):
        """Make ``device``'s primary context current in this thread for the block."""
        prev = self.base.ctx_get_current()
        ctx = self.base.primary_ctx_retain(device)
        self.base.ctx_set_current(ctx)
        try:
            yield
        finally:
            self.base.ctx_set_current(prev)
            self.base.primary_ctx_release(device)

    def capture_status(self, stream):
        return self.base.stream_capture_status(stream)

    def unsafe_sync(self, stream) -> None:
        """Synchronize ``stream``: illegal (and invalidating) while it is capturing."""
        self.base.stream_synchronize(stream)

    def leaks(self) -> dict:
        return self.driver.live_resources()

    def violations(self) -> list:
        return []

    def assert_clean(self, *drivers) -> None:
        for drv in (self.driver,) + drivers:
            assert drv.live_resources() == {}, f"leaked through the driver: {drv.live_resources()}"
        assert self.violations() == []

    def close(self) -> None:
        for handle, device in self._streams:
            with self.on(self.device if device is None else device):
                self.base.stream_destroy(handle)
        self.base.ctx_set_current(self._prev)
        self.base.primary_ctx_release(self.device)


class SimBackend(_Backend):
    kind = "sim"

    def __init__(self, device: int = 0, devices: int = 1):
        self.sim = SimDriver(devices=devices, timeout=20.0)
        super().__init__(self.sim, device)

    def zeros(self, n, dtype=np.float32, device: int | None = None):
        with self.on(self.device if device is None else device):
            return self.sim.device_array(n, dtype)

    def read(self, arr, device: int | None = None) -> np.ndarray:
        return arr.copy_to_host()

    def add(self, stream, dst, src) -> None:
        """``dst += src`` on ``stream`` (a kernel launch)."""
        self.sim.launch_kernel(int(getattr(stream, "stream", stream)), np.add, dst, src, dst)

    def spin(self, stream) -> None:
        """Long GPU work on ``stream`` (a kernel that takes ``SIM_SPIN_S`` seconds)."""
        self.sim.launch_kernel(int(getattr(stream, "stream", stream)), lambda: time.sleep(SIM_SPIN_S))

    capture_guard = None

    def forbidden_alloc(self) -> None:
        self.sim.device_array(4)

    #: What :meth:`forbidden_alloc` raises during a capture (with ``code`` 900,
    #: ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``).
    forbidden_alloc_error = DriverError

    def violations(self) -> list:
        return list(self.sim.violations)

    def assert_clean(self, *drivers) -> None:
        super().assert_clean(*drivers)
        live = self.sim.live_resources()
        assert set(live) <= _SIM_LEFTOVERS, f"simulator still holds {live}"
        assert self.sim.thread_capture_mode() is CaptureMode.GLOBAL

    def close(self) -> None:
        super().close()
        self.sim.close()


@functools.cache
def _real_kernels():
    from numba import cuda

    @cuda.jit
    def add(dst, src):
        i = cuda.grid(1)
        if i < dst.size:
            dst[i] += src[i]

    @cuda.jit
    def spin(ns):
        for _ in range(ns // SPIN_STEP_NS):
            cuda.nanosleep(SPIN_STEP_NS)

    return add, spin


class RealBackend(_Backend):
    kind = "real"

    def __init__(self, device: int = 0):
        super().__init__(RealDriver(), device)
        # With no context before, leave the primary context current afterwards: Numba may free
        # device arrays of this test later (deferred deallocation), which needs a current context.
        self._prev = self._prev or self.ctx
        from numba import cuda
        self.cuda = cuda
        warm_dst, warm_src = self.zeros(4), self.zeros(4)  # compile and load before any capture
        self.add(0, warm_dst, warm_src)
        self.spin(0)
        cuda.synchronize()
        # Numba frees device memory lazily, flushing its queue (cuMemFree) in whatever thread drops
        # an array once more than CUDA_DEALLOCS_COUNT are pending, e.g. inside gc.collect() or an
        # automatic collection. cuMemFree waits for the whole device: with a graph blocked on a
        # test's gate, that thread stalls until the gate's own timeout, the graph then finishes,
        # and whatever the test checks next is seen ~20 s late (issue 22 item 5: a staging buffer
        # "gone while release had not returned"). So no flush runs during a test: the queue is
        # held from here to close().
        self._held_frees = cuda.defer_cleanup()
        self._held_frees.__enter__()

    def zeros(self, n, dtype=np.float32, device: int | None = None):
        with self.on(self.device if device is None else device):
            return self.cuda.to_device(np.zeros(n, dtype))

    def read(self, arr, device: int | None = None) -> np.ndarray:
        with self.on(self.device if device is None else device):
            return arr.copy_to_host()

    def add(self, stream, dst, src) -> None:
        from lifecycle.numba_glue import launch
        handle = int(getattr(stream, "stream", stream))
        numba_stream = 0 if handle == 0 else self.cuda.external_stream(handle)
        launch(_real_kernels()[0], (dst.size + 127) // 128, 128, numba_stream, dst, src)

    def spin(self, stream) -> None:
        """Long GPU work on ``stream``: one warp sleeping ``SPIN_NS`` nanoseconds in total."""
        from lifecycle.numba_glue import launch
        handle = int(getattr(stream, "stream", stream))
        launch(_real_kernels()[1], 1, 32, 0 if handle == 0 else self.cuda.external_stream(handle), SPIN_NS)

    @property
    def capture_guard(self):
        from lifecycle.numba_glue import hold_deallocations
        return hold_deallocations

    def forbidden_alloc(self) -> None:
        self.cuda.device_array(4)

    def close(self) -> None:
        with self.on(self.device):
            self._held_frees.__exit__(None, None, None)  # the next deallocation flushes the queue
        super().close()

    @property
    def forbidden_alloc_error(self):
        from numba.cuda.cudadrv.driver import CudaAPIError
        return CudaAPIError


def _ordinals():
    return [int(d) for d in os.environ.get("LIFECYCLE_DEVICES", "0").split(",") if d.strip()]


def _params():
    return [pytest.param(("sim", 0), id="sim")] + [
        pytest.param(("real", d), id=f"real{d}", marks=pytest.mark.gpu) for d in _ordinals()]


def _two_device_params():
    real = [pytest.param("real", id="real2", marks=pytest.mark.gpu)] if len(_ordinals()) >= 2 else []
    return [pytest.param("sim", id="sim2")] + real


@pytest.fixture(params=_params())
def backend(request):
    kind, device = request.param
    if kind == "real":
        require_real(ordinal=device)
    b = SimBackend() if kind == "sim" else RealBackend(device)
    try:
        yield b
        assert b.violations() == [], "use-after-free or stale host function"
    finally:
        b.close()


@pytest.fixture(params=_two_device_params())
def two_devices(request):
    """A backend whose calling thread is on device 0, with a device 1 available (the real driver
    only where ``LIFECYCLE_DEVICES`` names two devices)."""
    if request.param == "real":
        require_real(devices_needed=2)
    b = SimBackend(device=0, devices=2) if request.param == "sim" else RealBackend(0)
    try:
        yield b
        assert b.violations() == []
    finally:
        b.close()


@pytest.fixture
def sim_backend():
    b = SimBackend()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def real_backend():
    require_real()
    b = RealBackend(0)
    try:
        yield b
    finally:
        b.close()
