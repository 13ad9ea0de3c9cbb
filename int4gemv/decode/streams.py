"""How a decode step's operations reach a CUDA stream: on a GPU, or on the simulated driver.

An operation is a callable ``op(stream)`` (:mod:`int4gemv.decode.launches`).
:class:`DeviceStreams` issues operations on a real stream (so a capturing stream records them);
:class:`SimulatedStreams` enqueues them as kernels of a :class:`lifecycle.SimDriver` stream, so
the simulated driver records and replays them.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["DeviceStreams", "SimulatedStreams"]


class DeviceStreams:
    """How a chain's work reaches a CUDA stream on a GPU: each launch is issued on it directly
    (so it is captured when the stream captures), the staged input copied straight into place."""

    def submit(self, stream, op) -> None:
        op(stream)

    def copy_in(self, capture, buffer, dst) -> None:
        capture.copy_to_device(dst, buffer)


class SimulatedStreams:
    """The same for a provider on :class:`lifecycle.SimDriver` (``NUMBA_ENABLE_CUDASIM=1``): each
    launch is enqueued as a simulated kernel that runs it (on Numba's simulator) when the stream
    reaches it, so it is recorded and replayed; the staged input lands in simulated device memory
    and a simulated kernel copies it into the chain's input buffer."""

    def __init__(self, sim):
        self.sim, self._landing = sim, {}

    def submit(self, stream, op) -> None:
        self.sim.launch_kernel(stream, functools.partial(op, None))

    def copy_in(self, capture, buffer, dst) -> None:
        key = (tuple(dst.shape), np.dtype(dst.dtype))
        if key not in self._landing:  # first met in the warm-up run, outside capture
            self._landing[key] = self.sim.device_array(*key)
        landing = self._landing[key]
        capture.copy_to_device(landing, buffer)
        self.sim.launch_kernel(capture.stream, dst.copy_to_device, landing)
