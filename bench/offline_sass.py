"""SASS of the tensor-core kernel without a GPU: Numba → PTX on the CPU, ptxas → cubin, nvdisasm.

    python -m bench.offline_sass N K M [--dtype bfloat16] [--set tiles=2 --set blocks_per_sm=2]
                                 [--sass FILE]

Prints the configuration :func:`~int4gemv.kernels.tensor_core_config.choose_config` picks for 132
SMs (with ``--set`` overrides), ``ptxas -v``'s registers and spills, the static SASS instruction
count, the number of instructions before the first weight load of the guard-free ("full") path
and the instruction mix; ``--sass`` writes the listing. Needs ``ptxas`` (CUDA 13) on ``PATH``,
``nvdisasm`` on ``PATH`` or in ``$NVDISASM``, libNVVM and libNVRTC where Numba finds them
(``CUDA_HOME``; ``LD_LIBRARY_PATH`` for libnvrtc). Numba asks NVRTC which architectures it
supports only to name the PTX target, so this module names it itself (``compute_90``): the PTX is
the same Numba emits on the H200 (same numba-cuda and libNVVM), and the same ptxas version
(13.0.88 in ``bench/results/sass-tensor-core-*-h200-*.txt``) gives the same SASS.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

__all__ = ["main", "summarize"]

#: Opcode of one SASS line (after an optional predicate).
_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)")
#: The weight loads (``ld.global.nc.L1::no_allocate``; ``.NA``) of the tensor-core kernel.
_WEIGHT_LOAD = "LDG.E.NA.128"


def summarize(sass: str) -> dict:
    """Static instruction count, the instructions before the first unpredicated weight load
    (the guard-free path's first load: the prologue, plus the guarded issue path it jumps
    over), and the 12 most frequent opcodes."""
    lines = [m for m in _OPCODE.finditer(sass)]
    ops = collections.Counter(m.group(1).split(".")[0] for m in lines)
    text = [sass[m.start():sass.find("\n", m.start())] for m in lines]
    first = next((i for i, t in enumerate(text) if _WEIGHT_LOAD in t and "@" not in t), None)
    return {"static": len(lines), "before_first_full_weight_load": first,
            "mix": dict(ops.most_common(12))}


def _compile(config, ptx_path):
    from numba import cuda, types
    from numba.cuda.cudadrv import nvrtc

    from int4gemv.kernels.tensor_core import tensor_core_kernel

    nvrtc.get_arch_option = lambda major, minor: f"compute_{major}{minor}"
    u16, u8 = types.Array(types.uint16, 1, "C"), types.Array(types.uint8, 1, "C")
    out = types.Array(types.float16 if config.dtype == "float16" else types.uint16, 1, "C")
    sig = (u16, u8, u16, u8, out, types.boolean, out, types.int64, types.int64, types.int64)
    ptx, _ = cuda.compile_ptx(tensor_core_kernel(config).py_func, sig, cc=(9, 0),
                              launch_bounds=(32 * config.warps, config.blocks_per_sm))
    with open(ptx_path, "w") as f:
        f.write(ptx)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.offline_sass", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("N", type=int)
    ap.add_argument("K", type=int)
    ap.add_argument("M", type=int)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--zero-points", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=INT",
                    help="override a TensorCoreConfig field (ints; true/false for flags)")
    ap.add_argument("--sass", help="write the SASS listing here")
    args = ap.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        ap.error("NUMBA_ENABLE_CUDASIM is set: the simulator compiles nothing; unset it "
                 "(no GPU is needed: NUMBA_CUDA_DRIVER=none is enough without one)")
    from int4gemv.kernels.tensor_core_config import TensorCoreConfig, choose_config

    config = choose_config(args.M, args.N, args.K, args.block_size, args.dtype, args.zero_points)
    fields = dict(config.__dict__)
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in fields:
            ap.error(f"--set: {name!r} is not a TensorCoreConfig field")
        fields[name] = value.lower() == "true" if value.lower() in ("true", "false") else int(value)
    config = TensorCoreConfig(**fields)
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        _compile(config, ptx)
        r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", ptx, "-o", cubin],
                           capture_output=True, text=True, check=True)
        sass = subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-c", cubin],
                              capture_output=True, text=True, check=True).stdout
    regs = re.search(r"Used (\d+) registers", r.stderr)
    spill = re.search(r"(\d+) bytes spill stores", r.stderr)
    summary = summarize(sass)
    print(config)
    print(f"registers {regs.group(1) if regs else '?'}, spill stores "
          f"{spill.group(1) if spill else '?'} B, static {summary['static']} instructions, "
          f"{summary['before_first_full_weight_load']} before the first full-path weight load")
    print("mix:", summary["mix"])
    if args.sass:
        with open(args.sass, "w") as f:
            f.write(f"# {config}\n# ptxas: {r.stderr.strip().splitlines()[-2:]}\n{sass}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
