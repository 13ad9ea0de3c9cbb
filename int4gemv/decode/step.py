"""Running a decode step: the eager and captured forms shared by every chain implementation.

:class:`ChainStep` is the base of :class:`~int4gemv.decode.chain.DecodeChain` and
:class:`~int4gemv.decode.persistent.PersistentChain`: ``run(x)`` (eager, on the chain's own
stream) and ``capture(provider, graph_id, x)`` (once into a graph owned by a
:class:`lifecycle.GraphProvider`, the input staged from a pinned buffer retained for the graph),
which returns a :class:`CapturedChain` to replay and release.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda

from .streams import DeviceStreams

__all__ = ["ChainStep", "CapturedChain"]


class ChainStep:
    """Running a step: the eager and captured forms shared by every chain implementation. A
    subclass sets ``hidden``, ``x`` (device input), ``logits`` (device output) and ``_ops`` (the
    step's operations, each ``op(stream)``), and ``launches`` / ``weight_bytes``."""

    _stream = None

    def input(self, x) -> np.ndarray:
        """``x`` as the chain's fp16 input (a numpy float array of shape ``[hidden]``)."""
        if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
            raise TypeError(f"x must be a numpy float array; got {type(x).__name__} "
                            f"{getattr(x, 'dtype', '')}")
        if x.shape != (self.hidden,):
            raise ValueError(f"x must have shape ({self.hidden},); got {x.shape}")
        return np.ascontiguousarray(x, np.float16)

    def enqueue(self, stream, streams=None) -> None:
        """Issue the step's launches on ``stream`` (reads ``self.x``, writes ``self.logits``);
        ``streams``: how they reach it (default :class:`DeviceStreams`)."""
        streams = streams or DeviceStreams()
        for op in self._ops:
            streams.submit(stream, op)

    def run(self, x) -> np.ndarray:
        """Eager: copy ``x`` in, run the step on the chain's own stream, wait; returns the logits
        (fp16 numpy)."""
        x = self.input(x)
        if self._stream is None:
            self._stream = cuda.default_stream() if config.ENABLE_CUDASIM else cuda.stream()
        s = self._stream
        self.x.copy_to_device(x, stream=s)
        self.enqueue(None if config.ENABLE_CUDASIM else s)
        out = self.logits.copy_to_host(stream=s)
        s.synchronize()
        return out

    def capture(self, provider, graph_id: int, x, *, streams=None) -> "CapturedChain":
        """Capture the step as graph ``graph_id`` of ``provider`` (a :class:`lifecycle.GraphProvider`):
        a copy of ``x`` staged in a pinned buffer retained for the graph, copied to ``self.x`` at
        every replay, then every launch. One eager warm-up run precedes the capture. ``streams``:
        :class:`SimulatedStreams` for a provider on the simulated driver."""
        x = self.input(x)
        streams = streams or DeviceStreams()

        def step(cap):
            streams.copy_in(cap, cap.stage(x), self.x)
            self.enqueue(cap.stream, streams)

        provider.record(graph_id, step)
        return CapturedChain(self, provider, graph_id)


class CapturedChain:
    """A chain captured in an owned graph: ``replay(x)``, ``logits()``, ``release()``."""

    def __init__(self, chain: ChainStep, provider, graph_id: int):
        self.chain, self.provider, self.graph_id = chain, provider, graph_id

    def replay(self, x=None) -> None:
        """Launch the graph (asynchronous); with ``x``, first wait for the previous replay and
        write ``x`` into the retained pinned buffer the graph copies its input from."""
        if x is not None:
            x = self.chain.input(x)
            self.provider.synchronize(self.graph_id)
            self.provider.buffers(self.graph_id)[0].array[...] = x
        self.provider.replay(self.graph_id)

    def logits(self) -> np.ndarray:
        """Wait for the graph, then the logits (fp16 numpy)."""
        self.provider.synchronize(self.graph_id)
        return self.chain.logits.copy_to_host()

    def __call__(self, x) -> np.ndarray:
        self.replay(x)
        return self.logits()

    def release(self) -> None:
        """Release the graph and its pinned buffer (``provider.release``)."""
        self.provider.release(self.graph_id)
