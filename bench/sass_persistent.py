"""SASS of the persistent chain kernel without a GPU (as :mod:`bench.offline_sass` does for the
tensor-core kernel): registers, shared memory, and what the item loop waits on.

    python -m bench.sass_persistent [--lanes 32] [--warps 4] [--timed] [--sass FILE]

Prints ``ptxas -v``'s registers, spills and shared memory, the static instruction count and mix,
the ``cp.async`` instructions (``LDGSTS``, the group commit ``LDGDEPBAR`` and the group waits
``DEPBAR``) and every ``CALL`` (a 64-bit division or the slow path of a float division: ptxas
waits for every load in flight before one); ``--sass`` writes the listing with each
instruction's control code (:mod:`bench.sass_control`). Compiled by
:func:`bench.probe_ptx.ptx_to_sass`, with the tools :mod:`bench.offline_sass` names (``ptxas``,
``nvdisasm``, ``CUDA_HOME``); ``NUMBA_ENABLE_CUDASIM`` must be unset.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile

from bench.offline_sass import summarize
from bench.probe_ptx import ptx_to_sass
from bench.sass_control import annotate

__all__ = ["main"]


def _sass(lanes, warps, timed, path):
    """``(ptxas report lines, nvdisasm -hex listing)`` of the kernel, the listing also at ``path``."""
    import numba.cuda.dispatcher as dispatcher
    from numba import types

    from int4gemv.decode.persistent_kernel import chain_kernel
    from int4gemv.decode.persistent_layout import blocks_per_sm

    class Hopper:   # what Numba asks of the current device while it types the kernel
        compute_capability = (9, 0)

    dispatcher.get_current_device = Hopper
    u8, f16 = types.Array(types.uint8, 1, "C"), types.Array(types.float16, 1, "C")
    sig = (u8, u8, f16, types.Array(types.int64, 2, "C"), types.Array(types.int32, 1, "C"),
           types.int64, types.int64, types.Array(types.uint64, 3, "C"))
    return ptx_to_sass(chain_kernel(lanes, warps, timed).py_func, sig, 32 * warps, blocks_per_sm(warps),
                       path, hex=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sass_persistent", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lanes", type=int, default=32)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--timed", action="store_true", help="the stamped kernel")
    ap.add_argument("--sass", help="write the annotated listing here")
    args = ap.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        ap.error("NUMBA_ENABLE_CUDASIM is set: the simulator compiles nothing; unset it")
    with tempfile.TemporaryDirectory() as tmp:
        report, listing = _sass(args.lanes, args.warps, args.timed, os.path.join(tmp, "k.sass"))
    rows = annotate(listing)
    texts = [text for _, control, text in rows if control is not None]
    info = " ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores|\d+ bytes smem", "\n".join(report)))
    print(f"chain_kernel(lanes={args.lanes}, warps={args.warps}, timed={args.timed}): {info}")
    print("mix:", summarize(listing)["mix"])
    asyncs = collections.Counter(t.split()[0] for t in texts if re.match(r"(LDGSTS|LDGDEPBAR|DEPBAR)", t))
    print("cp.async:", dict(asyncs), "| waits:", sorted({t for t in texts if t.startswith("DEPBAR")}))
    print("calls:", collections.Counter(t for t in texts if t.startswith("CALL")) or "none")
    if args.sass:
        with open(args.sass, "w") as f:
            f.write("\n".join(f"{o} {c}  {t}" if c else f"{o}:" for o, c, t in rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
