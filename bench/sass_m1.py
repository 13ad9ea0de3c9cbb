"""M = 1 kernels' SASS without a GPU: steady-state loop cost and bytes in flight per SM.

    python -m bench.sass_m1 [--out FILE]

Compiles, on the CPU (as :mod:`bench.offline_sass` does: Numba → PTX for ``compute_90``, ptxas
13 ``-arch=sm_90a -v``, ``nvdisasm``), the default tiling's lm_head (151936 × 2048) M = 1
configurations, the single-warp kernel's 4x4 and the ``stream`` floor kernel (16-byte loads, 4
in flight, 256 threads, 8 blocks/SM), and prints one row each: registers, spill stores and the
stack frame (local memory: spills and local arrays not promoted to registers), the
instructions of one pass of the guard-free path of the innermost loop that holds the weight
loads (:func:`steady_path`; per weight element: divided by the elements a lane reads in that
pass), the 16-byte loads a lane issues in that pass before it first uses a loaded register
(:func:`loads_before_first_use`), the weight bytes in flight per SM that gives (16 B ×
weight loads × threads × blocks per SM), and those loads' write scoreboards
(:func:`weight_scoreboards`: one scoreboard means the step is consumed only once all of it has
landed). Needs the same tools as :mod:`bench.offline_sass`
(``ptxas`` on ``PATH`` or ``$PTXAS``, ``nvdisasm`` on ``PATH`` or ``$NVDISASM``, ``CUDA_HOME``).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

from bench.sass_cases import CASES, K, case_config
from bench.sass_control import annotate

__all__ = ["parse", "steady_path", "loads_before_first_use", "is_weight_load", "weight_scoreboards",
           "measure", "CASES", "main"]

_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)\s*([^;]*);")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_REG = re.compile(r"\bR(\d+)(\.64)?\b")
#: Registers a load of this many bits writes.
_LOAD_REGS = {"128": 4, "64": 2}
#: sm_90 register file per SM, and the per-thread allocation granule (registers).
REGISTERS_PER_SM, REGISTER_GRANULE = 65536, 8
#: INT4 elements in a default-tiling chunk (16 bytes) and in a single-warp uint64 word.
ELEMENTS_PER_CHUNK, ELEMENTS_PER_U64 = 32, 16


def is_weight_load(x) -> bool:
    """A 16- or 8-byte global load (the kernels' weight loads; the default tiling's activation
    loads are 16-byte too, but issued in the fold, after the first use)."""
    return x[2].startswith("LDG") and (".128" in x[2] or ".64" in x[2])


def parse(sass: str) -> list:
    """The instructions of a listing as ``(label or None, predicate, opcode, operands)``, a
    label attached to the instruction that follows it."""
    out, label = [], None
    for raw in sass.splitlines():
        m = _LABEL.match(raw.strip())
        if m:
            label = m.group(1)
            continue
        m = _LINE.search(raw)
        if m:
            out.append((label, (m.group(1) or "").strip(), m.group(2), m.group(3).strip()))
            label = None
    return out


def _target(ins):
    m = _TARGET.search(ins[3])
    return m.group(1) if m else None


def steady_path(ins: list, is_weight_load, outer: bool = False) -> list:
    """Indices of one pass of the innermost loop (a backward ``BRA`` with no loop holding weight
    loads inside it) holding the most
    instructions for which ``is_weight_load(instruction)``, a loop that reads shared memory
    first (the default tiling's bf16 and mma kernels hold one step loop per fold, and the GPU
    runs the staged one on lm_head) (``outer``: of the smallest loop
    around that one, its inner loop passed once), on its guard-free path: of each warp-uniform
    if/else (``@P BRA else; then; BRA join; else: ...; join:``) the side with fewer FFMA (bf16:
    the staged fp16 fold, not the float32 one), then more unpredicated weight loads (no
    predicated tail loads), then the shorter (no clamps); an if without else is counted as taken
    (its body issued) unless its body holds a barrier (``BAR``: bf16's once-per-block activation
    stage) and not the innermost loop's back edge; branches leaving the loop (the divergent-shuffle fallback) as not taken."""
    where = {ins[i][0]: i for i in range(len(ins)) if ins[i][0]}
    loops = []
    for i, x in enumerate(ins):
        t = _target(x)
        if x[2].startswith("BRA") and t in where and where[t] <= i:
            body = range(where[t], i + 1)
            staged = any(ins[j][2].startswith("LDS") for j in body)
            loops.append((staged, sum(map(is_weight_load, (ins[j] for j in body))), -len(body), body))
    # innermost: no loop with weight loads inside (a back edge around the stage fill and the
    # step loop, as the mma kernel's divergent-shuffle fallback makes, counts the fill's loads)
    inside = lambda a, b: a is not b and b.start <= a.start and a.stop <= b.stop  # noqa: E731
    innermost = [x for x in loops if not any(y[1] and inside(y[3], x[3]) for y in loops)]
    *_, body = max(innermost or loops)
    inner = body
    if outer:
        around = [b for *_, b in loops if b.start <= body.start and body.stop <= b.stop
                  and len(b) > len(body)]
        body = min(around, key=len) if around else body
    lo, hi = body.start, body.stop

    def key(path):
        return (sum(1 for j in path if ins[j][2].startswith("FFMA")),
                -sum(1 for j in path if is_weight_load(ins[j]) and not ins[j][1]), len(path))

    def walk(a, b):
        path, i = [], a
        while i < b:
            x = ins[i]
            t = _target(x)
            path.append(i)
            if x[2] == "BRA" and t in where and i < where[t] < b:
                j = where[t]
                before = ins[j - 1]
                if x[1] and before[2] == "BRA" and not before[1] and _target(before) in where \
                        and j < where[_target(before)] <= b:
                    k = where[_target(before)]
                    then, other = walk(i + 1, j - 1), walk(j, k)
                    path += min([then + [j - 1], other], key=key)
                    i = k
                    continue
                once = any(ins[q][2].startswith("BAR") for q in range(i + 1, j)) \
                    and not i < inner.stop - 1 < j       # a stage, not the loop that holds it
                if not x[1] or once:
                    i = j
                    continue
            i += 1
        return path

    return walk(lo, hi)


