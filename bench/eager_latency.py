"""Eager per-call cost from Python on a GPU, next to the floors and peers in the same process.

    python -m bench.eager_latency [--out DIR] [--calls 500] [--rounds 7]

Host time per call (µs) of each way to launch one cached 2048×2048 GEMV (M = 1, block size 32, no
zero points, fp16), with torch tensors and with Numba device arrays, ``out`` given:

* call forms (issue 22): ``gemv(tuning=None)`` (environment read at call time; unset here),
  ``gemv(variant="auto")``, ``gemv(tuning=Tuning(variant="auto"))``, ``gemv(tuning="auto")``,
  and ``prepare(...)()``, the floor of the call path (one bound launch);
* floors: int4gemv's ctypes ``cuLaunchKernelEx`` of an empty kernel (one array argument) and of a
  no-argument kernel, the same no-argument kernel through an 11-argument ``cuLaunchKernel`` (the
  call it replaced), Numba's own launch;
* peers (torch): torch's tinygemm INT4 (``_weight_int4pack_mm``) and ``torch.mv`` fp16.

To time another checkout's package with this script (a before/after in one process set-up),
run it as a file from that checkout: ``PYTHONPATH=$OTHER python /path/to/bench/eager_latency.py``
(it uses only the public API, ``int4gemv.benchmark.time_eager`` and ``int4gemv.launcher.bind``).

Each path is issued ``calls`` times back to back (fewer than the launch queue holds) and the
issue time per call taken (:func:`int4gemv.benchmark.time_eager`); the paths are interleaved over
``rounds`` rounds and the median over rounds reported, so drift of the host affects all alike.
Each int4gemv form is also checked once against the float64 reference (output poisoned first).
Rows follow the results schema (``/work/shared/DESIGN.md``) plus ``call`` and ``arrays``:
``us`` is the host time per call, ``floor_us`` the same arrays' ``prepare()`` call,
``tinygemm_us`` tinygemm's eager call in the same run, ``error`` the worst per-output error
relative to ``sum |a| |w|``. A cProfile of cached ``tuning=None`` calls (torch) is printed last.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics

import numpy as np

__all__ = ["main", "measure"]

N = K = 2048
BLOCK_SIZE = 32
#: Targets of issue 22 (µs over ``prepare()`` with the same arrays).
TUNING_OBJECT_OVER_PREPARE_US = 1.5
TUNING_NONE_OVER_PREPARE_US = 3.0


def _error(y, a, w):
    ref = __import__("int4gemv").reference_gemv(a, w)
    scale = np.abs(a.astype(np.float64)) @ np.abs(w.dequantize(np.float64)).T
    return float(np.max(np.abs(y.astype(np.float64) - ref) / scale))


def _forms(ig, a, w, out):
    auto = ig.Tuning(variant="auto")
    run = ig.prepare(a, w, out=out, tuning=auto)
    return {
        "gemv(tuning=None)": lambda: ig.gemv(a, w, out=out),
        'gemv(variant="auto")': lambda: ig.gemv(a, w, out=out, variant="auto"),
        'gemv(tuning=Tuning(variant="auto"))': lambda: ig.gemv(a, w, out=out, tuning=auto),
        'gemv(tuning="auto")': lambda: ig.gemv(a, w, out=out, tuning="auto"),
        "prepare()()": run,
    }


def _eleven_argument_launch(kernel):
    """A launch of the compiled no-argument ``kernel`` through ``cuLaunchKernel`` (function, grid,
    block, shared bytes, stream, parameters, extra: eleven ctypes objects, prebuilt), the call every
    int4gemv launch made before session 24, for a comparison in the same process with the
    four-argument ``cuLaunchKernelEx`` that replaced it."""
    import ctypes

    call = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    call.restype = ctypes.c_int
    (compiled,) = kernel.overloads.values()    # its one compilation (no arguments)
    handle = int(compiled._codelibrary.get_cufunc().handle)
    args = (ctypes.c_void_p(handle), *(ctypes.c_uint(v) for v in (1, 1, 1, 32, 1, 1, 0)),
            ctypes.c_void_p(0), None, None)

    def launch():
        if call(*args):
            raise RuntimeError("cuLaunchKernel failed")
    return launch


def measure(calls=500, rounds=7, runs=3, N=N, K=K) -> dict:
    """``{"rows": [...], "paths": {name: issue µs}, "profile": text}`` (see the module docstring)."""
    from numba import cuda

    import int4gemv as ig
    from int4gemv.benchmark import time_eager
    from int4gemv.launcher import bind

    rng = np.random.default_rng(0)
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), BLOCK_SIZE)
    a_h = rng.standard_normal(K).astype(np.float16)
    arrays = {"numba": (cuda.to_device(a_h), cuda.device_array(N, np.float16))}
    torch = None
    try:
        import torch

        if torch.cuda.is_available():
            arrays["torch"] = (torch.from_numpy(a_h).cuda(),
                               torch.empty(N, dtype=torch.float16, device="cuda"))
        else:
            torch = None
    except ImportError:
        torch = None

    def sync():
        cuda.synchronize()
        if torch is not None:
            torch.cuda.synchronize()

    @cuda.jit
    def empty(x):
        pass

    @cuda.jit
    def nothing():
        pass

    x = cuda.device_array(1, np.float32)
    empty[1, 32](x)
    nothing[1, 32]()
    bound_empty = bind(empty, (x,), (1, 1, 1), (32, 1, 1))
    bound_nothing = bind(nothing, (), (1, 1, 1), (32, 1, 1))
    paths = {"cuLaunchKernelEx, empty kernel (ctypes)": lambda: bound_empty.launch(0),
             "cuLaunchKernelEx, no-argument kernel (ctypes)": lambda: bound_nothing.launch(0),
             "Numba launch, empty kernel": lambda: empty[1, 32](x)}
    try:   # a comparison row: its failure is printed and the run goes on without it
        paths["cuLaunchKernel (11 arguments), no-argument kernel (ctypes)"] = _eleven_argument_launch(nothing)
    except Exception as exc:
        print(f"no cuLaunchKernel comparison row: {type(exc).__name__}: {exc}")
    checks = {}
    for kind, (a, out) in arrays.items():
        for form, fn in _forms(ig, a, w, out).items():
            paths[f"{form} [{kind}]"] = fn
            checks[(kind, form)] = (fn, out)
    if torch is not None:
        ta = torch.from_numpy(a_h).cuda()
        tw = torch.randn(N, K, dtype=torch.float16, device="cuda")
        packed = torch._convert_weight_to_int4pack(
            torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda"), 8)
        sz = (torch.rand((K // BLOCK_SIZE, N, 2), device="cuda") * 0.01).to(torch.bfloat16)
        tb = ta.to(torch.bfloat16).reshape(1, K)
        paths["torch tinygemm int4 (peer)"] = lambda: torch._weight_int4pack_mm(tb, packed, BLOCK_SIZE, sz)
        paths["torch.mv fp16 (peer)"] = lambda: torch.mv(tw, ta)
    for fn in paths.values():  # compile, bind, warm the caches
        fn()
        fn()
    sync()
    samples = {name: [] for name in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            samples[name].append(time_eager(fn, sync, calls=calls, runs=runs).issue_us)
    us = {name: statistics.median(v) for name, v in samples.items()}

    errors = {}
    for (kind, form), (fn, out) in checks.items():
        if kind == "torch":
            out.fill_(float("nan"))
            fn()
            sync()
            y = out.cpu().numpy()
        else:
            out.copy_to_device(np.full(N, np.nan, np.float16))
            fn()
            sync()
            y = out.copy_to_host()
        errors[(kind, form)] = _error(y, a_h, w)

    tiny = us.get("torch tinygemm int4 (peer)")
    rows = []
    for (kind, form), err in errors.items():
        floor = us[f"prepare()() [{kind}]"]
        rows.append(dict(kind="eager", call=form, arrays=kind, shape=f"{N}x{K}", N=N, K=K, M=1,
                         bs=BLOCK_SIZE, zp=False, dtype="float16", us=us[f"{form} [{kind}]"],
                         floor_us=floor, tinygemm_us=tiny, error=err,
                         over_prepare_us=us[f"{form} [{kind}]"] - floor,
                         spread_us=[min(samples[f"{form} [{kind}]"]), max(samples[f"{form} [{kind}]"])]))
    profile = ""
    if "torch" in arrays:
        a, out = arrays["torch"]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(5000):
            ig.gemv(a, w, out=out)
        prof.disable()
        sync()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(10)
        profile = text.getvalue()
    return {"rows": rows, "paths": us, "samples": samples, "profile": profile}


def _verdicts(rows):
    lines = []
    for r in rows:
        if r["call"].startswith("gemv(tuning=Tuning"):
            ok = r["over_prepare_us"] <= TUNING_OBJECT_OVER_PREPARE_US
            lines.append(f"{r['arrays']:6} Tuning object: {r['over_prepare_us']:+.2f} us over prepare "
                         f"(target <= +{TUNING_OBJECT_OVER_PREPARE_US}): {'holds' if ok else 'MISSED'}")
        if r["call"] == "gemv(tuning=None)":
            ok = r["over_prepare_us"] <= TUNING_NONE_OVER_PREPARE_US
            lines.append(f"{r['arrays']:6} tuning=None: {r['over_prepare_us']:+.2f} us over prepare "
                         f"(target <= +{TUNING_NONE_OVER_PREPARE_US}): {'holds' if ok else 'MISSED'}")
            if r["tinygemm_us"] is not None:
                ok = r["us"] <= r["tinygemm_us"]
                lines.append(f"{r['arrays']:6} tuning=None {r['us']:.2f} us vs tinygemm "
                             f"{r['tinygemm_us']:.2f} us: {'holds' if ok else 'MISSED'}")
    return lines


def markdown(doc) -> str:
    """The README's table of a saved run: µs per call form and array kind, over ``prepare()``,
    tinygemm in the same run, and the issue-22 verdicts."""
    lines = ["| call | arrays | µs | over `prepare()` | tinygemm µs |", "|---|---|---:|---:|---:|"]
    for r in doc["rows"]:
        tiny = "" if r["tinygemm_us"] is None else f"{r['tinygemm_us']:.2f}"
        lines.append(f"| `{r['call']}` | {r['arrays']} | {r['us']:.2f} | {r['over_prepare_us']:+.2f} | {tiny} |")
    git = doc.get("git", {}).get("commit", "?")
    lines += ["", f"{doc['device'].get('name', '?')}, commit {str(git)[:10]}, `{doc['command']}`; "
              + "; ".join(_verdicts(doc["rows"]))]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", metavar="JSON", help="print a saved run's README table; run nothing")
    p.add_argument("--out", default="bench/runs", help="folder for eager_latency.json (default: the "
                   "git-ignored bench/runs; committed results: --out bench/results)")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--shape", default=f"{N}x{K}", help="NxK (a smoke run on the simulator: 8x64)")
    args = p.parse_args(argv)
    if args.table:
        with open(args.table) as f:
            print(markdown(json.load(f)))
        return
    n, k = (int(v) for v in args.shape.split("x"))
    from numba import config

    from bench.environment import describe_run

    result = measure(calls=args.calls, rounds=args.rounds, N=n, K=k)
    doc = dict(kind="int4gemv-eager-latency",
               **describe_run(bool(config.ENABLE_CUDASIM), "bench.eager_latency", argv),
               calls=args.calls, rounds=args.rounds, rows=result["rows"], paths=result["paths"],
               samples=result["samples"])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "eager_latency.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(result["profile"])
    print(f"{'path':52} {'issue us':>9}")
    for name, value in result["paths"].items():
        print(f"{name:52} {value:9.2f}")
    print(f"\n{'call':40} {'arrays':6} {'us':>6} {'prepare':>8} {'over':>6} {'tinygemm':>9} {'error':>9}")
    for r in result["rows"]:
        tiny = "-" if r["tinygemm_us"] is None else f"{r['tinygemm_us']:.2f}"
        print(f"{r['call']:40} {r['arrays']:6} {r['us']:6.2f} {r['floor_us']:8.2f} "
              f"{r['over_prepare_us']:+6.2f} {tiny:>9} {r['error']:9.2e}")
    print("\n".join(_verdicts(result["rows"])))


if __name__ == "__main__":
    main()
