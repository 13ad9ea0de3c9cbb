"""``python -m bench`` without a GPU: Numba's CUDA simulator, tiny sizes, timing nothing.

Every int4gemv method the GPU run measures is checked once at a tiny shape through the same
library call as on the GPU (:class:`int4gemv.benchmark.GemvBench`), and the decode step of
:data:`int4gemv.benchmark.workloads.SIM_WORKLOAD` is captured, replayed and released through
lifecycle's simulated driver. The document has the GPU run's structure with every timing field
``None`` and ``"timed": false``; peers are listed as not measured, with the reason (torch missing: what to install).
"""

from __future__ import annotations

from int4gemv.benchmark.peers import available_peers
from int4gemv.benchmark.workloads import SIM_WORKLOAD, Shape

from .decode_step import run_decode_step
from .kernels import measure_shape
from .methods import int4gemv_methods
from .progress import Progress

__all__ = ["SIM_SHAPE", "SIM_TUNINGS", "run_simulated"]

SIM_SHAPE = Shape(("tiny",), 8, 32, 1)
SIM_TUNINGS = [(8, 1)]   # one tuned variant (one block: cheap)


def run_simulated(options, peers) -> dict:
    """Rows and decode step on the simulator; ``peers`` are only listed (not run)."""
    methods = int4gemv_methods(SIM_TUNINGS, auto=False)
    with Progress(len(methods) + 2, "bench (simulator)") as progress:
        rows = measure_shape(SIM_SHAPE, methods, [], replays=1, rotate_bytes=1, progress=progress)
        step = None
        if not options.no_decode_step:
            step = run_decode_step(SIM_WORKLOAD, variants=("default",), simulated=True,
                                   on_config=progress.step)
    notes = ["simulator: kernels ran at tiny sizes for correctness only; nothing was timed"]
    if options.shapes:
        notes.append(f"--shapes {' '.join(options.shapes)} ignored on the simulator (tiny shapes only)")
    return {
        "timed": False,
        "rows": rows,
        "decode_step": step,
        "copy_bandwidth_gbs": None,
        "peers": {name: {"available": False, "reason": why if not ok else "not run on the simulator (timed on a GPU)",
                         "description": peers[name].description}
                  for name, (ok, why) in available_peers(list(peers)).items()},
        "workload": {"name": SIM_WORKLOAD["name"], "block_size": 32},
        "notes": notes,
    }
