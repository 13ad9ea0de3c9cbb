"""``python -m bench`` without a GPU: Numba's CUDA simulator, tiny sizes, timing nothing.

Every int4gemv method the GPU run measures is launched once at a tiny shape and checked against
:func:`int4gemv.reference_gemv`, and the decode step of :data:`bench.workloads.SIM_WORKLOAD` is
captured, replayed and released through lifecycle's simulated driver. The document has the GPU
run's structure with every timing field absent and ``"timed": false``; peers are listed as not
measured (they need CUDA in torch).
"""

from __future__ import annotations

import numpy as np

from .decode_step import run_decode_step
from .device_weights import relative_error
from .kernels_run import REL_ERR_OK
from .methods import int4gemv_methods
from .progress import Progress
from .workloads import SIM_WORKLOAD, Shape, weight_bytes

__all__ = ["SIM_SHAPE", "SIM_TUNINGS", "run_simulated"]

SIM_SHAPE = Shape(("tiny",), 8, 32, 1)
SIM_TUNINGS = [(8, 1)]   # one tuned variant, through the environment controls (one block: cheap)


def _row(shape, method, seed):
    import int4gemv

    rng = np.random.default_rng(seed)
    w = int4gemv.quantize((rng.standard_normal((shape.N, shape.K)) * 0.05).astype(np.float32), 32)
    a = (rng.standard_normal(shape.K) * 0.5).astype(np.float16)
    with method.env():
        plan = int4gemv.explain(a, w, variant=method.variant)
        y = int4gemv.gemv(a, w, variant=method.variant)
    err = relative_error(y, int4gemv.reference_gemv(a, w))
    written = bool(np.all(np.isfinite(y)))
    return dict(shape=shape.label, names=list(shape.names), N=shape.N, K=shape.K, merged=False, per_step=1,
                bytes=weight_bytes(shape.N, shape.K), family="int4gemv", method=method.name,
                variant=method.variant, kernel=plan.kernel, cols=plan.cols, unroll=plan.unroll,
                resident=getattr(plan, "resident", None), grid=list(plan.grid), rel_err=err,
                all_written=written, ok=written and err <= REL_ERR_OK)


def run_simulated(options, peers) -> dict:
    """Rows and decode step on the simulator; ``peers`` are only listed (not run)."""
    methods = int4gemv_methods(SIM_TUNINGS, auto=False)
    rows = []
    with Progress(len(methods) + 2, "bench (simulator)") as progress:
        for i, method in enumerate(methods):
            progress.step(f"{SIM_SHAPE.label} {method.name}")
            rows.append(_row(SIM_SHAPE, method, seed=i))
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
        "peers": {name: {"available": False, "reason": "not run on the simulator (needs CUDA in torch)",
                         "description": p.description} for name, p in peers.items()},
        "workload": {"name": SIM_WORKLOAD["name"], "block_size": 32},
        "notes": notes,
    }
