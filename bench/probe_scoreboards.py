"""Which scoreboards ptxas gives 16-byte loads: straight-line, and prefetched across a loop edge.

    python -m bench.probe_scoreboards

The reproduction behind bench/NOTES.md, session 16 ("one scoreboard for every load across a loop
edge"). Compiles two small Numba kernels offline (as :mod:`bench.sass_m1` does: PTX for
``compute_90``, ``ptxas -arch=sm_90a``, ``nvdisasm -hex``) and prints each ``LDG.E.128`` with its
write scoreboard and each instruction that waits on a scoreboard (:mod:`bench.sass_control`):

* ``straight``: 8 loads, then their words hashed in load order. Seen with ptxas 13.0: the loads
  set scoreboards 2, 3, 4, 5, ... and the consumers wait on them one at a time.
* ``prefetched``: a register double buffer of two loads each (buffer B loaded and used in the
  iteration, buffer A loaded for the next one). Seen: B on scoreboards 2 and 3, A on 5; the
  fold of A waits on 5 only, but the back edge waits for the new A (a register move on it), so
  A's loads overlap only the fold of B.
* ``prefetched_inline``: the same, its hash written inline (another instruction order). Seen:
  B and the new A both on scoreboard 5, and B's consumer waiting on 5 right after the new A
  was issued, i.e. for it too: ptxas's choice is a heuristic that the code's shape tips.

Needs the tools :mod:`bench.offline_sass` names (``ptxas``, ``nvdisasm``, libNVVM); no GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

__all__ = ["main"]


def _kernels():
    from numba import cuda, uint32

    from int4gemv.kernels.vector_loads import load16

    @cuda.jit(device=True, inline=True)
    def mix(s, x):
        for y in x:
            s = ((s * uint32(2654435761)) ^ y) >> uint32(7)
        return s

    def straight(w, out, n):
        b = cuda.grid(1) * 4
        x0, x1, x2, x3 = load16(w, b), load16(w, b + 512), load16(w, b + 1024), load16(w, b + 1536)
        x4, x5 = load16(w, b + 2048), load16(w, b + 2560)
        x6, x7 = load16(w, b + 3072), load16(w, b + 3584)
        s = mix(mix(mix(mix(uint32(0), x0), x1), x2), x3)
        out[cuda.grid(1)] = mix(mix(mix(mix(s, x4), x5), x6), x7)

    def prefetched(w, out, n):
        b = cuda.grid(1) * 4
        a0, a1 = load16(w, b), load16(w, b + 512)
        s, i = uint32(0), 0
        while i < n:
            b0, b1 = load16(w, b + 1024 * (i + 1)), load16(w, b + 1024 * (i + 1) + 512)
            s = mix(mix(s, a0), a1)
            a0, a1 = load16(w, b + 1024 * (i + 2)), load16(w, b + 1024 * (i + 2) + 512)
            s = mix(mix(s, b0), b1)
            i += 2
        out[cuda.grid(1)] = s

    def prefetched_inline(w, out, n):
        # The hash is written out twice on purpose: through a device function (as `prefetched`
        # does) ptxas kept the buffers apart; this shape is the one that shares scoreboard 5.
        t = cuda.grid(1)
        base = t * 4
        a0 = load16(w, base)
        a1 = load16(w, base + 512)
        s = uint32(0)
        i = 0
        while i < n:
            b0 = load16(w, base + 1024 * (i + 1))
            b1 = load16(w, base + 1024 * (i + 1) + 512)
            for x in (a0, a1):
                for y in x:
                    s = (s * uint32(2654435761)) ^ y
                    s = (s >> uint32(7)) + y * uint32(3)
            a0 = load16(w, base + 1024 * (i + 2))
            a1 = load16(w, base + 1024 * (i + 2) + 512)
            for x in (b0, b1):
                for y in x:
                    s = (s * uint32(2654435761)) ^ y
                    s = (s >> uint32(7)) + y * uint32(3)
            i += 2
        out[t] = s

    return {"straight": straight, "prefetched": prefetched, "prefetched_inline": prefetched_inline}


def main(argv=None) -> int:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        print("NUMBA_ENABLE_CUDASIM is set: the simulator compiles nothing; unset it", file=sys.stderr)
        return 2
    from numba import cuda, types
    from numba.cuda.cudadrv import nvrtc

    from bench.sass_control import annotate

    nvrtc.get_arch_option = lambda major, minor: f"compute_{major}{minor}"
    A = types.Array(types.uint32, 1, "C")
    for name, fn in _kernels().items():
        ptx, _ = cuda.compile_ptx(fn, (A, A, types.int64), cc=(9, 0))
        with tempfile.TemporaryDirectory() as tmp:
            p, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
            with open(p, "w") as f:
                f.write(ptx)
            subprocess.run([os.environ.get("PTXAS", "ptxas"), "-arch=sm_90a", p, "-o", cubin],
                           check=True)
            listing = subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-hex", "-c", cubin],
                                     capture_output=True, text=True, check=True).stdout
        print(f"== {name}")
        for offset, control, text in annotate(listing):
            if control is None:
                print(f"{offset}:")
            elif text.startswith("LDG.E.128") or control.wait:
                print(f"{offset} {control}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
