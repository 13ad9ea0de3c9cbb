"""A decode step as a data-dependent chain of INT4 GEMVs, run eagerly or as a lifecycle-owned graph.

:class:`DecodeChain` runs the chain of :mod:`int4gemv.decode.model` (per layer q/k/v, o, gate/up,
``silu(g)·u``, down; then lm_head) on device buffers it owns. Every GEMV is an
:func:`int4gemv.prepare`-d launch (validated, planned and bound once). The residual adds are
fused into the GEMV epilogue: ``h = x + W_o·q`` is ``gemv(q, W_o, bias=x, out=h)`` (the bias
is added in float32 before the one rounding to fp16), likewise ``x = h + W_down·m``.
``silu(g)·u`` is one small elementwise kernel (:mod:`int4gemv.decode.silu_mul`). A layer is
5 launches with merged projections (qkv, o, gate_up, silu·mul, down) and 8 with separate ones
(4 and 7 when the split-K down kernel fuses silu·mul, ``fuse_silu``);
q is the first ``q_dim`` entries of the qkv output in both layouts (separate q, k, v write their
slices of it; gate and up the two halves of one gate/up buffer).

Every kernel of a ``+pdl`` tuning is a programmatic dependent launch, silu·mul included. Two
measurement options: ``blocks_per_sm`` caps every GEMV's (persistent) grid, leaving SM slots for
the next kernel's first blocks; ``timeline=True`` launches the stamped form of every kernel
(:mod:`.stamps`), each writing per-block ``%globaltimer`` stamps into ``chain.stamps``
(:mod:`.timeline` reads them) — a separate compilation, so the default chain carries no cost.

Run modes: :meth:`DecodeChain.run` (eager, on a stream) and :meth:`DecodeChain.capture` (once
into a graph owned by a :class:`lifecycle.GraphProvider`, the input staged from a pinned buffer
retained for the graph; returns a :class:`CapturedChain` to replay and release).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..backend import require_gpu
from ..device import device_facts
from ..kernels.handoff import fill_kernel
from ..tuning import Tuning
from .launches import GemvLaunch, KernelLaunch
from .model import check_chain
from .silu_mul import check_silu_mul, silu_mul_geometry, silu_mul_kernel
from .split_k import SplitK, SplitKLaunch
from .stamps import stamp_buffer
from .step import ChainStep

__all__ = ["DecodeChain", "TUNINGS", "GEMV_KINDS", "HANDOFFS", "launch_options"]

#: Chain tunings: a GEMV variant, optionally as programmatic dependent launches (``+pdl``), and
#: with each single-warp kernel's weights prefetched into L2 before its wait (``+l2``).
TUNINGS = ("default", "single_warp", "auto", "default+pdl", "single_warp+pdl", "auto+pdl",
           "single_warp+pdl+l2", "auto+pdl+l2")
#: How a chain kernel learns that its input is complete (see :class:`DecodeChain`).
HANDOFFS = ("grid", "words")
#: The sentinel fill's geometry (``handoff="words"``): a grid-stride loop over the arena, of at
#: most ``FILL_GRID`` blocks (fewer for an arena of fewer than ``FILL_GRID`` blocks' words).
FILL_GRID, FILL_BLOCK = 264, 256
#: The GEMV kinds each layout launches, in step order.
LAYOUT_KINDS = {"merged": ("qkv", "o", "gate_up", "down", "lm_head"),
                "separate": ("q", "k", "v", "o", "gate", "up", "down", "lm_head")}
#: Every GEMV kind of a step (either layout).
GEMV_KINDS = ("qkv", "q", "k", "v", "o", "gate_up", "gate", "up", "down", "lm_head")
#: The projections whose bytes a step reads, per layer.
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")


def launch_options(tuning: str) -> dict:
    """The keywords of :func:`int4gemv.prepare` a chain tuning stands for: the one place a chain
    chooses its kernels. ``"auto+pdl"`` → ``{"variant": "auto", "pdl": True, "prefetch":
    False}``. (The tensor-core kernel ignores ``pdl``; the chain runs M = 1.)"""
    if tuning not in TUNINGS:
        raise ValueError(f"tuning must be one of {TUNINGS}; got {tuning!r}")
    variant, *flags = tuning.split("+")
    return {"variant": variant, "pdl": "pdl" in flags, "prefetch": "l2" in flags}


def _optional_positive(name, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise ValueError(f"{name} must be None or a positive int; got {value!r}")


def _check_kind_tunings(kind_tunings) -> dict:
    if kind_tunings is None:
        return {}
    if not isinstance(kind_tunings, dict):
        raise TypeError(f"kind_tunings must be None or a dict; got {type(kind_tunings).__name__}")
    for kind, tuning in kind_tunings.items():
        if kind not in GEMV_KINDS:
            raise ValueError(f"kind_tunings has an unknown kind {kind!r}; kinds: {GEMV_KINDS}")
        if not isinstance(tuning, Tuning):
            raise TypeError(f"kind_tunings[{kind!r}] must be an int4gemv.Tuning; got {type(tuning).__name__}")
    return dict(kind_tunings)


class DecodeChain(ChainStep):
    """The chain over ``layers`` (a sequence of :class:`~int4gemv.decode.model.LayerWeights`) and
    ``lm_head``, with its device buffers and bound launches. Weights move to the device here.

    Parameters
    ----------
    merged : bool
        Run q/k/v and gate/up as one GEMV each (``LayerWeights.qkv`` / ``gate_up``).
    tuning : str
        One of :data:`TUNINGS` (see :func:`launch_options`).
    blocks_per_sm : int, optional
        Cap every GEMV grid at this many blocks per multiprocessor (``None``: the planned grid).
    timeline : bool
        Launch the stamped kernels (:mod:`.stamps`) writing into ``chain.stamps``.
    silu_pdl : bool, optional
        Launch silu·mul as a programmatic dependent launch (``None``: as the tuning's GEMVs; the
        chain before issue 21 had ``False``).
    kind_tunings : dict, optional
        ``{kind: int4gemv.Tuning}`` for GEMV kinds (names in :data:`GEMV_KINDS`) that run another
        tuning than ``tuning``, e.g. ``{"down": Tuning("single_warp", cols=1, unroll=8, pdl=True)}``.
    down_split : SplitK, optional
        Run every down projection with the split-K kernel (:mod:`.split_k`) of this shape, a
        programmatic launch when the tuning's are (not with a ``kind_tunings["down"]``).
    fuse_silu : bool
        With ``down_split``: no silu·mul launch; down computes ``silu(g)·u`` from the gate/up
        output as it stages its activations (the same fp16 values). A layer is one launch less.
    handoff : str
        How a kernel learns that its input is complete: ``"grid"`` (``griddepcontrol.wait`` with
        a ``+pdl`` tuning, stream order without) or ``"words"`` (:mod:`int4gemv.kernels.handoff`:
        every vector of the step in an arena of its own, filled with sentinels by one more launch
        at the step's start, and every GEMV polls its activations instead of waiting; needs a
        ``+pdl`` tuning, ``fuse_silu`` and no ``kind_tunings``).

    Attributes
    ----------
    x, logits
        The input (fp16 ``[hidden]``; with ``handoff="grid"`` overwritten by the residual
        stream) and the output.
    launches, weight_bytes
        Kernel launches per step; INT4 weights + scales + zero points read per step.
    kernels
        ``(name, layer, weight_bytes)`` per launch, in order (layer −1: lm_head).
    stamps
        With ``timeline``: the uint64 stamp buffer ``[launches, blocks, 2]``; else ``None``.
    """

    def __init__(self, layers, lm_head, *, merged: bool = True, tuning: str = "auto",
                 blocks_per_sm=None, timeline: bool = False, silu_pdl=None, kind_tunings=None,
                 down_split=None, fuse_silu: bool = False, handoff: str = "grid"):
        for name, v in (("merged", merged), ("timeline", timeline), ("fuse_silu", fuse_silu)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool; got {type(v).__name__}")
        if silu_pdl is not None and not isinstance(silu_pdl, bool):
            raise TypeError(f"silu_pdl must be None or a bool; got {type(silu_pdl).__name__}")
        _optional_positive("blocks_per_sm", blocks_per_sm)
        self.kind_tunings = _check_kind_tunings(kind_tunings)
        if down_split is not None and not isinstance(down_split, SplitK):
            raise TypeError(f"down_split must be None or a SplitK; got {type(down_split).__name__}")
        if down_split is not None and "down" in self.kind_tunings:
            raise ValueError("down_split and kind_tunings['down'] both choose the down kernel; give one")
        if fuse_silu and down_split is None:
            raise ValueError("fuse_silu needs down_split (only the split-K down kernel computes silu(g)·u)")
        self.down_split, self.fuse_silu = down_split, fuse_silu
        if handoff not in HANDOFFS:
            raise ValueError(f"handoff must be one of {HANDOFFS}; got {handoff!r}")
        self.handoff = handoff
        unused = set(self.kind_tunings) - set(LAYOUT_KINDS["merged" if merged else "separate"])
        if unused:
            raise ValueError(f"kind_tunings names {sorted(unused)}, which the "
                             f"{'merged' if merged else 'separate'} layout does not run")
        layers, (self.hidden, self.q_dim, self.kv_dim, self.intermediate) = check_chain(layers, lm_head)
        self.options = launch_options(tuning)
        if handoff == "words" and not (self.options["pdl"] and fuse_silu and not self.kind_tunings):
            raise ValueError("handoff='words' needs a +pdl tuning of the default or auto variant, "
                             "fuse_silu=True (with down_split) and no kind_tunings")
        require_gpu("int4gemv.decode.DecodeChain")   # arguments first; then before any device array
        self.layers, self.lm_head, self.merged, self.tuning = layers, lm_head, merged, tuning
        self.blocks_per_sm, self.timeline = blocks_per_sm, timeline
        self.silu_pdl = self.options["pdl"] if silu_pdl is None else silu_pdl
        H, Q, KV, I = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        self.x, self.h, self.m = (cuda.device_array(n, np.float16) for n in (H, H, I))
        self.qkv = cuda.device_array(Q + 2 * KV, np.float16)
        self.gu = cuda.device_array(2 * I, np.float16)
        self.logits = cuda.device_array(lm_head.N, np.float16)
        check_silu_mul(self.gu, self.m)
        self.arena, self._vectors = self._layer_vectors()
        specs = self._specs()
        self.kernels = tuple((name, layer, nbytes) for name, layer, nbytes, _ in specs)
        self.stamps = None
        ops = [make(None, 0) for *_, make in specs]
        if timeline:  # the buffer is sized by the widest grid, known once every launch is planned
            self.stamps = stamp_buffer(len(ops), max(op.grid[0] for op in ops))
            ops = [make(self.stamps, slot) for slot, (*_, make) in enumerate(specs)]
        self._ops = tuple(ops)
        self.launches = len(ops)
        self.weight_bytes = lm_head.nbytes + sum(getattr(x, p).nbytes for x in layers for p in PROJECTIONS)

    def _layer_vectors(self):
        """``(arena, vectors)``: per layer ``(x, qkv, h, gu, next x)``. ``"grid"``: the chain's
        one set of buffers for every layer (no arena); ``"words"``: each layer's own views of
        one fp16 arena (each 16-byte aligned), which the step's first launch fills."""
        if self.handoff == "grid":
            return None, [(self.x, self.qkv, self.h, self.gu, self.x)] * len(self.layers)
        sizes = (self.q_dim + 2 * self.kv_dim, self.hidden, 2 * self.intermediate, self.hidden)
        padded = [-(-n // 8) * 8 for n in sizes]
        arena = cuda.device_array(len(self.layers) * sum(padded), np.float16)
        vectors, start, x = [], 0, self.x
        for _ in self.layers:
            views = []
            for n, room in zip(sizes, padded):
                views.append(arena[start:start + n])
                start += room
            vectors.append((x, *views))
            x = views[-1]
        return arena, vectors

    def _specs(self) -> list:
        """``(name, layer, weight_bytes, make)`` per launch; ``make(stamps, slot)`` binds it."""
        Q, KV, I = self.q_dim, self.kv_dim, self.intermediate
        max_blocks = None if self.blocks_per_sm is None else self.blocks_per_sm * device_facts()[1]
        words = self.handoff == "words"

        def gemv(name, layer, a, w, out, bias=None):
            tuning = self.kind_tunings.get(name)
            options = None if tuning is not None else self.options
            # the words handoff's first GEMV starts after the fill: an ordinary launch makes the
            # sentinels visible to every later kernel before any of them can start
            ordered = words and a is self.x and name in ("qkv", "q")
            return (name, layer, w.nbytes, lambda stamps, slot: GemvLaunch(
                a, w, out, bias, options=options, tuning=tuning, max_blocks=max_blocks, stamps=stamps,
                slot=slot, words=words, ordered=ordered))

        grid, block = silu_mul_geometry(I)
        kernel = silu_mul_kernel(self.silu_pdl)

        def silu_mul(layer):
            return ("silu_mul", layer, 0, lambda stamps, slot: KernelLaunch(
                kernel, grid, block, self.gu, self.m, programmatic=self.silu_pdl, stamps=stamps, slot=slot))

        def down(i, layer, gu, h, x_next):
            if self.down_split is None:
                return gemv("down", i, self.m, layer.down, x_next, bias=h)
            return ("down", i, layer.down.nbytes, lambda stamps, slot: SplitKLaunch(
                gu if self.fuse_silu else self.m, layer.down, x_next, h, shape=self.down_split,
                fused=self.fuse_silu, pdl=self.options["pdl"], words=words, max_blocks=max_blocks,
                stamps=stamps, slot=slot))

        specs = []
        if words:
            arena = self.arena.view(np.uint32)
            specs.append(("fill", -1, 0, lambda stamps, slot: KernelLaunch(
                fill_kernel, min(FILL_GRID, -(-arena.shape[0] // FILL_BLOCK)), FILL_BLOCK, arena,
                stamps=stamps, slot=slot)))
        for i, (layer, (x, qkv, h, gu, x_next)) in enumerate(zip(self.layers, self._vectors)):
            q = qkv[:Q]
            if self.merged:
                specs.append(gemv("qkv", i, x, layer.qkv, qkv))
            else:
                specs += [gemv("q", i, x, layer.q, q), gemv("k", i, x, layer.k, qkv[Q:Q + KV]),
                          gemv("v", i, x, layer.v, qkv[Q + KV:])]
            specs.append(gemv("o", i, q, layer.o, h, bias=x))
            if self.merged:
                specs.append(gemv("gate_up", i, h, layer.gate_up, gu))
            else:
                specs += [gemv("gate", i, h, layer.gate, gu[:I]), gemv("up", i, h, layer.up, gu[I:])]
            if not self.fuse_silu:
                specs.append(silu_mul(i))
            specs.append(down(i, layer, gu, h, x_next))
        specs.append(gemv("lm_head", -1, self._vectors[-1][-1], self.lm_head, self.logits))
        return specs

    def __repr__(self):
        return (f"DecodeChain({len(self.layers)} layers, {'merged' if self.merged else 'separate'}, "
                f"{self.tuning}, {self.launches} launches, {self.weight_bytes / 1e6:.1f} MB)")

    def lm_head_launch(self) -> GemvLaunch:
        """A new, unstamped launch of this chain's lm_head GEMV (same tuning, grid cap and
        buffers): the chain's last kernel on its own, to time standalone."""
        max_blocks = None if self.blocks_per_sm is None else self.blocks_per_sm * device_facts()[1]
        tuning = self.kind_tunings.get("lm_head")
        return GemvLaunch(self._vectors[-1][-1], self.lm_head, self.logits,
                          options=None if tuning else self.options, tuning=tuning, max_blocks=max_blocks)

    def plans(self) -> list:
        """The :class:`~int4gemv.Plan` of each GEMV launch, in order (what each one runs)."""
        return [op.plan for op in self._ops if isinstance(op, GemvLaunch)]

    def grids(self) -> list:
        """The grid size (blocks) of each launch, in order."""
        return [op.grid[0] for op in self._ops]
