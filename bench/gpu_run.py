"""``python -m bench`` on a GPU: copy bandwidth, every shape x method x peer, the decode step.

Order: device-to-device copy bandwidth (the reference for every percentage), then per shape the
int4gemv methods and the available peers (:func:`bench.kernels.measure_shape`), a
``triton.testing.do_bench_cudagraph`` cross-check on the largest shape, and the whole decode step
(:func:`bench.decode_step.run_decode_step`). A progress bar runs on stderr throughout.
"""

from __future__ import annotations

import gc

from int4gemv.benchmark.gemv_timing import EAGER_CALLS
from int4gemv.benchmark.timing import DEFAULT_WARMUP, MIN_LAUNCHES, copy_bandwidth
from int4gemv.benchmark.workloads import bench_shapes, select_shapes

from .decode_step import DEFAULT_VARIANTS, run_decode_step
from .kernels import measure_shape, triton_anchor
from .methods import int4gemv_methods
from .progress import Progress

__all__ = ["run_gpu"]


def run_gpu(options, workload, tunings, peers, checkpoint=None) -> dict:
    """Measure everything; ``peers`` maps name → available peer descriptor. ``checkpoint(partial)``
    is called with the results so far after each shape (so a killed run leaves them behind)."""
    shapes = select_shapes(bench_shapes(workload), options.shapes)
    methods = int4gemv_methods(tunings)
    eager_calls = 30 if options.quick else EAGER_CALLS
    variants = ("single_warp", "auto", "auto+pdl", "auto+pdl+l2") if options.quick else DEFAULT_VARIANTS
    decode_configs = 0 if options.no_decode_step else 2 * len(variants)
    total = 1 + len(shapes) * (len(methods) + len(peers)) + 1 + decode_configs
    rotate_bytes = options.rotate_mb * 2**20
    block_size = workload.get("block_size", 32)
    with Progress(total, "bench") as progress:
        progress.step("copy bandwidth")
        copy_bw = copy_bandwidth()
        rows = []
        for i, shape in enumerate(shapes):
            rows += measure_shape(shape, methods, list(peers.values()), copy_bw=copy_bw,
                                  replays=options.replays, rotate_bytes=rotate_bytes, block_size=block_size,
                                  eager_calls=eager_calls, progress=progress, seed=i)
            if checkpoint:
                checkpoint({"timed": True, "rows": rows, "copy_bandwidth_gbs": copy_bw / 1e9, "partial": True})
        progress.step("do_bench_cudagraph cross-check")
        largest = max(shapes, key=lambda s: s.N * s.K)
        try:
            anchor = triton_anchor(largest)
        except Exception as exc:  # noqa: BLE001 - a cross-check only: recorded, never fatal
            anchor = {"available": False, "reason": f"failed: {exc!r}"[:400]}
        gc.collect()
        step = None
        if not options.no_decode_step:
            try:
                step = run_decode_step(workload, variants=variants, copy_bw=copy_bw, replays=options.replays,
                                       on_config=progress.step)
            except Exception as exc:  # noqa: BLE001 - recorded as a problem; the per-shape results are still written
                step = {"error": f"{exc!r}"[:1000], "workload": workload.get("name")}
    return {
        "timed": True,
        "rows": rows,
        "decode_step": step,
        "copy_bandwidth_gbs": copy_bw / 1e9,
        "anchor": anchor,
        "method": {
            "timing": "CUDA events around replays of one lifecycle-owned CUDA graph of G launches (peers: "
                      "a torch CUDA graph; launch cost excluded), per-launch time = replay time / G, median "
                      "over replays; eager = wall time per call issued from Python, ended by a stream "
                      "synchronize",
            "replays": options.replays, "warmup": DEFAULT_WARMUP, "rotate_bytes": rotate_bytes,
            "min_launches": MIN_LAUNCHES, "eager_calls": eager_calls,
            "tunings": [f"{c}x{u}" for c, u in tunings],
            "bandwidth": "GB/s = bytes a launch must read in its format / time; % copy = against the "
                         "device-to-device copy bandwidth measured in the same run (read + write)",
        },
    }
