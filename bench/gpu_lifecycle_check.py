"""GPU check for lifecycle: the whole tests/lifecycle suite on the real driver, then timings.

    python3 bench/gpu_lifecycle_check.py            # suite (real driver required) + timings
    python3 bench/gpu_lifecycle_check.py --timings  # timings only
    python3 bench/gpu_lifecycle_check.py --stress --stress-seconds 12   # the real-driver stress only

The suite runs with LIFECYCLE_REQUIRE_GPU=1, so a missing GPU fails instead of skipping; it
includes ``tests/lifecycle/test_stress.py`` (8 threads for ``--stress-seconds`` of valid,
overlapping work on shared providers and streams with the real driver: every output checked,
nothing leaked). Timings:
one decode-like step of 104 int4gemv launches plus a staged input copy, eager versus one graph
replay, per launch, median of several repetitions.
"""

from __future__ import annotations

__all__ = ["main", "run_suite", "timings"]

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(256, 512), (512, 256), (384, 1024), (1024, 384)]
PER_WEIGHT = 26


def run_suite(stress_seconds: float = 12.0, only_stress: bool = False) -> int:
    env = dict(os.environ, LIFECYCLE_REQUIRE_GPU="1", LIFECYCLE_STRESS_SECONDS=str(stress_seconds))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    target = ["tests/lifecycle/test_stress.py", "-k", "real", "-s"] if only_stress else ["tests/lifecycle"]
    cmd = [sys.executable, "-m", "pytest", *target, "-v", "-rs"]
    print("$", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=env)


def timings(repeats: int = 20) -> None:
    sys.path.insert(0, str(ROOT))
    from numba import cuda

    import int4gemv
    from lifecycle.numba_glue import numba_provider

    rng = np.random.default_rng(0)
    weights = [int4gemv.quantize(rng.standard_normal((n, k)).astype(np.float32)).to_device() for n, k in SHAPES]
    inputs = [rng.standard_normal(k).astype(np.float16) for _, k in SHAPES]
    a_dev = [cuda.to_device(x) for x in inputs]
    outs = [[cuda.device_array(n, np.float16) for _ in range(PER_WEIGHT)] for n, _ in SHAPES]
    launches = len(SHAPES) * PER_WEIGHT

    with numba_provider(0) as p:
        stream = p.stream
        step = lambda: [int4gemv.gemv(a, w, out=o, stream=stream)  # noqa: E731
                        for w, a, row in zip(weights, a_dev, outs, strict=False) for o in row]
        step()
        cuda.synchronize()
        eager = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            cuda.synchronize()
            eager.append(time.perf_counter() - t0)

        def body(cap):
            for a, x in zip(a_dev, inputs, strict=False):
                cap.copy_to_device(a, cap.stage(x))
            step()

        p.record(1, body, stream=stream)
        replay = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            p.replay(1)
            p.synchronize(1)
            replay.append(time.perf_counter() - t0)
        print(f"{launches} int4gemv launches per step")
        print(f"eager : {statistics.median(eager) * 1e6 / launches:8.2f} us/launch (host-bound, incl. sync)")
        print(f"graph : {statistics.median(replay) * 1e6 / launches:8.2f} us/launch (one replay + staged copy)")
        print("counters:", p.counters)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timings", action="store_true", help="skip the test suite")
    parser.add_argument("--stress", action="store_true", help="run only the real-driver stress test")
    parser.add_argument("--stress-seconds", type=float, default=12.0, help="stress duration (8 threads)")
    args = parser.parse_args()
    if args.stress:
        return run_suite(args.stress_seconds, only_stress=True)
    rc = 0 if args.timings else run_suite(args.stress_seconds)
    timings()
    return rc


if __name__ == "__main__":
    sys.exit(main())
