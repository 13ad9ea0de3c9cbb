"""Eager per-call cost from Python on a GPU, next to the floors and peers in the same process.

    python -m bench.eager_latency [--out DIR]

For each way of launching, ``calls`` launches are issued back to back (fewer than the launch
queue holds) and the issue time per call is taken; the median of ``runs`` such runs is reported,
with the time to completion (synchronized) beside it. Rows:

* ``cuLaunchKernel, empty kernel``: the driver's launch alone (ctypes, no Python work): the floor
  for any launch from Python on this machine.
* ``Numba launch, empty kernel``: ``kernel[grid, block](...)``.
* the same on a non-blocking stream of its own (no ordering with the legacy default stream).
* ``BoundLaunch.launch``: int4gemv's bound launch of the 2048×2048 single-warp kernel.
* ``int4gemv.gemv``: the public call on a pre-built weight with ``out`` given (a ``Tuning``
  argument, the variant keyword, then the ``INT4GEMV_SINGLE_WARP=1`` environment), on the legacy default stream and on the
  non-blocking stream; and ``int4gemv.prepare(...)``'s prepared launch called with no arguments.
* peers: ``torch.mv`` fp16 and torch's tinygemm INT4 at the same shape.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

__all__ = ["main", "measure"]


def measure(fn, calls=200, runs=7, sync=None):
    """``(issue_us, complete_us)`` per call: medians over ``runs`` runs of ``calls`` calls."""
    issue, complete = [], []
    for _ in range(runs + 1):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        issue.append((t1 - t0) / calls * 1e6)
        complete.append((t2 - t0) / calls * 1e6)
    return statistics.median(issue[1:]), statistics.median(complete[1:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for eager_latency.json")
    args = p.parse_args(argv)
    import torch
    from cuda.bindings import driver
    from numba import cuda

    import int4gemv as ig
    from int4gemv.launcher import bind

    @cuda.jit
    def empty(x):
        pass

    rng = np.random.default_rng(0)
    N = K = 2048
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32)
    a = cuda.to_device(rng.standard_normal(K).astype(np.float16))
    out = cuda.device_array(N, np.float16)
    ig.gemv(a, w, out=out, variant="single_warp")
    x = cuda.device_array(1, np.float32)
    empty[1, 32](x)
    bound_empty = bind(empty, (x,), (1, 1, 1), (32, 1, 1))
    bound_gemv = ig.prepare(a, w, out=out, tuning="single_warp").bound
    sw_tuning = ig.Tuning("single_warp")
    ta = torch.randn(K, dtype=torch.float16, device="cuda")
    tw = torch.randn(N, K, dtype=torch.float16, device="cuda")
    packed = torch._convert_weight_to_int4pack(
        torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda"), 8)
    sz = (torch.rand((K // 32, N, 2), device="cuda") * 0.01).to(torch.bfloat16)
    tb = ta.to(torch.bfloat16).reshape(1, K)
    sync = cuda.synchronize
    err, own = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuStreamCreate failed: {err!r}")
    own = int(own)

    def env_call():
        ig.gemv(a, w, out=out)

    rows = [("cuLaunchKernel, empty kernel (ctypes)", lambda: bound_empty.launch(0)),
            ("cuLaunchKernel, empty kernel, own stream", lambda: bound_empty.launch(own)),
            ("Numba launch, empty kernel", lambda: empty[1, 32](x)),
            ("BoundLaunch.launch, gemv 2048x2048", lambda: bound_gemv.launch(0)),
            ("int4gemv.gemv, tuning=Tuning('single_warp')", lambda: ig.gemv(a, w, out=out, tuning=sw_tuning)),
            ("int4gemv.gemv, variant='single_warp'", lambda: ig.gemv(a, w, out=out, variant="single_warp")),
            ("int4gemv.gemv, INT4GEMV_SINGLE_WARP=1", env_call),
            ("int4gemv.prepare(a, w, out=out, variant='single_warp')()",
             ig.prepare(a, w, out=out, variant="single_warp")),
            ("int4gemv.gemv, variant='single_warp', own stream",
             lambda: ig.gemv(a, w, out=out, variant="single_warp", stream=own)),
            ("torch.mv fp16 (peer)", lambda: torch.mv(tw, ta)),
            ("torch tinygemm int4 (peer)", lambda: torch._weight_int4pack_mm(tb, packed, 32, sz))]
    results = []
    os.environ["INT4GEMV_SINGLE_WARP"] = "1"
    try:
        for name, fn in rows:
            fn()
            issue, complete = measure(fn, sync=sync)
            results.append(dict(name=name, issue_us=issue, complete_us=complete))
    finally:
        os.environ.pop("INT4GEMV_SINGLE_WARP", None)
        driver.cuStreamDestroy(own)
    doc = dict(device=torch.cuda.get_device_name(), shape=[N, K], calls=200, runs=7,
               results=results)
    with open(os.path.join(args.out, "eager_latency.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{'launch':42} {'issue us':>9} {'to completion us':>17}")
    for r in results:
        print(f"{r['name']:42} {r['issue_us']:9.2f} {r['complete_us']:17.2f}")


if __name__ == "__main__":
    main()
