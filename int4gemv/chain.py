"""A decode step as a data-dependent chain of INT4 GEMVs, run eagerly or as a lifecycle-owned graph.

:class:`DecodeChain` runs the chain of :mod:`int4gemv.chain_model` (per layer q/k/v, o, gate/up,
``silu(g)·u``, down; then lm_head) on device buffers it owns. Every GEMV is an
:func:`int4gemv.prepare`-d launch (validated, planned and bound once). The residual adds are
fused into the GEMV epilogue: ``h = x + W_o·q`` is ``gemv(q, W_o, bias=x, out=h)`` (the bias
is added in float32 before the one rounding to fp16), likewise ``x = h + W_down·m``.
``silu(g)·u`` is one small elementwise kernel (:mod:`int4gemv.kernels.elementwise`). A layer is
5 launches with merged projections (qkv, o, gate_up, silu·mul, down) and 8 with separate ones;
q is the first ``q_dim`` entries of the qkv output in both layouts (separate q, k, v write their
slices of it; gate and up the two halves of one gate/up buffer).

Run modes: :meth:`DecodeChain.run` (eager, on a stream) and :meth:`DecodeChain.capture` (once
into a graph owned by a :class:`lifecycle.GraphProvider`, the input staged from a pinned buffer
retained for the graph; returns a :class:`CapturedChain` to replay and release).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import config, cuda

from .chain_model import LayerWeights
from .kernels.elementwise import check_silu_mul, silu_mul_geometry, silu_mul_kernel
from .prepared import prepare
from .weights import QuantizedWeight

__all__ = ["DecodeChain", "ChainStep", "check_chain", "CapturedChain", "KernelLaunch", "TUNINGS", "launch_options",
           "DeviceStreams", "SimulatedStreams"]

#: Chain tunings: a GEMV variant, optionally as programmatic dependent launches (``+pdl``).
TUNINGS = ("default", "single_warp", "auto", "default+pdl", "single_warp+pdl", "auto+pdl")


def launch_options(tuning: str) -> dict:
    """The keywords of :func:`int4gemv.prepare` a chain tuning stands for: the one place a chain
    chooses its kernels. ``"auto+pdl"`` → ``{"variant": "auto", "pdl": True}``. (The default
    tiling ignores ``pdl``.)"""
    if tuning not in TUNINGS:
        raise ValueError(f"tuning must be one of {TUNINGS}; got {tuning!r}")
    variant, _, pdl = tuning.partition("+")
    return {"variant": variant, "pdl": pdl == "pdl"}


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


def check_chain(layers, lm_head):
    """``(layers as a tuple, (hidden, q_dim, kv_dim, intermediate))`` after checking that
    ``layers`` is a non-empty sequence of same-shaped :class:`~int4gemv.chain_model.LayerWeights`
    and ``lm_head`` a weight over the hidden size (TypeError/ValueError naming the argument)."""
    layers = tuple(layers)
    if not layers or not all(isinstance(x, LayerWeights) for x in layers):
        raise TypeError("layers must be a non-empty sequence of int4gemv.chain_model.LayerWeights")
    if not isinstance(lm_head, QuantizedWeight):
        raise TypeError(f"lm_head must be an int4gemv.QuantizedWeight; got {type(lm_head).__name__}")
    dims = [(x.q.K, x.q.N, x.k.N, x.gate.N) for x in layers]
    for i, d in enumerate(dims):
        if d != dims[0]:
            raise ValueError(f"layers[{i}] has (hidden, q, kv, mlp) widths {d}; layers[0] has {dims[0]}")
    if lm_head.K != dims[0][0]:
        raise ValueError(f"lm_head has K={lm_head.K}; expected the hidden size {dims[0][0]}")
    return layers, dims[0]


class KernelLaunch:
    """A Numba kernel with fixed geometry and arguments, as a chain operation: ``op(stream)``
    launches it on ``stream`` (``None``, a raw ``CUstream`` handle or a Numba stream)."""

    def __init__(self, kernel, grid, block, *args):
        self.kernel, self.grid, self.block, self.args, self._streams = kernel, grid, block, args, {}

    def __call__(self, stream):
        key = stream if stream is None or isinstance(stream, (int, np.integer)) else id(stream)
        s = self._streams.get(key)
        if s is None:
            if stream is None or (isinstance(stream, (int, np.integer)) and int(stream) == 0):
                s = cuda.default_stream()
            else:
                s = cuda.external_stream(int(stream)) if isinstance(stream, (int, np.integer)) else stream
            self._streams[key] = s
        self.kernel[self.grid, self.block, s](*self.args)


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


class DecodeChain(ChainStep):
    """The chain over ``layers`` (a sequence of :class:`~int4gemv.chain_model.LayerWeights`) and
    ``lm_head``, with its device buffers and bound launches.

    Args:
        merged: run q/k/v and gate/up as one GEMV each (``LayerWeights.qkv`` / ``gate_up``).
        tuning: one of :data:`TUNINGS` (see :func:`launch_options`).

    Attributes: ``x`` (the input, fp16 ``[hidden]``, overwritten by the residual stream),
    ``logits`` (fp16 ``[vocab]``), ``launches`` (kernel launches per step), ``weight_bytes``
    (INT4 weights + scales + zero points read per step). Weights move to the device here.
    """

    def __init__(self, layers, lm_head, *, merged: bool = True, tuning: str = "auto"):
        if not isinstance(merged, bool):
            raise TypeError(f"merged must be a bool; got {type(merged).__name__}")
        layers, (self.hidden, self.q_dim, self.kv_dim, self.intermediate) = check_chain(layers, lm_head)
        options = launch_options(tuning)
        self.layers, self.lm_head, self.merged, self.tuning = layers, lm_head, merged, tuning
        H, Q, KV, I = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        self.x, self.h, self.m = (cuda.device_array(n, np.float16) for n in (H, H, I))
        self.qkv = cuda.device_array(Q + 2 * KV, np.float16)
        self.gu = cuda.device_array(2 * I, np.float16)
        self.logits = cuda.device_array(lm_head.N, np.float16)
        q = self.qkv[:Q]

        def gemv(a, w, out, bias=None):
            return prepare(a, w, out=out, bias=bias, **options)

        silu_mul = KernelLaunch(silu_mul_kernel, *silu_mul_geometry(check_silu_mul(self.gu, self.m)),
                                self.gu, self.m)
        ops = []
        for layer in layers:
            if merged:
                ops.append(gemv(self.x, layer.qkv, self.qkv))
            else:
                ops += [gemv(self.x, layer.q, q), gemv(self.x, layer.k, self.qkv[Q:Q + KV]),
                        gemv(self.x, layer.v, self.qkv[Q + KV:])]
            ops.append(gemv(q, layer.o, self.h, bias=self.x))
            if merged:
                ops.append(gemv(self.h, layer.gate_up, self.gu))
            else:
                ops += [gemv(self.h, layer.gate, self.gu[:I]), gemv(self.h, layer.up, self.gu[I:])]
            ops.append(silu_mul)
            ops.append(gemv(self.m, layer.down, self.x, bias=self.h))
        ops.append(gemv(self.x, lm_head, self.logits))
        self._ops = tuple(ops)
        self.launches = len(ops)
        self.weight_bytes = lm_head.nbytes + sum(
            getattr(x, p).nbytes for x in layers for p in ("q", "k", "v", "o", "gate", "up", "down"))

    def __repr__(self):
        return (f"DecodeChain({len(self.layers)} layers, {'merged' if self.merged else 'separate'}, "
                f"{self.tuning}, {self.launches} launches, {self.weight_bytes / 1e6:.1f} MB)")

    def plans(self) -> list:
        """The :class:`~int4gemv.Plan` of each GEMV launch, in order (what each one runs)."""
        return [op.plan for op in self._ops if not isinstance(op, KernelLaunch)]


class CapturedChain:
    """A chain captured in an owned graph: ``replay(x)``, ``logits()``, ``release()``."""

    def __init__(self, chain: DecodeChain, provider, graph_id: int):
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
