"""Experimental: the decode chain as one persistent kernel launch (plus a counter reset).

:class:`PersistentChain` runs the same chain as :class:`int4gemv.decode.chain.DecodeChain` (merged
projections; silu·mul fused into the down projection's activation staging) with
:func:`int4gemv.decode.persistent_kernel.chain_kernel`: a resident grid whose warps take a fixed
share of every phase and meet at a grid barrier between phases, each warp's first weights of the
next phase in flight while it waits. Symmetric weights only (no zero points), block sizes 32, 64
and 128, widths a multiple of 32 up to ``MAX_K``, fp16.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda

from ..backend import require_gpu
from ..device import device_facts
from .launches import KernelLaunch
from .model import check_chain
from .persistent_kernel import chain_kernel, reset_kernel
from .persistent_layout import MAX_COLS, MAX_K, PHASE_FIELDS, SLOTS, blocks_per_sm, shared_bytes
from .step import ChainStep

__all__ = ["PersistentChain", "phase_tiling"]


def phase_tiling(N: int, K: int, lanes: int, grid_warps: int) -> tuple:
    """``(cols, unroll)`` of a phase. ``cols`` (1, 2 or 4 columns per lane) gives the busiest
    warp the fewest columns (``ceil(groups / grid_warps) * cols``; the larger ``cols`` on a tie:
    fewer, larger items); ``unroll`` is the power of two of chunks a step that covers a lane's
    chunks, at most ``SLOTS // cols``. Pure."""
    slots = 32 // lanes

    def busiest(c):
        return -(-(-(-N // (slots * c))) // grid_warps) * c

    cols = min((1, 2, 4), key=lambda c: (busiest(c), -c))
    chunks = -(-(K // 32) // lanes)
    return cols, min(SLOTS // cols, 1 << (chunks - 1).bit_length())


class PersistentChain(ChainStep):
    """The chain over ``layers`` and ``lm_head`` in one persistent launch.

    Args:
        warps: warps a block, 1, 2, 4, 8 or 16 (default 16 on a GPU: one block a multiprocessor,
            its row staged once; 4 on the simulator, which runs a thread per simulated thread;
            fewer than 4 leave warps idle for the rings' shared memory,
            :func:`~.persistent_layout.blocks_per_sm`).
        blocks: grid size (default: as many as fit, :func:`~.persistent_layout.blocks_per_sm` per
            multiprocessor; 1 on the simulator, whose blocks run one after another and so cannot
            wait for each other).
        lanes: lanes per column (32 on the GPU; fewer let small test shapes take several steps).
        cols, unroll: every phase's columns per lane and chunks per step (``None``:
            :func:`phase_tiling`; ``unroll`` 1, 2 or 4 and ``cols * unroll <= SLOTS``); test hooks.
        split_phases: one launch per phase instead of one for all (a test hook: the simulator
            then runs several blocks per phase; the kernel and its counters are the same).
        timeline: run the stamped kernel: each replay leaves every block's phase stamps in
            ``stamps`` (``[phases, blocks, 3]``, :func:`int4gemv.decode.timeline.phase_spans`),
            and ``kernels`` names each phase ``(name, layer, weight_bytes)``.
    """

    def __init__(self, layers, lm_head, *, warps: int | None = None, blocks: int | None = None, lanes: int = 32,
                 cols: int | None = None, unroll: int | None = None, split_phases: bool = False,
                 timeline: bool = False):
        layers, (H, Q, KV, I) = check_chain(layers, lm_head)
        phases = [w for x in layers for w in (x.qkv, x.o, x.gate_up, x.down)] + [lm_head]
        for w in phases:
            if w.zero_points is not None:
                raise ValueError("PersistentChain supports symmetric weights only (no zero points)")
            if w.block_size not in (32, 64, 128) or w.K % 32 or w.K > MAX_K or w.dtype != "float16":
                raise ValueError(f"PersistentChain needs fp16 weights of block size 32, 64 or 128 and K a "
                                 f"multiple of 32 up to {MAX_K}; got {w}")
        for name, v, lo, hi in (("blocks", blocks, 1, None), ("cols", cols, 1, MAX_COLS),
                                ("unroll", unroll, 1, SLOTS)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi and v > hi)):
                raise ValueError(f"{name} must be None or an int in [{lo}, {hi or 'inf'}]; got {v!r}")
        if unroll is not None and (unroll & (unroll - 1) or (cols or 1) * unroll > SLOTS):
            raise ValueError(f"unroll must be a power of two with cols * unroll <= {SLOTS}; got cols={cols}, "
                             f"unroll={unroll}")
        for name, v in (("split_phases", split_phases), ("timeline", timeline)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool; got {type(v).__name__}")
        if warps is None:
            warps = 4 if config.ENABLE_CUDASIM else 16
        kernel = chain_kernel(lanes, warps, timeline)       # ValueError naming lanes or warps
        require_gpu("int4gemv.decode.PersistentChain")   # arguments first; then before any device array
        self.layers, self.lm_head, self.hidden = layers, lm_head, H
        self.merged, self.tuning = True, "persistent"
        sizes = dict(x=H, qkv=Q + 2 * KV, h=H, gu=2 * I, logits=lm_head.N)
        offsets, end = {}, 0
        for name, n in sizes.items():   # one fp16 buffer, each part 16-byte aligned
            offsets[name], end = end, end + -(-n // 8) * 8
        self.acts = cuda.to_device(np.zeros(end, np.float16))
        self.x = self.acts[:H]
        self.logits = self.acts[offsets["logits"]:offsets["logits"] + lm_head.N]
        if blocks is None:
            blocks = 1 if config.ENABLE_CUDASIM else blocks_per_sm(warps) * device_facts()[1]
        # (activation, silu, bias, output) per phase of a layer; then lm_head.
        wiring = [("x", 0, None, "qkv"), ("qkv", 0, "x", "h"), ("h", 0, None, "gu"), ("gu", 1, "h", "x")]
        table, word_parts, scale_parts, words, scales = [], [], [], 0, 0
        for i, w in enumerate(phases):
            act, silu, bias, out = wiring[i % 4] if i < len(phases) - 1 else ("x", 0, None, "logits")
            row_bytes = w.n_blocks * w.block_size // 2
            c, u = phase_tiling(w.N, w.K, lanes, blocks * warps)
            shift = (w.block_size // 32).bit_length() - 1      # log2(block size / 32)
            c = cols or min(c, SLOTS // (unroll or 1))
            u = unroll or min(u, SLOTS // c)
            table.append((words, scales, w.K, w.N, row_bytes, w.n_blocks, shift, offsets[act], silu,
                          -1 if bias is None else offsets[bias], offsets[out], c, u.bit_length() - 1))
            word_parts.append(w.packed.reshape(-1))
            scale_parts.append(w.scales.reshape(-1))
            words, scales = words + w.N * row_bytes, scales + w.scales.size
        assert len(table[0]) == len(PHASE_FIELDS)
        self.packed = cuda.to_device(np.concatenate(word_parts))
        padded = np.concatenate(scale_parts + [np.zeros(scales % 2, np.float16)])  # `scales`: their count
        self.scales = cuda.to_device(padded.view(np.uint8))    # whole 4-byte words: copied by word
        self.phases = cuda.to_device(np.array(table, np.int64))
        self.done = cuda.to_device(np.zeros(len(table) + 1, np.int32))   # + the timed-out barriers
        self.blocks, self.warps, self.lanes, self.split_phases = blocks, warps, lanes, split_phases
        kinds = ("qkv", "o", "gate_up", "down")
        self.kernels = [(kinds[i % 4], i // 4, w.nbytes) for i, w in enumerate(phases[:-1])] + \
            [("lm_head", -1, lm_head.nbytes)]
        self.stamps = cuda.to_device(np.zeros((len(table), blocks, 3) if timeline else (1, 1, 3), np.uint64))
        spans = [(p, p + 1) for p in range(len(table))] if split_phases else [(0, len(table))]
        self._ops = (KernelLaunch(reset_kernel, -(-(len(table) + 1) // 256), 256, self.done),) + tuple(
            KernelLaunch(kernel, blocks, 32 * warps, self.packed, self.scales, self.acts, self.phases,
                         self.done, first, last, self.stamps, cooperative=not split_phases,
                         shared=shared_bytes(warps))
            for first, last in spans)
        self.launches = len(self._ops)
        self.weight_bytes = sum(w.nbytes for w in phases)

    def __repr__(self):
        return (f"PersistentChain({len(self.layers)} layers, {len(self.phases)} phases, "
                f"{self.blocks} blocks of {self.warps} warps, {self.lanes} lanes per column)")

    def completed(self) -> np.ndarray:
        """Blocks that ended each phase in the last step (each equals ``blocks``)."""
        return self.done.copy_to_host()[:-1]

    def run(self, x) -> np.ndarray:
        """As :meth:`ChainStep.run`; raises ``RuntimeError`` if a block gave up waiting at a grid
        barrier (the grid was not resident at once: its logits are not the chain's)."""
        logits = super().run(x)
        timed_out = int(self.done.copy_to_host()[-1])
        if timed_out:
            raise RuntimeError(f"{timed_out} grid barrier waits of the persistent chain timed out "
                               f"({self.blocks} blocks were not resident at once)")
        return logits
