"""The decode step: a data-dependent chain of INT4 GEMVs, eager or as a lifecycle-owned graph.

One concept per module:

* :mod:`.model` — what the chain computes: :class:`ChainShape`, :class:`LayerWeights`,
  :func:`random_chain`, the float64 truth :func:`reference_logits` and its :func:`tolerance`;
* :mod:`.chain` — :class:`DecodeChain`, the step as prepared GEMV launches (merged or separate
  projections, one of :data:`TUNINGS`);
* :mod:`.step` — :class:`ChainStep` (eager ``run`` and ``capture``) and :class:`CapturedChain`;
* :mod:`.launches` — the step's operations: :class:`GemvLaunch`, :class:`KernelLaunch`;
* :mod:`.streams` — how operations reach a stream (GPU or the simulated driver);
* :mod:`.silu_mul` — the element-wise ``silu(g)·u`` kernel;
* :mod:`.split_k`, :mod:`.split_k_kernel` — the down projection with K split over a block's
  warps (all of K in flight before the dependency wait), optionally with silu·mul fused in;
* :mod:`.stamps`, :mod:`.timeline` — per-block ``%globaltimer`` stamps and the per-kernel
  timeline of a replayed step;
* :mod:`.persistent`, :mod:`.persistent_kernel`, :mod:`.persistent_layout`, :mod:`.grid_barrier` —
  the experimental one-launch chain, its geometry and the barrier between its phases.

Importing this package imports Numba but touches no GPU.
"""

from .chain import TUNINGS, DecodeChain, launch_options
from .model import (ChainShape, LayerWeights, check_chain, random_chain, reference_logits,
                    relative_error, tolerance)
from .persistent import PersistentChain
from .step import CapturedChain, ChainStep
from .launches import GemvLaunch, KernelLaunch
from .split_k import SplitK, SplitKLaunch
from .streams import DeviceStreams, SimulatedStreams

__all__ = ["DecodeChain", "TUNINGS", "launch_options", "ChainShape", "LayerWeights", "check_chain",
           "random_chain", "reference_logits", "relative_error", "tolerance", "PersistentChain",
           "CapturedChain", "ChainStep", "DeviceStreams", "GemvLaunch", "KernelLaunch", "SimulatedStreams",
           "SplitK", "SplitKLaunch"]
