"""Peers measured in the same process as int4gemv, with the same timing and weight rotation.

Each peer is a small descriptor (``name``, ``description``, :meth:`Peer.available`,
:meth:`Peer.prepare`) in the :data:`PEERS` registry:

* ``torch.mv`` — fp16 dense GEMV (cuBLAS): what an unquantized weight costs (4x the bytes).
* ``tinygemm`` — torch's INT4 kernel ``aten._weight_int4pack_mm`` (bf16, group 32, asymmetric
  scale-and-zero pairs), weights packed by ``aten._convert_weight_to_int4pack(uint8 [N, K/2], 8)``.
* ``dequant+mv`` — dequantize int4gemv's own device weights to fp16 with torch ops, then
  ``torch.mv``: the naive baseline (reads the same weights int4gemv reads).
* ``gemlite`` — gemlite's Triton GEMV, only where ``import gemlite`` works.

``prepare`` returns a :class:`Prepared`: ``issue(i, stream_handle)`` enqueues launch ``i`` on the
current torch stream (rotating over ``copies`` weights), ``nbytes`` is the bytes one launch must
read in that peer's format, and ``check()`` gives the relative error against a float64 reference
(``None`` when the peer has no reference here). torch is imported on first use.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

from .device_weights import (
    relative_error,
    rotation_copies,
    torch_dequantize,
    torch_views,
)
from .workloads import weight_bytes

__all__ = ["PEERS", "Peer", "Prepared", "available_peers"]

GROUP = 32


@dataclass
class Prepared:
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
        import torch

        return (True, f"torch {torch.__version__}") if torch.cuda.is_available() else (False, "no CUDA in torch")

    def prepare(self, N, K, *, shared, x, ref, rotate_bytes) -> Prepared:
        """Weights and a launch for ``[1, K] x [N, K]^T``. ``shared``: int4gemv's rotated device
        weights; ``x``: host fp16 ``[K]``; ``ref``: float64 reference for ``shared[0]``."""
        raise NotImplementedError


class TorchMv(Peer):
    name = "torch.mv"
    description = "fp16 dense GEMV, torch.mv (cuBLAS)"

    def prepare(self, N, K, *, shared, x, ref, rotate_bytes):
        import torch

        nbytes = N * K * 2
        copies = rotation_copies(nbytes, rotate_bytes)
        weights = [torch.randn((N, K), device="cuda", dtype=torch.float16) * 0.02 for _ in range(copies)]
        xt = torch.from_numpy(x).to("cuda")
        out = torch.empty(N, device="cuda", dtype=torch.float16)

        def issue(i, handle):
            torch.mv(weights[i % copies], xt, out=out)

        return Prepared(issue, copies, nbytes, keep=[weights, xt, out])


class Tinygemm(Peer):
    name = "tinygemm"
    description = "torch aten._weight_int4pack_mm (bf16, group 32)"

    def available(self):
        import torch

        ok, why = super().available()
        if not ok:
            return ok, why
        if not hasattr(torch.ops.aten, "_weight_int4pack_mm"):
            return False, f"torch {torch.__version__} has no aten._weight_int4pack_mm"
        try:
            self._pack(torch, 64, 256)
        except Exception as exc:  # noqa: BLE001 - unsupported GPU or torch build: report, do not fail
            return False, f"_convert_weight_to_int4pack failed: {exc!r}"[:300]
        return True, f"torch {torch.__version__}"

    @staticmethod
    def _pack(torch, N, K, generator=None):
        q = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda", generator=generator)
        packed = torch._convert_weight_to_int4pack(q, 8)
        sz = (torch.rand((K // GROUP, N, 2), device="cuda", generator=generator) * 0.01).to(torch.bfloat16)
        return q, packed, sz

    def prepare(self, N, K, *, shared, x, ref, rotate_bytes):
        import torch

        nbytes = N * K // 2 + (K // GROUP) * N * 2 * 2
        copies = rotation_copies(nbytes, rotate_bytes)
        generator = torch.Generator(device="cuda").manual_seed(1)
        q0, packed0, sz0 = self._pack(torch, N, K, generator)
        weights = [(packed0, sz0)] + [self._pack(torch, N, K, generator)[1:] for _ in range(copies - 1)]
        xt = torch.from_numpy(x).to("cuda").to(torch.bfloat16).reshape(1, K)

        def issue(i, handle):
            packed, sz = weights[i % copies]
            torch._weight_int4pack_mm(xt, packed, GROUP, sz)

        def check():
            # tinygemm's uint8 input holds even k in the high nibble; w = (q - 8) * scale + zero.
            q = torch.stack((q0 >> 4, q0 & 0x0F), dim=-1).reshape(N, K).double()
            s = sz0[..., 0].double().t().repeat_interleave(GROUP, dim=1)
            z = sz0[..., 1].double().t().repeat_interleave(GROUP, dim=1)
            expect = (((q - 8) * s + z) @ xt[0].double()).cpu().numpy()
            y = torch._weight_int4pack_mm(xt, packed0, GROUP, sz0)[0].float().cpu().numpy()
            return relative_error(y, expect)

        return Prepared(issue, copies, nbytes, check, keep=[weights, xt, q0])


class DequantMv(Peer):
    name = "dequant+mv"
    description = "torch: dequantize int4gemv's weight to fp16, then torch.mv"

    def prepare(self, N, K, *, shared, x, ref, rotate_bytes):
        import torch

        views = [torch_views(w) for w in shared]
        bs = shared[0].block_size
        xt = torch.from_numpy(x).to("cuda")

        def issue(i, handle):
            packed, scales = views[i % len(views)]
            return torch.mv(torch_dequantize(packed, scales, K, bs, torch.float16), xt)

        def check():
            return relative_error(issue(0, None).float().cpu().numpy(), ref)

        return Prepared(issue, len(views), weight_bytes(N, K, bs), check, keep=[views, xt])


class Gemlite(Peer):
    name = "gemlite"
    description = "gemlite GemLiteLinearTriton (W4, group 32, fp16)"

    def available(self):
        if importlib.util.find_spec("gemlite") is None:
            return False, "gemlite is not installed"
        try:
            import gemlite
            from gemlite.core import DType, GemLiteLinearTriton  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - a broken install is reported as unavailable
            return False, f"import gemlite failed: {exc!r}"[:300]
        return True, f"gemlite {getattr(gemlite, '__version__', '?')}"

    def prepare(self, N, K, *, shared, x, ref, rotate_bytes):
        import torch
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
        xt = torch.from_numpy(x).to("cuda").reshape(1, K)

        def issue(i, handle):
            return layers[i % copies](xt)

        return Prepared(issue, copies, nbytes, keep=[layers, xt])


#: The registry, in table order.
PEERS = {p.name: p for p in (Tinygemm(), TorchMv(), DequantMv(), Gemlite())}


def available_peers(names=None) -> dict:
    """``{name: (ok, why)}`` for ``names`` (default: every registered peer)."""
    out = {}
    for name in (PEERS if names is None else names):
        if name not in PEERS:
            raise ValueError(f"unknown peer {name!r}; accepted: {', '.join(PEERS)}")
        try:
            out[name] = PEERS[name].available()
        except Exception as exc:  # noqa: BLE001 - reported as unavailable
            out[name] = (False, f"availability check failed: {exc!r}"[:300])
    return out
