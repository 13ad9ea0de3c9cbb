"""How a decode step's operations reach a CUDA stream: on a GPU, or on the simulated driver.

An operation is a callable ``op(stream)`` (:mod:`int4gemv.decode.launches`).
:class:`DeviceStreams` issues operations on a real stream (so a capturing stream records them);
:class:`SimulatedStreams` enqueues them as kernels of a :class:`lifecycle.SimDriver` stream, so
the simulated driver records and replays them. Both take side-branch operations (the L2
lookahead, :mod:`.lookahead`): ``fork(stream, ops)`` runs ``ops`` after the work issued so far,
beside what follows; ``join(stream)`` makes what follows wait for every forked operation.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..device import simulated, stream_handle

__all__ = ["DeviceStreams", "SimulatedStreams"]


class DeviceStreams:
    """How a chain's work reaches a CUDA stream on a GPU: each launch is issued on it directly
    (so it is captured when the stream captures), the staged input copied straight into place."""

    _side = None

    def submit(self, stream, op) -> None:
        op(stream)

    def fork(self, stream, ops) -> None:
        """Run ``ops`` on this object's side stream after the work issued on ``stream`` so far
        (an event recorded on ``stream``, waited for by the side stream: a capturing ``stream``
        draws the side stream into its capture). On Numba's simulator they run in order on
        ``stream``."""
        if simulated():
            for op in ops:
                op(stream)
            return
        if self._side is None:
            self._side = cuda.stream()
        _follow(self._side, _numba_stream(stream))
        for op in ops:
            op(self._side)

    def join(self, stream) -> None:
        """Make later work on ``stream`` wait for everything forked (a capture must end joined)."""
        if self._side is not None:
            _follow(_numba_stream(stream), self._side)

    def copy_in(self, capture, buffer, dst) -> None:
        capture.copy_to_device(dst, buffer)


def _numba_stream(stream):
    """``stream`` as a Numba stream (a raw handle, e.g. a capture's, wrapped without ownership)."""
    from numba.cuda.cudadrv.driver import Stream

    return stream if isinstance(stream, Stream) else cuda.external_stream(stream_handle(stream))


def _follow(waiter, stream) -> None:
    """Later work on ``waiter`` waits for the work issued on ``stream`` so far."""
    event = cuda.event(timing=False)
    event.record(stream)
    event.wait(waiter)


class SimulatedStreams:
    """The same for a provider on :class:`lifecycle.SimDriver` (``NUMBA_ENABLE_CUDASIM=1``): each
    launch is enqueued as a simulated kernel that runs it (on Numba's simulator) when the stream
    reaches it, so it is recorded and replayed; the staged input lands in simulated device memory
    and a simulated kernel copies it into the chain's input buffer."""

    def __init__(self, sim):
        self.sim, self._landing = sim, {}

    def submit(self, stream, op) -> None:
        self.sim.launch_kernel(stream, functools.partial(op, None))

    def fork(self, stream, ops) -> None:
        """The simulated driver has one stream here: the side operations run in order on it."""
        for op in ops:
            self.submit(stream, op)

    def join(self, stream) -> None:
        """Nothing to join: :meth:`fork` ran on ``stream`` itself."""

    def copy_in(self, capture, buffer, dst) -> None:
        key = (tuple(dst.shape), np.dtype(dst.dtype))
        if key not in self._landing:  # first met in the warm-up run, outside capture
            self._landing[key] = self.sim.device_array(*key)
        landing = self._landing[key]
        capture.copy_to_device(landing, buffer)
        self.sim.launch_kernel(capture.stream, dst.copy_to_device, landing)
