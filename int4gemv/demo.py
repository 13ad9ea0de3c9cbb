"""The main job: quantize, run both tilings, compare with the float64 reference, explain.

    int4gemv-demo            (or: python -m int4gemv.demo)

With no NVIDIA GPU on the machine it runs on Numba's CUDA simulator at small shapes, and says so.
"""

from __future__ import annotations

__all__ = ["main"]

import os
import sys


def _use_simulator_if_no_gpu() -> bool:
    if "NUMBA_ENABLE_CUDASIM" not in os.environ and not os.path.exists("/dev/nvidiactl"):
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def main(argv=None) -> int:
    simulated = _use_simulator_if_no_gpu()
    import numpy as np
    from numba import cuda

    import int4gemv as ig

    if simulated:
        print("No NVIDIA GPU here: running on Numba's CUDA simulator at small shapes "
              "(NUMBA_ENABLE_CUDASIM=1); nothing is timed.")
        N, K = 12, 128
    else:
        print(f"GPU: {cuda.get_current_device().name}")
        N, K = 16384, 2048  # a decode-size projection; the float64 reference stays small
    rng = np.random.default_rng()
    w = ig.quantize((rng.standard_normal((N, K)) * 0.02).astype(np.float32), block_size=32)
    a = rng.standard_normal(K).astype(np.float16)
    print(f"weight: {w}")
    ref = ig.reference_gemv(a, w)
    worst = 0.0
    for variant in ("default", "single_warp"):
        y = ig.gemv(a, w, variant=variant).astype(np.float64)
        err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
        worst = max(worst, err)
        print(f"\n{variant}: relative error vs float64 reference = {err:.2e}")
        print(ig.explain(a, w, variant=variant))
    print("\nwith the environment as it is now (variant=None):")
    print(ig.explain(a, w))
    ok = worst <= 2e-3
    print(f"\n{'OK' if ok else 'FAILED'}: worst relative error {worst:.2e} (limit 2e-3)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
