"""What a decode chain computes: its weights, random weights at real shapes, and the float64 truth.

One layer of the chain (GEMVs of a transformer decoder layer, attention left out)::

    q = W_q · x                (k = W_k · x, v = W_v · x are computed too: the KV-cache stand-ins)
    h = x + W_o · q            (q stands in for attention's output)
    g, u = W_gate · h, W_up · h
    m = silu(g) · u
    x = h + W_down · m

and after the last layer ``logits = W_lm_head · x``. :func:`reference_logits` computes this in
float64 on the dequantized weights (optionally rounding every stored intermediate to fp16, the
ideal a fp16 chain can reach); :func:`tolerance` is the error bound the chain is held to.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..reference import relative_error  # re-exported: the chain's error measure
from ..weights import QuantizedWeight

__all__ = ["ChainShape", "LayerWeights", "check_chain", "concat_weights", "random_chain", "exact_gemv",
           "reference_logits", "relative_error", "tolerance", "FP16_UNIT_ROUNDOFF"]

#: fp16 unit roundoff 2**-11: a round-to-nearest fp16 store has relative error at most this.
FP16_UNIT_ROUNDOFF = 2.0 ** -11


@dataclass(frozen=True)
class ChainShape:
    """Widths of a chain: ``layers`` layers, hidden size, MLP width, q and k/v widths, vocabulary."""

    layers: int
    hidden: int
    intermediate: int
    q_dim: int
    kv_dim: int
    vocab: int
    block_size: int = 32

    def __post_init__(self):
        for name in ("layers", "hidden", "intermediate", "q_dim", "kv_dim", "vocab", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
        for name in ("hidden", "intermediate", "q_dim"):  # widths that are some GEMV's K
            if getattr(self, name) % 8:
                raise ValueError(f"{name} must be a multiple of 8 (it is a GEMV's K); got {getattr(self, name)}")

    @classmethod
    def from_workload(cls, workload: dict, layers: int | None = None) -> "ChainShape":
        """The shape of a ``int4gemv/workloads/*.json`` model (``layers`` overrides its layer count)."""
        m = workload["model"]
        return cls(layers=int(layers or m["num_hidden_layers"]), hidden=int(m["hidden_size"]),
                   intermediate=int(m["intermediate_size"]),
                   q_dim=int(m["num_attention_heads"] * m["head_dim"]),
                   kv_dim=int(m["num_key_value_heads"] * m["head_dim"]), vocab=int(m["vocab_size"]),
                   block_size=int(workload.get("block_size", 32)))


@dataclass(frozen=True)
class LayerWeights:
    """The seven projections of one layer (``W[N, K]``: q, k, v, o, gate, up, down).

    ``qkv`` and ``gate_up`` are the merged forms (rows of q, k, v / gate, up stacked along N),
    made on first use. Shapes are checked against each other (ValueError naming the weight).
    """

    q: QuantizedWeight
    k: QuantizedWeight
    v: QuantizedWeight
    o: QuantizedWeight
    gate: QuantizedWeight
    up: QuantizedWeight
    down: QuantizedWeight

    def __post_init__(self):
        for name in ("q", "k", "v", "o", "gate", "up", "down"):
            if not isinstance(getattr(self, name), QuantizedWeight):
                raise TypeError(f"{name} must be an int4gemv.QuantizedWeight; got "
                                f"{type(getattr(self, name)).__name__}")
        hidden = self.q.K
        expect = {"k": (None, hidden), "v": (self.k.N, hidden), "o": (hidden, self.q.N),
                  "gate": (None, hidden), "up": (self.gate.N, hidden), "down": (hidden, self.gate.N)}
        for name, (n, k) in expect.items():
            w = getattr(self, name)
            if (n is not None and w.N != n) or w.K != k:
                raise ValueError(f"{name} has N={w.N}, K={w.K}; expected N={n or 'any'}, K={k} "
                                 f"(hidden {hidden} = q.K, q width {self.q.N}, MLP width {self.gate.N})")

    @functools.cached_property
    def qkv(self) -> QuantizedWeight:
        return concat_weights([self.q, self.k, self.v])

    @functools.cached_property
    def gate_up(self) -> QuantizedWeight:
        return concat_weights([self.gate, self.up])


def check_chain(layers, lm_head):
    """``(layers as a tuple, (hidden, q_dim, kv_dim, intermediate))`` after checking that
    ``layers`` is a non-empty sequence of same-shaped :class:`~int4gemv.decode.LayerWeights`
    and ``lm_head`` a weight over the hidden size (TypeError/ValueError naming the argument)."""
    layers = tuple(layers)
    if not layers or not all(isinstance(x, LayerWeights) for x in layers):
        raise TypeError("layers must be a non-empty sequence of int4gemv.decode.LayerWeights")
    if not isinstance(lm_head, QuantizedWeight):
        raise TypeError(f"lm_head must be an int4gemv.QuantizedWeight; got {type(lm_head).__name__}")
    dims = [(x.q.K, x.q.N, x.k.N, x.gate.N) for x in layers]
    for i, d in enumerate(dims):
        if d != dims[0]:
            raise ValueError(f"layers[{i}] has (hidden, q, kv, mlp) widths {d}; layers[0] has {dims[0]}")
    if lm_head.K != dims[0][0]:
        raise ValueError(f"lm_head has K={lm_head.K}; expected the hidden size {dims[0][0]}")
    return layers, dims[0]


def concat_weights(parts) -> QuantizedWeight:
    """One weight with the parts' rows stacked along N, in order (same K and block size). Parts
    without zero points get 8 (what "none" means) when another part has them."""
    parts = list(parts)
    if not parts or any((p.K, p.block_size) != (parts[0].K, parts[0].block_size) for p in parts):
        raise ValueError("concat_weights needs one or more weights with the same K and block_size")
    zp = None
    if any(p.zero_points is not None for p in parts):
        zp = np.concatenate([p.zero_points if p.zero_points is not None
                             else np.full((p.N, -(-p.n_blocks // 2)), 0x88, np.uint8) for p in parts])
    return QuantizedWeight(np.concatenate([p.packed for p in parts]),
                           np.concatenate([p.scales for p in parts]), zp, K=parts[0].K,
                           N=sum(p.N for p in parts), block_size=parts[0].block_size)


#: rms a residual update (o, down) adds, relative to the residual stream's rms before it.
RESIDUAL_GAIN = 0.2
_SILU_RMS = 0.6  # rms of silu(g) * u for g, u ~ N(0, 1) (E[silu(g)^2] = 0.356)


_NIBBLE_VALUES = np.arange(16)
_NIBBLE_VALUES[0] = 8  # q - 8 in -7..7, 0 twice as likely: symmetric, mean 0, E[(q-8)^2] = 17.5
_SYMMETRIC_BYTES = (_NIBBLE_VALUES[np.arange(256) & 15] | (_NIBBLE_VALUES[np.arange(256) >> 4] << 4)
                    ).astype(np.uint8)


def _random_weight(rng, N, K, block_size, gain):
    """Random bytes with nibble 0 mapped to 8 (``q - 8`` symmetric in -7..7, variance 17.5) and
    scales ``s0 · U(0.5, 1.5)``, ``s0`` such that ``rms(W x) ≈ gain · rms(x)`` for a random ``x``."""
    n_blocks = -(-K // block_size)
    raw = np.frombuffer(rng.bytes(N * n_blocks * block_size // 2), np.uint8)
    packed = _SYMMETRIC_BYTES[raw].reshape(N, n_blocks, block_size // 2)
    s0 = gain / math.sqrt(K * 17.5 * (1 + 1 / 12))  # E[U(0.5, 1.5)^2] = 1 + 1/12
    scales = (s0 * rng.uniform(0.5, 1.5, size=(N, n_blocks))).astype(np.float16)
    return QuantizedWeight(packed, scales, K=K, N=N, block_size=block_size)


def random_chain(shape: ChainShape, *, seed: int = 0):
    """``(layers, lm_head)``: random symmetric weights at ``shape``, scaled so activations stay O(1).

    There is no normalization in the chain, so the weights carry it (as models fold RMSNorm
    weights into the next projection): with ``r`` the expected rms of the residual stream entering
    a sublayer, q, gate and up map rms ``r`` to 1, o and down add :data:`RESIDUAL_GAIN` · ``r``,
    so ``r`` grows by ``1 + RESIDUAL_GAIN**2`` a sublayer (1.8x over 28 layers at 0.2, inputs of
    rms 1); lm_head maps the last ``r`` to 1. Without it ``silu(g)·u``, quadratic in ``h``, makes
    the stream diverge within 20 layers.
    """
    rng = np.random.default_rng(seed)
    H, I, bs = shape.hidden, shape.intermediate, shape.block_size
    grow = math.sqrt(1 + RESIDUAL_GAIN ** 2)
    layers, r = [], 1.0
    for _ in range(shape.layers):
        rh = r * grow
        layers.append(LayerWeights(
            q=_random_weight(rng, shape.q_dim, H, bs, 1 / r),
            k=_random_weight(rng, shape.kv_dim, H, bs, 1 / r),
            v=_random_weight(rng, shape.kv_dim, H, bs, 1 / r),
            o=_random_weight(rng, H, shape.q_dim, bs, RESIDUAL_GAIN * r),
            gate=_random_weight(rng, I, H, bs, 1 / rh), up=_random_weight(rng, I, H, bs, 1 / rh),
            down=_random_weight(rng, H, I, bs, RESIDUAL_GAIN * rh / _SILU_RMS)))
        r = rh * grow
    return tuple(layers), _random_weight(rng, shape.vocab, H, bs, 1 / r)


_NIBBLES = np.stack([np.arange(256) & 15, np.arange(256) >> 4], axis=-1).astype(np.float64)


def exact_gemv(x, w: QuantizedWeight, bias=None, *, rows: int = 2048) -> np.ndarray:
    """``x · ((q − zp) · scale)ᵀ (+ bias)`` in float64 for one ``[K]`` vector, like
    :func:`int4gemv.reference_gemv` but ``rows`` columns of ``w`` at a time (no full dequantized
    copy; a full-size chain checks in seconds): per block ``scale · (Σ q·x − zp · Σ x)``."""
    x = np.asarray(x, np.float64).reshape(-1)
    if x.shape != (w.K,):
        raise ValueError(f"x must have shape ({w.K},); got {x.shape}")
    nb, bs = w.n_blocks, w.block_size
    xb = np.zeros(nb * bs)
    xb[:w.K] = x  # padding nibbles past K meet zeros
    xb = xb.reshape(nb, bs)
    offset = w.zero_point_values().astype(np.float64) * xb.sum(axis=1)
    scales = w.scales.astype(np.float64)
    y = np.empty(w.N)
    for r in range(0, w.N, rows):
        q = _NIBBLES[w.packed[r:r + rows]].reshape(-1, nb, bs)  # q as float64, one chunk
        t = np.einsum("nbk,bk->nb", q, xb)
        y[r:r + rows] = ((t - offset[r:r + rows]) * scales[r:r + rows]).sum(axis=-1)
    return y if bias is None else y + np.asarray(bias, np.float64)


def reference_logits(layers, lm_head, x, *, store=None) -> np.ndarray:
    """The chain's logits in float64 on the dequantized weights, from the input ``x``.

    ``store=np.float16`` rounds every stored intermediate (q, h, g, u, m, x, logits) to fp16 and
    computes the rest exactly: the best a chain storing fp16 activations can do.
    """
    def keep(v):
        return v if store is None else v.astype(store).astype(np.float64)

    x = np.asarray(x, np.float64)
    for layer in layers:
        q = keep(exact_gemv(x, layer.q))
        h = keep(exact_gemv(q, layer.o, x))
        g, u = keep(exact_gemv(h, layer.gate)), keep(exact_gemv(h, layer.up))
        m = keep(g / (1.0 + np.exp(-g)) * u)
        x = keep(exact_gemv(m, layer.down, h))
    return keep(exact_gemv(x, lm_head))


def tolerance(layers: int) -> float:
    """The norm-wise relative error of the logits the chain is held to: ``4 u sqrt(2L + 2)``.

    Model: every fp16 store rounds with relative error at most ``u = 2**-11`` (rms about
    ``u/√3``), and independent roundings add in quadrature. The residual stream is stored twice a
    layer (h, x), each projection output once more, and the kernels add partial sums in fp16 (about
    one more ``u`` per output); the residual updates have gain :data:`RESIDUAL_GAIN`, so an error
    passes through the later layers about unchanged. That predicts ``≈ u sqrt(2L + 2)`` for the
    logits (2L residual stores, lm_head's output and accumulation). The factor 4 covers the rms to
    tail ratio and the layers' amplification; a dropped residual or a wrong slice is ≥ 0.1.
    """
    return 4.0 * FP16_UNIT_ROUNDOFF * math.sqrt(2 * layers + 2)
