"""Experimental: the decode chain as one persistent kernel launch (plus a counter reset).

:class:`PersistentChain` runs the same chain as :class:`int4gemv.decode.chain.DecodeChain` (merged
projections; silu·mul fused into the down projection's activation load) with
:func:`int4gemv.decode.persistent_kernel.chain_kernel`: its blocks claim the step's work items in
order and synchronize through per-phase completion counters. It shares the eager and captured run
modes of :class:`int4gemv.decode.step.ChainStep`. Symmetric weights only (no zero points); the kernel
uses the float32 nibble path and reloads activations from L2 per column, so it is a correctness
and scheduling experiment, not a tuned kernel.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda

from ..backend import require_gpu
from .model import check_chain
from .persistent_kernel import PHASE_FIELDS, WARPS, chain_kernel, reset_kernel
from .step import ChainStep
from .launches import KernelLaunch

__all__ = ["PersistentChain"]

BLOCKS_PER_SM = 8


class PersistentChain(ChainStep):
    """The chain over ``layers`` and ``lm_head`` in one persistent launch.

    Args:
        blocks: grid size (default: ``BLOCKS_PER_SM`` per multiprocessor, 2 on the simulator; with
            ``max_items``, just enough blocks to cover the step).
        max_items: most work items one block takes (0: no limit). A test hook: on the simulator,
            whose blocks run one after another, a small limit makes several blocks share a phase.
    """

    def __init__(self, layers, lm_head, *, blocks: int | None = None, max_items: int = 0):
        layers, (H, Q, KV, I) = check_chain(layers, lm_head)
        phases = [w for x in layers for w in (x.qkv, x.o, x.gate_up, x.down)] + [lm_head]
        if any(w.zero_points is not None for w in phases):
            raise ValueError("PersistentChain supports symmetric weights only (no zero points)")
        for name, v in (("blocks", blocks), ("max_items", max_items)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (name == "blocks")):
                raise ValueError(f"{name} must be a {'positive' if name == 'blocks' else 'non-negative'} int; got {v!r}")
        require_gpu("int4gemv.decode.PersistentChain")   # arguments first; then before any device array
        self.layers, self.lm_head, self.hidden = layers, lm_head, H
        self.merged, self.tuning = True, "persistent"
        offsets = dict(x=0, qkv=H, h=H + Q + 2 * KV)  # one fp16 buffer: x | qkv | h | gu | logits
        offsets["gu"] = offsets["h"] + H
        offsets["logits"] = offsets["gu"] + 2 * I
        self.acts = cuda.to_device(np.zeros(offsets["logits"] + lm_head.N, np.float16))
        self.x = self.acts[:H]
        self.logits = self.acts[offsets["logits"]:]
        # (activation, silu, bias, output) per phase of a layer; then lm_head.
        wiring = [("x", 0, None, "qkv"), ("qkv", 0, "x", "h"), ("h", 0, None, "gu"), ("gu", 1, "h", "x")]
        table, word_parts, scale_parts, words, scales, item = [], [], [], 0, 0, 0
        for i, w in enumerate(phases):
            act, silu, bias, out = wiring[i % 4] if i < len(phases) - 1 else ("x", 0, None, "logits")
            stride = w.n_blocks * w.block_size // 8
            items = -(-w.N // WARPS)
            table.append((words, scales, w.K, w.N, stride, w.block_size, offsets[act], silu,
                          -1 if bias is None else offsets[bias], offsets[out], item, items))
            word_parts.append(w.packed.reshape(-1).view(np.uint32))
            scale_parts.append(w.scales.reshape(-1))
            words, scales, item = words + w.N * stride, scales + w.scales.size, item + items
        assert len(table[0]) == len(PHASE_FIELDS)
        self.total_items = item
        self.words = cuda.to_device(np.concatenate(word_parts))
        self.scales = cuda.to_device(np.concatenate(scale_parts))
        self.phases = cuda.to_device(np.array(table, np.int64))
        self.done = cuda.to_device(np.zeros(len(table), np.int32))
        self.next_item = cuda.to_device(np.zeros(1, np.int32))
        if blocks is None and max_items:
            blocks = -(-item // max_items)
        elif blocks is None:
            blocks = 2 if config.ENABLE_CUDASIM else BLOCKS_PER_SM * cuda.get_current_device().MULTIPROCESSOR_COUNT
        if max_items and blocks * max_items < item:
            raise ValueError(f"blocks x max_items = {blocks * max_items} cannot cover the step's {item} items")
        self.blocks, self.max_items = blocks, max_items
        self._ops = (KernelLaunch(reset_kernel, -(-len(table) // 256), 256, self.done, self.next_item),
                     KernelLaunch(chain_kernel, blocks, 32 * WARPS, self.words, self.scales, self.acts,
                                  self.phases, self.done, self.next_item, self.total_items, max_items))
        self.launches = len(self._ops)
        self.weight_bytes = sum(w.nbytes for w in phases)

    def __repr__(self):
        return (f"PersistentChain({len(self.layers)} layers, {len(self.phases)} phases, "
                f"{self.total_items} items, {self.blocks} blocks)")

    def completed(self) -> np.ndarray:
        """Items completed per phase in the last step (each equals the phase's item count)."""
        return self.done.copy_to_host()
