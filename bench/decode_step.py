"""A whole decode step as one lifecycle-owned graph, separate and merged, against its byte floor.

One step of the workload (Qwen3-VL-2B: 28 layers x q, k, v, o, gate, up, down + lm_head = 197
launches, 0.97 GB of INT4 weights and scales) with random weights at real shapes, made on the
device. The graph holds one staged input copy (the hidden state, from a pinned buffer retained for
the graph) and every launch; it is captured once through :class:`bench.owned_graph.GemvGraphs`
(``lifecycle``), replayed, timed with CUDA events, and released. The byte floor is the step's
weight bytes at the measured device-to-device copy bandwidth (about 228 µs at 4.25 TB/s).

The merged layout runs q/k/v as one ``N = 4096`` weight and gate/up as one ``N = 12288`` weight
(the same rows, copied on the device, see :mod:`bench.merge`): 4 launches per layer instead of 7,
113 in all. Both layouts are checked: outputs of a replay after a new input was written into the
pinned buffer against a float64 reference, and merged outputs against the separate ones.

Weights are random (:func:`int4gemv.benchmark.weights.random_weight`) and checked against the
float64 reference on the host. On the simulator the same code runs a tiny workload
(:data:`int4gemv.benchmark.workloads.SIM_WORKLOAD`) on :class:`lifecycle.SimDriver` and times nothing.
"""

from __future__ import annotations

import numpy as np

from int4gemv.benchmark.selection import gemv_options
from int4gemv.benchmark.timing import measure_replays, time_eager
from int4gemv.benchmark.weights import random_weight, reference, relative_error
from int4gemv.benchmark.workloads import step_bytes, step_projections

from .merge import concat_weights
from .owned_graph import GemvGraphs

__all__ = ["DEFAULT_VARIANTS", "run_decode_step"]

#: ``+pdl``: the same launches as programmatic dependent launches (``gemv(..., pdl=True)``);
#: ``+pdl+l2``: those with each kernel's weights prefetched into L2 (``prefetch=True``).
DEFAULT_VARIANTS = ("default", "single_warp", "auto", "auto+pdl", "auto+pdl+l2")


class _Step:
    """Weights, inputs and outputs of one step in both layouts (merged weights share rows)."""

    def __init__(self, workload, graphs, *, seed):
        self.workload, self.graphs = workload, graphs
        self.block_size = workload.get("block_size", 32)
        self.layouts = {"separate": step_projections(workload, merged=False),
                        "merged": step_projections(workload, merged=True)}
        rng = np.random.default_rng(seed)
        self.weights = {}
        self._make_weights(rng)
        dims = {x.input: x.K for x in self.layouts["separate"]}
        self.host_inputs = {name: (rng.standard_normal(k) * 0.5).astype(np.float16) for name, k in dims.items()}
        self.inputs = {name: graphs.upload(x) for name, x in self.host_inputs.items()}
        self.outputs = {layout: [graphs.empty(x.N) for x in launches] for layout, launches in self.layouts.items()}

    def _make_weights(self, rng):
        for i, x in enumerate(self.layouts["separate"]):
            self.weights[("separate", i)] = random_weight(x.N, x.K, self.block_size, rng=rng)
        index = {(x.layer, x.name): i for i, x in enumerate(self.layouts["separate"])}
        for i, x in enumerate(self.layouts["merged"]):
            if x.parts:
                parts = [self.weights[("separate", index[(x.layer, p)])] for p in x.parts]
                self.weights[("merged", i)] = concat_weights(parts)
            else:
                self.weights[("merged", i)] = self.weights[("separate", index[(x.layer, x.name)])]

    def launches(self, layout, variant):
        return [(self.inputs[x.input], self.weights[(layout, i)], self.outputs[layout][i], variant)
                for i, x in enumerate(self.layouts[layout])]

    def checked(self, layout):
        """Indices checked against the reference: all on the simulator; on the GPU the first and
        last layers and the per-step projections (the float64 reference of 197 is slow)."""
        launches = self.layouts[layout]
        if self.graphs.simulated:
            return list(range(len(launches)))
        last = max(x.layer for x in launches)
        return [i for i, x in enumerate(launches) if x.layer in (0, last, -1)]


class _References:
    """Float64 references, computed once per (weight, input) pair."""

    def __init__(self):
        self._cache = {}

    def __call__(self, w, x):
        key = (id(w), id(x))
        if key not in self._cache:
            self._cache[key] = reference(x, w)[0]
        return self._cache[key]


def _eager_us(graphs, launches, staged):
    """Median wall time of the same step issued eagerly from Python, waited for."""
    import int4gemv
    from numba import cuda

    stream = cuda.external_stream(graphs.stream)
    calls = [(a, w, out, gemv_options(variant)) for a, w, out, variant in launches]

    def step():
        staged[0].copy_to_device(staged[1], stream=stream)
        for a, w, out, options in calls:
            int4gemv.gemv(a, w, out=out, stream=graphs.stream, **options)

    return time_eager(step, stream.synchronize, calls=1, runs=5).complete_us


