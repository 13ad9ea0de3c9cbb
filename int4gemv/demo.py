"""The main job: quantize, run both tilings, compare with the float64 reference, explain, time.

    int4gemv-demo [--seed N]        (or: python -m int4gemv.demo)

With no NVIDIA GPU on the machine it runs on Numba's CUDA simulator at small shapes, and says so.
The weight and input are drawn from a seeded generator (``--seed``, default 0), so two runs print
the same numbers (all but the measured time on a GPU); every warning raised along the way is
printed once, at the end.
"""

from __future__ import annotations

__all__ = ["main"]

import argparse
import sys
import warnings


def _use_simulator_if_no_gpu() -> bool:
    from .backend import gpu_present, simulator_selected, use_simulator

    if not simulator_selected() and not gpu_present():
        use_simulator()
    return simulator_selected()


def _show(plan, notes: list) -> None:
    """Print ``plan`` without its warning lines; its warnings join ``notes`` (printed once, last)."""
    notes += [f"RuntimeWarning: {w}" for w in plan.warnings]
    print("\n".join(line for line in str(plan).splitlines() if not line.startswith("warning  :")))


def _job(seed: int, simulated: bool, notes: list) -> bool:
    import numpy as np
    from numba import cuda

    import int4gemv as ig
    from int4gemv.benchmark import time_gemv

    if simulated:
        print("No NVIDIA GPU here: running on Numba's CUDA simulator at small shapes "
              "(NUMBA_ENABLE_CUDASIM=1); nothing is timed.")
        N, K = 12, 128
    else:
        print(f"GPU: {cuda.get_current_device().name}")
        N, K = 16384, 2048  # a decode-size projection; the float64 reference stays small
    rng = np.random.default_rng(seed)
    w = ig.quantize((rng.standard_normal((N, K)) * 0.02).astype(np.float32), block_size=32)
    a = rng.standard_normal(K).astype(np.float16)
    print(f"weight: {w} (seed {seed})")
    ref = ig.reference_gemv(a, w)
    worst = 0.0
    for variant in ("default", "single_warp"):
        y = ig.gemv(a, w, variant=variant).astype(np.float64)
        err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
        worst = max(worst, err)
        print(f"\n{variant}: relative error vs float64 reference = {err:.2e}")
        _show(ig.explain(a, w, variant=variant), notes)
    print("\nwith the environment as it is now (variant=None):")
    _show(ig.explain(a, w), notes)
    print("\ntiming (int4gemv.benchmark.time_gemv):")
    print(time_gemv(w, tuning="single_warp", seed=seed))
    ok = worst <= 2e-3
    print(f"\n{'OK' if ok else 'FAILED'}: worst relative error {worst:.2e} (limit 2e-3)")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="int4gemv-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the weight and input (default 0)")
    args = parser.parse_args(argv)
    simulated = _use_simulator_if_no_gpu()
    notes: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = _job(args.seed, simulated, notes)
    seen = dict.fromkeys(notes + [f"{w.category.__name__}: {w.message}" for w in caught])
    if seen:
        print("\nwarnings (each once):")
        for message in seen:
            print(f"  {message}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
