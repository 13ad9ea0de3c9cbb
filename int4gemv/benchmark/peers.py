"""Peers timed in the same process as int4gemv, with the same timer and weight rotation.

Each peer is a small descriptor in :data:`PEERS` (``name``, ``description``, :meth:`Peer.available`,
:meth:`Peer.prepare`):

* ``tinygemm`` — torch's INT4 kernel ``aten._weight_int4pack_mm`` (bf16, group 32, asymmetric
  scale-and-zero pairs), weights packed by ``aten._convert_weight_to_int4pack(uint8 [N, K/2], 8)``.
* ``torch.mv`` — fp16 dense GEMV (cuBLAS; ``torch.mm`` for M > 1): an unquantized weight (4x bytes).
* ``dequant+mv`` — dequantize int4gemv's own device weights to fp16 with torch ops, then
  ``torch.mv``: the naive baseline (reads the weights int4gemv reads).
* ``gemlite`` — gemlite's Triton GEMV, only where ``import gemlite`` works.

Peers need torch with CUDA: ``pip install "int4gemv[peers]"``. torch is imported on first use
(:func:`require_torch` says what to install when it is missing). A peer's launches are captured
into a torch CUDA graph (:func:`torch_graph`) and timed by :func:`~int4gemv.benchmark.timing.measure_replays`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .weights import reference, relative_error, rotation_copies, weight_bytes

__all__ = ["PEERS", "Peer", "Prepared", "available_peers", "check_peers", "require_torch", "torch_dequantize",
           "torch_graph", "torch_views"]

GROUP = 32
PEERS_HINT = 'install int4gemv[peers]: pip install "int4gemv[peers]" (torch with CUDA)'


def require_torch():
    """``import torch``, or ``ImportError`` saying to install the ``peers`` extra."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError(f"int4gemv's benchmark peers need torch: {PEERS_HINT}") from exc
    return torch


@dataclass
class Prepared:
    """A peer ready to launch: ``issue(i)`` enqueues launch ``i`` (rotating over ``copies``
    weights) on the current torch stream; ``nbytes`` is what one launch must read in the peer's
    format; ``check()`` gives the relative error against float64 (``None``: no reference)."""

    issue: Callable
    copies: int
    nbytes: int
    check: Callable | None = None
    keep: list = field(default_factory=list)


class Peer:
    """Descriptor base: subclasses set ``name``/``description`` and implement ``prepare``."""

    name = ""
    description = ""

    def available(self):
        """``(ok, why)``: whether this peer can run in this process."""
        if importlib.util.find_spec("torch") is None:
            return False, f"torch is not installed: {PEERS_HINT}"
        torch = require_torch()
        return (True, f"torch {torch.__version__}") if torch.cuda.is_available() else (False, "no CUDA in torch")

    def prepare(self, N, K, *, x, shared, rotate_bytes) -> Prepared:
        """Weights and a launch for ``x [M, K] · W[N, K]ᵀ``. ``x``: host fp16 ``[M, K]``;
        ``shared``: int4gemv's rotated device weights of this shape (host arrays included)."""
        raise NotImplementedError(f"{type(self).__name__} must implement prepare")


class TorchMv(Peer):
    name = "torch.mv"
    description = "fp16 dense GEMV, torch.mv (cuBLAS)"

    def prepare(self, N, K, *, x, shared, rotate_bytes):
        torch = require_torch()
        nbytes = N * K * 2
        copies = rotation_copies(nbytes, rotate_bytes)
        weights = [torch.randn((N, K), device="cuda", dtype=torch.float16) * 0.02 for _ in range(copies)]
        xt = torch.from_numpy(np.ascontiguousarray(x)).to("cuda")
        M = xt.shape[0]
        out = torch.empty((M, N), device="cuda", dtype=torch.float16)

        def issue(i):
            if M == 1:
                torch.mv(weights[i % copies], xt[0], out=out[0])
            else:
                torch.mm(xt, weights[i % copies].t(), out=out)

        return Prepared(issue, copies, nbytes, keep=[weights, xt, out])