def _width(op: str) -> str:
    return next((w for w in _LOAD_REGS if f".{w}" in op), "32")


def _loads_in_flight(ins: list, path: list) -> list:
    """Indices of the global loads issued along ``path`` before the first instruction that
    reads a register one of them wrote (the loads in flight together)."""
    pending, issued = set(), []
    for i in path:
        _, _, op, operands = ins[i]
        regs = [(int(r), bool(w)) for r, w in _REG.findall(operands)]
        srcs = regs if op.startswith("ST") else regs[1:]
        used = set()
        for r, wide in srcs:
            used |= {r, r + 1} if wide else {r}
        if used & pending:
            break
        if op.startswith("LDG") and regs:
            pending |= set(range(regs[0][0], regs[0][0] + _LOAD_REGS.get(_width(op), 1)))
            issued.append(i)
    return issued


def loads_before_first_use(ins: list, path: list) -> collections.Counter:
    """Global loads (``LDG``, by width) issued along ``path`` before the first instruction that
    reads a register one of them wrote (the loads in flight together)."""
    return collections.Counter(_width(ins[i][2]) for i in _loads_in_flight(ins, path))


def weight_scoreboards(ins: list, controls: list, path: list) -> list:
    """The write scoreboards of the weight loads issued on ``path`` before their first use (those
    :func:`loads_before_first_use` counts; ``controls[i]``: instruction ``i``'s
    :class:`~bench.sass_control.Control`, in :func:`parse` order), sorted: ``[5]`` means the
    step's loads all land on one scoreboard, so none is consumed before all have arrived
    (bench/NOTES.md, session 16)."""
    if len(controls) != len(ins):
        raise ValueError(f"{len(controls)} control codes for {len(ins)} instructions")
    return sorted({controls[i].write for i in _loads_in_flight(ins, path)
                   if is_weight_load(ins[i]) and controls[i].write is not None})


def _compile(kind, args):
    """``(ptx, threads, blocks_per_sm, weight elements per lane and pass of the innermost
    loop, inner passes per pass of the loop around it (0: not counted), label)``."""
    from numba import cuda, types
    from numba.cuda.cudadrv import nvrtc

    nvrtc.get_arch_option = lambda major, minor: f"compute_{major}{minor}"
    A = lambda t: types.Array(t, 1, "C")  # noqa: E731
    i64, b = types.int64, types.boolean
    if kind == "stream":
        from int4gemv.kernels.stream import stream_kernel
        w, u, t, bps = args
        sig = (A(types.uint8), i64, A(types.uint8), i64, A(types.uint8), i64, A(types.uint32))
        fn, per_pass, inner, label = stream_kernel(*args).py_func, 0, 0, f"W{w} U{u}"
    elif kind == "single_warp":
        from int4gemv.kernels import single_warp as sw
        c, u = args
        mode = sw.activation_mode(K, u)
        t, bps = 32, sw.min_blocks(c, u, mode)
        sig = (A(types.uint64), A(types.uint64), A(types.float16), A(types.uint8), b,
               A(types.float16), b, A(types.float16), i64)
        fn = sw.single_warp_kernel(c, u, mode, False, bps).py_func
        # the loop body is written out for two column groups (buffers A and B)
        per_pass, inner, label = 2 * c * u * ELEMENTS_PER_U64, 0, f"{c}x{u} {mode}"
    else:
        from int4gemv.kernels.default import default_kernel
        cfg = case_config(*args[:3], **(args[3] if len(args) > 3 else {}))
        f = A(types.float16 if cfg.dtype == "float16" else types.uint16)
        sig = (A(types.uint16), A(types.uint8), f, A(types.uint8), f, b, f, i64, i64)
        fn, t, bps = default_kernel(cfg).py_func, 32 * cfg.warps, cfg.blocks_per_sm
        per_pass = ELEMENTS_PER_CHUNK * cfg.cols * cfg.unroll
        steps = -(-K // ELEMENTS_PER_CHUNK // (cfg.lanes * cfg.unroll))
        # pipelined: one loop of two steps (A and B); else a step loop inside the group loop
        per_pass, inner = (2 * per_pass, 0) if cfg.pipeline else (per_pass, steps)
        label = (f"c{cfg.cols}l{cfg.lanes}u{cfg.unroll}b{bps}" + ("p" if cfg.pipeline else "")
                 + ("m" if cfg.mma else ""))
    bounds = {"launch_bounds": (t, bps)} if bps else {}
    ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0), **bounds)
    return ptx, t, bps, per_pass, inner, label