def _counters(c):
    return {k: getattr(c, k) for k in ("graphs_alive", "pinned_buffers", "pinned_bytes", "pending_cleanup")}


def run_decode_step(workload, *, variants=DEFAULT_VARIANTS, copy_bw=None, replays=30,
                    simulated=None, seed=0, on_config=None) -> dict:
    """Capture, check, time and release the step for each layout and variant; returns a dict.

    ``copy_bw`` (bytes/s) sets the byte floor; ``on_config(label)`` is called before each
    configuration (progress). Timing is skipped on the simulator.
    """
    report = {"workload": workload.get("name", "?"), "configs": []}
    with GemvGraphs(simulated=simulated) as graphs:
        step = _Step(workload, graphs, seed=seed)
        refs = _References()
        nbytes = step_bytes(step.layouts["separate"], step.block_size)
        report.update(
            owner=graphs.backend, bytes=nbytes, timed=not graphs.simulated,
            launches={k: len(v) for k, v in step.layouts.items()},
            staged_input_bytes=int(step.host_inputs["hidden"].nbytes),
            copy_gbs=None if copy_bw is None else copy_bw / 1e9,
            floor_us=None if copy_bw is None else nbytes / copy_bw * 1e6)
        x_new = (np.random.default_rng(seed + 1).standard_normal(step.host_inputs["hidden"].shape) * 0.5
                 ).astype(np.float16)
        separate_out = {}
        graph_id = 0
        for variant in variants:
            for layout in ("separate", "merged"):
                graph_id += 1
                if on_config:
                    on_config(f"decode step {layout} {variant}")
                launches = step.launches(layout, variant)
                staged = (step.inputs["hidden"], step.host_inputs["hidden"])
                graphs.record_step(graph_id, launches, staged=staged)
                captured = _counters(graphs.counters)
                # A new input written into the retained pinned buffer must reach every launch.
                graphs.buffers(graph_id)[0].array[...] = x_new
                graphs.replay(graph_id)
                graphs.synchronize(graph_id)
                inputs = dict(step.host_inputs, hidden=x_new)
                outs = [graphs.read(o) for o in step.outputs[layout]]
                errors = [relative_error(outs[i], refs(launches[i][1], inputs[step.layouts[layout][i].input]))
                          for i in step.checked(layout)]
                config = dict(layout=layout, variant=variant, launches=len(launches),
                              max_rel_err=max(errors), checked=len(errors), counters_captured=captured)
                if layout == "separate":
                    separate_out[variant] = outs
                else:
                    config["max_abs_diff_vs_separate"] = _merged_vs_separate(step, outs, separate_out[variant])
                if not graphs.simulated:
                    t = measure_replays(lambda: graphs.replay(graph_id), graphs.stream, replays=replays)
                    timing = t.as_dict()
                    del timing["launches"]  # one replay is the whole step; keep the step's launch count
                    config.update(timing)
                    config["gbs"] = nbytes / t.us / 1e3
                    if copy_bw:
                        config["pct_copy"] = 100 * nbytes / (t.us * 1e-6) / copy_bw
                        config["x_floor"] = t.us / report["floor_us"]
                    config["eager_us"] = _eager_us(graphs, launches, staged)
                graphs.release(graph_id)
                config["counters_released"] = _counters(graphs.counters)
                report["configs"].append(config)
        report["kernels"] = _kernels_used(step, variants)
    report["counters_closed"] = _counters(graphs.counters)
    return report


def _merged_vs_separate(step, merged_outs, separate_outs) -> float:
    """Largest |difference| between each merged output and its parts' outputs concatenated."""
    index = {(x.layer, x.name): i for i, x in enumerate(step.layouts["separate"])}
    worst = 0.0
    for out, x in zip(merged_outs, step.layouts["merged"], strict=True):
        names = x.parts or (x.name,)
        expect = np.concatenate([separate_outs[index[(x.layer, p)]] for p in names])
        worst = max(worst, float(np.max(np.abs(out.astype(np.float64) - expect.astype(np.float64)))))
    return worst


def _kernels_used(step, variants) -> dict:
    """``{variant: {"NxK": plan summary}}``: what each variant ran for each distinct shape."""
    import int4gemv

    used = {}
    for variant in variants:
        plans = {}
        for layout in ("separate", "merged"):
            for i, x in enumerate(step.layouts[layout]):
                key = f"{x.N}x{x.K}"
                if key not in plans:
                    a = np.zeros(x.K, np.float16)
                    p = int4gemv.explain(a, step.weights[(layout, i)], **gemv_options(variant, launch=False))
                    plans[key] = p.kernel if p.cols is None else f"{p.kernel} {p.cols}x{p.unroll}"
        used[variant] = plans
    return used
