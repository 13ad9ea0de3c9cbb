"""A decode step as a data-dependent chain of INT4 GEMVs, run eagerly or as a lifecycle-owned graph.

:class:`DecodeChain` runs the chain of :mod:`int4gemv.decode.model` (per layer q/k/v, o, gate/up,
``silu(g)·u``, down; then lm_head) on device buffers it owns. Every GEMV is an
:func:`int4gemv.prepare`-d launch (validated, planned and bound once). The residual adds are
fused into the GEMV epilogue: ``h = x + W_o·q`` is ``gemv(q, W_o, bias=x, out=h)`` (the bias
is added in float32 before the one rounding to fp16), likewise ``x = h + W_down·m``.
``silu(g)·u`` is one small elementwise kernel (:mod:`int4gemv.decode.silu_mul`). A layer is
5 launches with merged projections (qkv, o, gate_up, silu·mul, down) and 8 with separate ones;
q is the first ``q_dim`` entries of the qkv output in both layouts (separate q, k, v write their
slices of it; gate and up the two halves of one gate/up buffer).

Run modes: :meth:`DecodeChain.run` (eager, on a stream) and :meth:`DecodeChain.capture` (once
into a graph owned by a :class:`lifecycle.GraphProvider`, the input staged from a pinned buffer
retained for the graph; returns a :class:`CapturedChain` to replay and release).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..prepared import prepare
from .model import check_chain
from .silu_mul import check_silu_mul, silu_mul_geometry, silu_mul_kernel
from .step import ChainStep
from .streams import KernelLaunch

__all__ = ["DecodeChain", "TUNINGS", "launch_options"]

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


class DecodeChain(ChainStep):
    """The chain over ``layers`` (a sequence of :class:`~int4gemv.decode.model.LayerWeights`) and
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