def measure(name, sass_dir=None) -> dict:
    """Compile one of :data:`CASES` and return its row."""
    kind, args = CASES[name]
    ptx, threads, bps, per_pass, inner, label = _compile(kind, args)
    with tempfile.TemporaryDirectory() as tmp:
        p, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(p, "w") as f:
            f.write(ptx)
        r = subprocess.run([os.environ.get("PTXAS", "ptxas"), "-arch=sm_90a", "-v", p, "-o",
                            cubin], capture_output=True, text=True, check=True)
        sass = subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-hex", "-c", cubin],
                              capture_output=True, text=True, check=True).stdout
        if sass_dir:
            plain = subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-c", cubin],
                                   capture_output=True, text=True, check=True).stdout
    rows = annotate(sass)          # each instruction's scoreboards (bench.sass_control)
    if sass_dir:
        os.makedirs(sass_dir, exist_ok=True)
        stem = os.path.join(sass_dir, re.sub(r"\W+", "_", name))
        with open(stem + ".sass", "w") as f:
            f.write(plain)
        with open(stem + ".control", "w") as f:
            for offset, control, text in rows:
                f.write(f"{offset}:\n" if control is None else f"{offset} {control}  {text}\n")
    ins = parse(sass)
    path = steady_path(ins, is_weight_load)
    controls = [control for _, control, _ in rows if control is not None]
    per_element = len(path) / per_pass if per_pass else None
    if inner:    # group = the group loop's pass (its step loop once) + the other steps
        group = len(steady_path(ins, is_weight_load, outer=True)) + (inner - 1) * len(path)
        per_element = group / (per_pass * inner)
    loads = loads_before_first_use(ins, path)
    mix = collections.Counter(ins[i][2].split(".")[0] for i in path)
    regs = int(re.search(r"Used (\d+) registers", r.stderr).group(1))
    spill = int(re.search(r"(\d+) bytes spill stores", r.stderr).group(1))
    # local memory a thread uses: spills, and local arrays left in memory (an index that is not a
    # constant after unrolling: session 18's 192 B at M = 16, which spill stores do not count)
    stack = int(re.search(r"(\d+) bytes stack frame", r.stderr).group(1))
    shared = re.search(r"(\d+) bytes smem", r.stderr)
    if not bps:   # no launch bound (single-warp 4x4): as many blocks as its registers allow
        from int4gemv.kernels.single_warp import BLOCKS_PER_SM
        per_thread = -(-regs // REGISTER_GRANULE) * REGISTER_GRANULE
        bps = min(BLOCKS_PER_SM, REGISTERS_PER_SM // (threads * per_thread))
    return {"name": name, "config": label, "registers": regs, "spill_bytes": spill, "stack_bytes": stack,
            "weight_scoreboards": weight_scoreboards(ins, controls, path),
            "smem": int(shared.group(1)) if shared else 0, "static": len(ins),
            "path": len(path), "per_pass_elements": per_pass, "per_element": per_element,
            "loads_before_use": dict(loads),
            "bytes_in_flight_per_sm": (16 * loads["128"] + 8 * loads["64"]) * threads * bps,
            "threads": threads, "blocks_per_sm": bps, "mix": dict(mix.most_common(10))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sass_m1", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="a CASES name (repeatable)")
    ap.add_argument("--sass-dir", help="write each listing here (NAME.sass, and NAME.control with "
                                       "each instruction's scoreboards: bench.sass_control)")
    args = ap.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        ap.error("NUMBA_ENABLE_CUDASIM is set: the simulator compiles nothing; unset it")
    print(f"{'case':30} {'config':18} regs spill/stack static loop instr/elem  loads before use"
          f"   threads x blocks/SM  KB in flight/SM  weight scoreboards")
    for name in args.only or CASES:
        r = measure(name, args.sass_dir)
        pe = f"{r['per_element']:.2f}" if r["per_element"] else "-"
        print(f"{name:30} {r['config']:18} {r['registers']:4} {r['spill_bytes']:5}/{r['stack_bytes']:<5} "
              f"{r['static']:6} {r['path']:4} {pe:>10}  {str(r['loads_before_use']):24} "
              f"{r['threads']:4} x {r['blocks_per_sm']:2}  {r['bytes_in_flight_per_sm'] / 1024:6.1f}"
              f"  SB {r['weight_scoreboards']}  smem {r['smem']} mix {r['mix']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