class Tinygemm(Peer):
    name = "tinygemm"
    description = "torch aten._weight_int4pack_mm (bf16, group 32)"

    def available(self):
        ok, why = super().available()
        if not ok:
            return ok, why
        torch = require_torch()
        if not hasattr(torch.ops.aten, "_weight_int4pack_mm"):
            return False, f"torch {torch.__version__} has no aten._weight_int4pack_mm"
        try:
            self._pack(torch, 64, 256)
        except Exception as exc:  # noqa: BLE001 - unsupported GPU or torch build: reported
            return False, f"_convert_weight_to_int4pack failed: {exc!r}"[:300]
        return True, f"torch {torch.__version__}"

    @staticmethod
    def _pack(torch, N, K, generator=None):
        q = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda", generator=generator)
        packed = torch._convert_weight_to_int4pack(q, 8)
        sz = (torch.rand((K // GROUP, N, 2), device="cuda", generator=generator) * 0.01).to(torch.bfloat16)
        return q, packed, sz

    def prepare(self, N, K, *, x, shared, rotate_bytes):
        torch = require_torch()
        nbytes = N * K // 2 + (K // GROUP) * N * 2 * 2
        copies = rotation_copies(nbytes, rotate_bytes)
        generator = torch.Generator(device="cuda").manual_seed(1)
        q0, packed0, sz0 = self._pack(torch, N, K, generator)
        weights = [(packed0, sz0)] + [self._pack(torch, N, K, generator)[1:] for _ in range(copies - 1)]
        xt = torch.from_numpy(np.ascontiguousarray(x)).to("cuda").to(torch.bfloat16)

        def issue(i):
            packed, sz = weights[i % copies]
            torch._weight_int4pack_mm(xt, packed, GROUP, sz)

        def check():
            # tinygemm's uint8 input holds even k in the high nibble; w = (q - 8) * scale + zero.
            q = torch.stack((q0 >> 4, q0 & 0x0F), dim=-1).reshape(N, K).double()
            s = sz0[..., 0].double().t().repeat_interleave(GROUP, dim=1)
            z = sz0[..., 1].double().t().repeat_interleave(GROUP, dim=1)
            expect = (xt.double() @ ((q - 8) * s + z).t()).cpu().numpy()
            y = torch._weight_int4pack_mm(xt, packed0, GROUP, sz0).float().cpu().numpy()
            return relative_error(y, expect)

        return Prepared(issue, copies, nbytes, check, keep=[weights, xt, q0])


def torch_views(w):
    """``(packed, scales)`` torch CUDA views of a symmetric device weight's memory: uint8
    ``[N, W*4]`` and fp16 ``[N, ceil(K/bs)]``, sharing memory with ``w`` (keep ``w`` alive)."""
    torch = require_torch()
    if w.zero_points is not None:
        raise ValueError("torch_views supports symmetric weights only (no zero points)")
    d = w.device_arrays()
    return (torch.as_tensor(d["words"].view(np.uint8), device="cuda"),
            torch.as_tensor(d["scales"], device="cuda"))


def torch_dequantize(packed, scales, K: int, block_size: int, dtype):
    """``(q - 8) * scale`` as a ``[N, K]`` torch tensor of ``dtype`` from :func:`torch_views`."""
    torch = require_torch()
    N = packed.shape[0]
    q = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(N, -1)
    n_blocks = scales.shape[1]
    w = (q.to(dtype) - 8).reshape(N, n_blocks, block_size) * scales.to(dtype).unsqueeze(-1)
    return w.reshape(N, -1)[:, :K]


class DequantMv(Peer):
    name = "dequant+mv"
    description = "torch: dequantize int4gemv's weight to fp16, then torch.mv"

    def prepare(self, N, K, *, x, shared, rotate_bytes):
        torch = require_torch()
        views = [torch_views(w) for w in shared]
        bs = shared[0].block_size
        xt = torch.from_numpy(np.ascontiguousarray(x)).to("cuda")

        def issue(i):
            packed, scales = views[i % len(views)]
            return torch.mm(xt, torch_dequantize(packed, scales, K, bs, torch.float16).t())

        def check():
            return relative_error(issue(0).float().cpu().numpy(), reference(x, shared[0]))

        return Prepared(issue, len(views), weight_bytes(N, K, bs), check, keep=[views, xt])


class Gemlite(Peer):
    name = "gemlite"
    description = "gemlite GemLiteLinearTriton (W4, group 32, fp16)"

    def available(self):
        if importlib.util.find_spec("gemlite") is None:
            return False, "gemlite is not installed (pip install gemlite)"
        try:
            import gemlite
            from gemlite.core import DType, GemLiteLinearTriton  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - a broken install is reported as unavailable
            return False, f"import gemlite failed: {exc!r}"[:300]
        return True, f"gemlite {getattr(gemlite, '__version__', '?')}"

    def prepare(self, N, K, *, x, shared, rotate_bytes):
        torch = require_torch()
        from gemlite.core import DType, GemLiteLinearTriton

        nbytes = weight_bytes(N, K, GROUP)
        copies = rotation_copies(nbytes, rotate_bytes)
        layers = []
        for _ in range(copies):
            layer = GemLiteLinearTriton(W_nbits=4, group_size=GROUP, in_features=K, out_features=N,
                                        input_dtype=DType.FP16, output_dtype=DType.FP16)
            q = torch.randint(0, 16, (N, K), dtype=torch.uint8, device="cuda")
            scales = (torch.rand((N, K // GROUP), device="cuda") * 0.01 + 0.001).half()
            zeros = torch.full((N, K // GROUP), 8.0, device="cuda", dtype=torch.float16)
            layer.pack(q, scales, zeros, bias=None)
            layers.append(layer)
        xt = torch.from_numpy(np.ascontiguousarray(x)).to("cuda")

        def issue(i):
            return layers[i % copies](xt)

        return Prepared(issue, copies, nbytes, keep=[layers, xt])


#: The registry, in table order.
PEERS = {p.name: p for p in (Tinygemm(), TorchMv(), DequantMv(), Gemlite())}


def check_peers(peers) -> list:
    """``peers`` as a list of registered names (a single name is one; a :class:`Peer` object
    passes as it is); ``ValueError`` naming an unknown one and listing :data:`PEERS`, before
    anything runs."""
    if isinstance(peers, (str, Peer)):
        peers = [peers]
    peers = list(peers or ())
    for name in peers:
        if isinstance(name, Peer):
            continue
        if not isinstance(name, str):
            raise TypeError(f"peers must be names from int4gemv.benchmark.PEERS; got {type(name).__name__}")
        if name not in PEERS:
            raise ValueError(f"unknown peer {name!r}; accepted: {', '.join(PEERS)}")
    return peers


def available_peers(names=None) -> dict:
    """``{name: (ok, why)}`` for ``names`` (default: every registered peer); ``ValueError`` for an
    unknown name."""
    out = {}
    for name in (PEERS if names is None else names):
        if name not in PEERS:
            raise ValueError(f"unknown peer {name!r}; accepted: {', '.join(PEERS)}")
        try:
            out[name] = PEERS[name].available()
        except Exception as exc:  # noqa: BLE001 - reported as unavailable
            out[name] = (False, f"availability check failed: {exc!r}"[:300])
    return out


def torch_graph(issue, launches: int, stream):
    """``issue(i)`` for ``i < launches`` captured into one torch CUDA graph on the torch
    ``stream``; returns ``replay()`` (which enqueues one replay on that stream) and the graph.
    Two eager calls run first (compile, allocate), outside capture."""
    torch = require_torch()
    from numba import cuda

    with torch.cuda.stream(stream):
        for i in range(min(2, launches)):
            issue(i)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with cuda.defer_cleanup(), torch.cuda.graph(graph, stream=stream):
        for i in range(launches):
            issue(i)
    stream.synchronize()

    def replay():
        with torch.cuda.stream(stream):   # replay() runs on the current torch stream
            graph.replay()

    return replay, graph
