"""Kernel probe on a GPU: per-tuning timings at the workload's shapes, then registers, local memory
and the SASS instruction mix of each kernel that ran. Writes ``probe.json`` and ``sass_all.txt``
under ``$OUT`` (or ``./probe_out``) and prints a short table.

    python -m bench.probe_kernels [--shapes lm_head q_proj] [--tunings 4x4,2x4] [--peers tinygemm]

Timings come from the library (:class:`int4gemv.benchmark.GemvBench`: one owned graph over
rotated weights, median of the replays), so a probe row and a ``python -m bench`` row are measured
the same way. Tunings are selected through :func:`int4gemv.benchmark.selection.gemv_options` (they
need ``int4gemv.Tuning``); the probe changes nothing inside the package. (Experiments with launch
bounds and grid caps per tuning, ``CxU@B`` and ``CxU/G`` in ``bench/NOTES.md``, were run by an
earlier version of this probe that patched the kernel module; those knobs are not offered here.)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re

__all__ = ["kernel_resources", "main"]

_OPCODE = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", re.M)


def kernel_resources(row) -> tuple:
    """``(summary, sass)`` of the compiled kernel a timed row ran: registers, local memory and
    the 25 most frequent SASS opcodes (``summary`` says why when it cannot be read)."""
    from int4gemv.kernels import default_kernel, single_warp_kernel

    try:
        if row["kernel"] == "single_warp":
            from int4gemv.kernels.single_warp import activation_mode, min_blocks

            mode = activation_mode(row["K"], row["unroll"])
            kern = single_warp_kernel(row["cols"], row["unroll"], mode, False,
                                      min_blocks(row["cols"], row["unroll"], mode))
        else:
            kern = default_kernel
        compiled = next(iter(kern.overloads.values()))
        sass = compiled.inspect_sass()
    except Exception as exc:  # noqa: BLE001 - nvdisasm missing, kernel not compiled, API changed
        return {"unavailable": repr(exc)[:300]}, ""
    ops = collections.Counter(m.group(1).split(".")[0] for m in _OPCODE.finditer(sass))
    return {"regs": compiled.regs_per_thread, "local": compiled.local_mem_per_thread,
            "ops": dict(ops.most_common(25))}, sass


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["q_proj", "k_proj", "gate_proj", "down_proj", "lm_head"])
    p.add_argument("--tunings", default="2x4,4x4,8x2", help="single-warp COLSxUNROLL list")
    p.add_argument("--peers", nargs="*", default=["tinygemm"])
    p.add_argument("--rotate-mb", type=int, default=512)
    p.add_argument("--replays", type=int, default=30)
    args = p.parse_args(argv)

    from int4gemv.benchmark import compare

    from .methods import int4gemv_methods, parse_tunings

    out_dir = os.environ.get("OUT", "probe_out")
    os.makedirs(out_dir, exist_ok=True)
    methods = int4gemv_methods(parse_tunings(args.tunings), auto=False)
    result = compare(args.shapes, methods, args.peers, replays=args.replays, rotate_bytes=args.rotate_mb * 2**20)
    rows = result.as_dicts()
    sass_info = {}
    with open(os.path.join(out_dir, "sass_all.txt"), "w") as f:
        for r in rows:
            if r["family"] != "int4gemv" or not r.get("kernel"):
                continue
            key = r["kernel"] if r["cols"] is None else f"sw{r['cols']}x{r['unroll']} K={r['K']}"
            if key not in sass_info:
                sass_info[key], sass = kernel_resources(r)
                f.write(f"==== {key}\n{sass}\n")
    with open(os.path.join(out_dir, "probe.json"), "w") as f:
        json.dump(dict(rows=rows, sass=sass_info), f, indent=1, default=str)
    for key, info in sass_info.items():
        print(key, info)
    print(result)


if __name__ == "__main__":
    main()
