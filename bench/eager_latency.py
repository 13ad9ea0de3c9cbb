"""Eager per-call cost from Python on a GPU, next to the floors and peers in the same process.

    python -m bench.eager_latency [--out DIR]

For each way of launching, ``calls`` launches are issued back to back (fewer than the launch
queue holds) and the issue time per call is taken; the median of ``runs`` such runs is reported,
with the time to completion (synchronized) beside it (:func:`int4gemv.benchmark.time_eager`). Rows:

* ``cuLaunchKernel, empty kernel``: the driver's launch alone (int4gemv's ctypes launcher, no
  Python work): the floor for any launch from Python on this machine; also on a stream of its own.
* ``Numba launch, empty kernel``: ``kernel[grid, block](...)``.
* ``int4gemv.gemv``: the public call on a pre-built 2048×2048 weight with ``out`` given, on the
  legacy default stream and on a non-blocking stream; with the environment as the caller set it;
  and ``int4gemv.prepare(...)``'s prepared launch called with no arguments.
* peers (with ``int4gemv[peers]``): ``torch.mv`` fp16 and torch's tinygemm INT4 at the same shape.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

__all__ = ["main", "rows"]

N = K = 2048


def rows(calls=200, runs=7) -> list:
    """``[{name, issue_us, complete_us}]`` for every launch path this machine can run."""
    from numba import cuda

    import int4gemv as ig
    from int4gemv.benchmark import time_eager
    from int4gemv.benchmark.peers import available_peers
    from int4gemv.benchmark.selection import gemv_options
    from int4gemv.launcher import bind

    @cuda.jit
    def empty(x):
        pass

    rng = np.random.default_rng(0)
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32)
    a = cuda.to_device(rng.standard_normal(K).astype(np.float16))
    out = cuda.device_array(N, np.float16)
    sw = gemv_options("single_warp")
    ig.gemv(a, w, out=out, **sw)
    x = cuda.device_array(1, np.float32)
    empty[1, 32](x)
    bound_empty = bind(empty, (x,), (1, 1, 1), (32, 1, 1))
    own = cuda.stream()
    handle = int(own.handle.value) if hasattr(own.handle, "value") else int(own.handle)
    paths = [("cuLaunchKernel, empty kernel (ctypes)", lambda: bound_empty.launch(0)),
             ("cuLaunchKernel, empty kernel, own stream", lambda: bound_empty.launch(handle)),
             ("Numba launch, empty kernel", lambda: empty[1, 32](x)),
             ("int4gemv.gemv, single_warp", lambda: ig.gemv(a, w, out=out, **sw)),
             ("int4gemv.gemv, environment as set", lambda: ig.gemv(a, w, out=out)),
             ("int4gemv.prepare(a, w, out=out, single_warp)()", ig.prepare(a, w, out=out, **sw)),
             ("int4gemv.gemv, single_warp, own stream", lambda: ig.gemv(a, w, out=out, stream=handle, **sw))]
    status = available_peers(["torch.mv", "tinygemm"])
    if all(ok for ok, _ in status.values()):
        import torch

        ta = torch.randn(K, dtype=torch.float16, device="cuda")
        tw = torch.randn(N, K, dtype=torch.float16, device="cuda")
        packed = torch._convert_weight_to_int4pack(
            torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda"), 8)
        sz = (torch.rand((K // 32, N, 2), device="cuda") * 0.01).to(torch.bfloat16)
        tb = ta.to(torch.bfloat16).reshape(1, K)
        paths += [("torch.mv fp16 (peer)", lambda: torch.mv(tw, ta)),
                  ("torch tinygemm int4 (peer)", lambda: torch._weight_int4pack_mm(tb, packed, 32, sz))]
    results = []
    for name, fn in paths:
        fn()
        t = time_eager(fn, cuda.synchronize, calls=calls, runs=runs)
        results.append(dict(name=name, issue_us=t.issue_us, complete_us=t.complete_us))
    results += [dict(name=f"{peer} (peer)", skipped=why) for peer, (ok, why) in status.items() if not ok]
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for eager_latency.json")
    args = p.parse_args(argv)
    from numba import cuda

    results = rows()
    name = cuda.get_current_device().name
    doc = dict(device=name.decode() if isinstance(name, bytes) else name, shape=[N, K], calls=200, runs=7,
               results=results)
    with open(os.path.join(args.out, "eager_latency.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{'launch':48} {'issue us':>9} {'to completion us':>17}")
    for r in results:
        if "skipped" in r:
            print(f"{r['name']:48} skipped: {r['skipped']}")
        else:
            print(f"{r['name']:48} {r['issue_us']:9.2f} {r['complete_us']:17.2f}")


if __name__ == "__main__":
    main()
