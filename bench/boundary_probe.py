"""What one kernel boundary of a data-dependent chain costs, by how a kernel learns that its input
is complete (issue 21; a probe, not a product kernel).

    python -m bench.boundary_probe --out DIR [--kernels 64] [--weights-mb 0,2.4,7.1]

The decode chain spends 1.5–2.5 µs a kernel over its bytes at every one of its 112 boundaries
(bench/NOTES.md, session 21); the persistent chain's fence, count and poll cost about as much.
This chain has no arithmetic to hide that cost: ``L`` kernels of ``G`` blocks (≈ 4 an SM) of 128
threads, kernel ``i`` reading the whole fp16 vector ``x_i`` (``K`` = 2048 values, as a GEMV reads
its activations), streaming ``W`` bytes of weights of its own (16-byte loads, issued before it
waits, as the chain's GEMVs do; folded into a value that never fires) and writing
``x_{i+1}[j] = fp16(x_i[(j + 1) % K] · 0.5 + 0.25)``, element ``j`` by block ``j % G``
(``G`` a power of two, the largest up to 4 an SM). Modes:

* ``stream`` — ordinary launches: kernel ``i`` starts once ``i − 1`` has ended;
* ``pdl`` — the chain's way: programmatic launches, ``griddepcontrol.launch_dependents`` at entry,
  the weights issued, then ``griddepcontrol.wait`` (``i − 1`` complete, its memory flushed);
* ``count`` — a counter: each block of ``i − 1`` fences and adds one to ``count[i − 1]`` after its
  stores; thread 0 of each block of ``i`` polls it up to ``G`` (volatile reads, then one acquire);
* ``words`` — self-validating words, the decode chain's ``handoff="words"``: every ``x_i``
  (``i ≥ 1``) is first filled with the sentinel ``0xFFFF``, and kernel ``i`` waits in
  :func:`~int4gemv.kernels.handoff.await_words` (each thread re-reads its 16-byte words of ``x_i``
  until no half is the sentinel, then a block barrier): no fence, counter or whole-grid wait.

Every replay first runs one ordinary fill kernel (sentinels, counters to 0), then the ``L``
launches; the reported time is a replay over ``L`` (the fill included, and timed alone too). The
last ``x`` is checked bit for bit against numpy after the timed replays.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import numpy as np
from numba import cuda, float32, uint32

from int4gemv.decode.launches import bound_kernel
from int4gemv.kernels.handoff import SPIN_LIMIT, await_words
from int4gemv.kernels.intrinsics import allow_next_grid, wait_for_previous_grid
from int4gemv.kernels.nibble_pairs import half_high, half_low
from int4gemv.kernels.vector_loads import load16, load16_l2, load_acquire, load_volatile

__all__ = ["MODES", "probe_kernel", "fill_kernel", "ProbeChain", "reference", "measure", "main"]

MODES = ("stream", "pdl", "count", "words")
THREADS = 128


@functools.lru_cache(maxsize=None)
def probe_kernel(mode: str, loads: int):
    """Kernel ``(src, dst, weights, count, i)`` of ``mode``: ``src`` the uint32 view of ``x_i``
    (``K / 2`` words, ``K`` a multiple of 8), ``dst`` fp16 ``x_{i+1}``, ``weights`` uint32
    (``loads`` 16-byte words a thread, ``G · THREADS`` 16-byte words apart), ``count`` uint32
    ``[L + 1]`` (the last: counter polls that gave up after ``SPIN_LIMIT``; a words poll that
    gives up leaves sentinels in the values, which :meth:`ProbeChain.check` finds)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    PROGRAMMATIC, R = mode != "stream", int(loads)
    HELD = max(R, 1)   # a constant shape for the weight registers
    GRID_WAIT, COUNT, WORDS = mode == "pdl", mode == "count", mode == "words"

    @cuda.jit
    def kernel(src, dst, weights, count, i):
        t, b, G = uint32(cuda.threadIdx.x), uint32(cuda.blockIdx.x), uint32(cuda.gridDim.x)
        if PROGRAMMATIC:
            allow_next_grid()
        held = cuda.local.array((HELD, 4), uint32)
        for r in range(R):   # every weight load in flight before the wait
            if i < 0:   # never; a branch, so that ptxas keeps the wait after the loads
                break
            w = load16(weights, uint32(4) * (b * uint32(THREADS) + t + uint32(r) * G * uint32(THREADS)))
            for e in range(4):
                held[r, e] = w[e]
        if GRID_WAIT:
            wait_for_previous_grid()
        if COUNT:
            if t == 0 and i > 0:
                spins = 0
                while load_volatile(count, i - 1)[0] < G and spins < SPIN_LIMIT:
                    spins += 1
                if spins == SPIN_LIMIT:
                    cuda.atomic.add(count, count.shape[0] - 1, uint32(1))
                load_acquire(count, i - 1)
            cuda.syncthreads()
        hashed = uint32(0)
        for r in range(R):
            for e in range(4):
                hashed ^= held[r, e]
        K = uint32(dst.shape[0])
        if WORDS:   # all of x_i present before any output, as a GEMV needs: the chain's poll
            await_words(src, K // uint32(8), 4)
        total = float32(0.0)
        q = t
        while q < K // uint32(8):   # 16-byte word q: elements 8q .. 8q + 7 (uint32: no division call)
            v = load16_l2(src, uint32(4) * q)
            for e in range(8):
                word = v[e // 2]
                x = half_low(word) if e % 2 == 0 else half_high(word)
                total += x
                j = uint32(uint32(8) * q + uint32(e) + K - uint32(1))   # the element x feeds:
                if j >= K:                                                # (8q + e - 1) mod K
                    j = uint32(j - K)
                if j & (G - uint32(1)) == b:     # G a power of two: no division routine
                    y = x * float32(0.5) + float32(0.25)
                    if hashed == uint32(1) or total < float32(0.0):  # never (zero weights, x > 0)
                        y += float32(1.0)
                    dst[j] = y
            q += uint32(THREADS)
        if COUNT:
            cuda.syncthreads()
            if t == 0:
                cuda.threadfence()
                cuda.atomic.add(count, i, uint32(1))

    return kernel


@cuda.jit
def fill_kernel(xs, count):
    """Rows ``1 ..`` of ``xs`` (uint32 ``[L + 1, K / 2]``) to the sentinel, ``count`` to 0."""
    i = cuda.grid(1)
    if i < count.shape[0]:
        count[i] = uint32(0)
    for k in range(i + xs.shape[1], xs.shape[0] * xs.shape[1], cuda.gridsize(1)):
        xs[k // xs.shape[1], k % xs.shape[1]] = uint32(0xFFFFFFFF)


def reference(x0, kernels: int) -> np.ndarray:
    """``x_L`` of the chain from ``x_0`` (fp16), in numpy."""
    x = np.asarray(x0, np.float16)
    for _ in range(kernels):
        x = (np.roll(x, -1).astype(np.float32) * np.float32(0.5) + np.float32(0.25)).astype(np.float16)
    return x


class ProbeChain:
    """The chain of :func:`probe_kernel` launches in one ``mode`` on device buffers it owns.

    ``kernels`` launches of ``blocks`` blocks (a power of two), each streaming ``loads`` 16-byte
    weight words a thread (zeros) of its own, over an fp16 vector of ``K`` values (a multiple
    of 8). ``ops``: the fill, then the launches, each ``op(stream_handle)``."""

    def __init__(self, mode: str, *, kernels: int, blocks: int, loads: int, K: int = 2048, seed: int = 0):
        if K % 8 or K < 8:
            raise ValueError(f"K must be a positive multiple of 8; got {K}")
        for name, v in (("kernels", kernels), ("blocks", blocks)):
            if v < 1:
                raise ValueError(f"{name} must be >= 1; got {v}")
        if blocks & (blocks - 1):
            raise ValueError(f"blocks must be a power of two; got {blocks}")
        if loads < 0:
            raise ValueError(f"loads must be >= 0; got {loads}")
        rng = np.random.default_rng(seed)
        self.mode, self.kernels, self.blocks, self.loads, self.K = mode, kernels, blocks, loads, K
        self.x0 = rng.uniform(0.5, 1.5, K).astype(np.float16)
        xs = np.zeros((kernels + 1, K), np.float16)
        xs[0] = self.x0
        self.xs = cuda.to_device(xs)
        self.xs32 = self.xs.view(np.uint32)
        self.count = cuda.to_device(np.zeros(kernels + 1, np.uint32))
        words = max(loads, 1) * 4 * blocks * THREADS
        self.weights = cuda.to_device(np.zeros((kernels, words), np.uint32))
        self.weight_bytes = loads * 16 * blocks * THREADS   # per kernel
        kernel = probe_kernel(mode, loads)
        self.ops = [bound_kernel(fill_kernel, (self.xs32, self.count), 64, 256).launch]
        for i in range(kernels):
            self.ops.append(bound_kernel(kernel, (self.xs32[i], self.xs[i + 1], self.weights[i], self.count, i),
                                         blocks, THREADS, programmatic=mode != "stream").launch)

    def issue(self, n: int, handle: int = 0) -> None:
        """Launch operation ``n mod (kernels + 1)`` (0: the fill) on stream ``handle``."""
        self.ops[n % len(self.ops)](handle)

    def check(self) -> None:
        """Raise ``AssertionError`` unless ``x_L`` equals :func:`reference` bit for bit and no
        poll gave up (call after the GPU has finished)."""
        gave_up = int(self.count.copy_to_host()[-1])
        assert gave_up == 0, f"{self.mode}: {gave_up} polls gave up"
        got = self.xs.copy_to_host()[-1]
        want = reference(self.x0, self.kernels)
        bad = np.flatnonzero(got.view(np.uint16) != want.view(np.uint16))
        assert bad.size == 0, f"{self.mode}: {bad.size} of {self.K} values differ (first at {bad[:5]})"


def measure(mode: str, *, kernels: int, blocks: int, loads: int, replays: int) -> dict:
    """One row: the fill alone, then the chain of ``mode`` timed in a torch CUDA graph (fill +
    ``kernels`` launches a replay) and checked after its last replay."""
    import torch

    from .graph_timer import time_in_torch_graph

    chain = ProbeChain(mode, kernels=kernels, blocks=blocks, loads=loads)
    stream = torch.cuda.Stream()
    # the fill alone first: its replays leave the sentinels in x_1 .. x_L, which the chain's
    # replays then overwrite, so the check below reads the chain's own last output
    fill = time_in_torch_graph(lambda n, handle: chain.ops[0](handle), stream, 1, replays)
    full = time_in_torch_graph(chain.issue, stream, kernels + 1, replays)
    torch.cuda.synchronize()
    chain.check()
    replay_us, spread = full.us * (kernels + 1), (full.p10_us * (kernels + 1), full.p90_us * (kernels + 1))
    return dict(kind="boundary", mode=mode, kernels=kernels, blocks=blocks, threads=THREADS, K=chain.K,
                weight_bytes=chain.weight_bytes, replay_us=replay_us, replay_p10_us=spread[0],
                replay_p90_us=spread[1], fill_us=fill.us, us=replay_us / kernels,
                us_without_fill=(replay_us - fill.us) / kernels, replays=replays, checked=True)


def _table(rows) -> str:
    lines = ["| weights / kernel | mode | µs a kernel | µs without the fill | floor µs | over floor µs |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['weight_bytes'] / 1e6:.2f} MB | {r['mode']} | {r['us']:.3f} | "
                     f"{r['us_without_fill']:.3f} | {r['floor_us']:.3f} | {r['us_without_fill'] - r['floor_us']:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.boundary_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON")
    parser.add_argument("--kernels", type=int, default=64, help="launches a replay (default 64)")
    parser.add_argument("--weights-mb", default="0,2.4,7.1",
                        help="weight MB a kernel, rounded up to whole 16-byte loads a thread (default 0,2.4,7.1)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"subset of {MODES}")
    parser.add_argument("--replays", type=int, default=50)
    args = parser.parse_args(argv)
    from int4gemv.benchmark import copy_bandwidth
    from int4gemv.device import device_facts

    from .environment import describe_run

    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            parser.error(f"--modes: {m!r} is not one of {MODES}")
    name, sms, _ = device_facts()
    blocks = 1 << (4 * sms).bit_length() - 1   # a power of two: 512 on 132 SMs
    bandwidth = copy_bandwidth()
    rows = []
    for mb in (float(x) for x in args.weights_mb.split(",")):
        loads = -(-int(mb * 1e6) // (16 * blocks * THREADS))
        for mode in modes:
            row = measure(mode, kernels=args.kernels, blocks=blocks, loads=loads, replays=args.replays)
            row["floor_us"] = row["weight_bytes"] / bandwidth * 1e6
            rows.append(row)
            print(f"{mode:6s} {row['weight_bytes'] / 1e6:5.2f} MB: {row['us']:.3f} µs a kernel "
                  f"(fill {row['fill_us']:.2f} µs a replay)", flush=True)
    doc = dict(kind="int4gemv-boundary-probe", **describe_run(False, "bench.boundary_probe", argv),
               copy_bytes_per_s=bandwidth, rows=rows)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"boundary-probe-{name.replace(' ', '-').lower()}-{doc['date'][:19].replace(':', '')}.json"
    path.write_text(json.dumps(doc, indent=1))
    print(_table(rows))
    print(f"written: {path}")


if __name__ == "__main__":
    sys.exit(main())
