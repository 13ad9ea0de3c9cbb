"""The timing library that ships with the package (``int4gemv.benchmark``), on the simulator.

What can be checked without a GPU: the one tuning adapter, workloads and their schema, weights,
byte counts and the chunked reference, the eager timer's bookkeeping, ``time_gemv``/``compare``
end to end (checked, not timed, and saying so), the peers' "install int4gemv[peers]" message, and
the structure rules (no import cycles, no private names across modules, no GPU or torch at import).
"""

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import int4gemv
from int4gemv.benchmark import compare, random_weight, time_eager, time_gemv
from int4gemv.benchmark.gemv_timing import GemvBench, simulated
from int4gemv.benchmark.selection import gemv_options, tuning_fields, tuning_label
from int4gemv.benchmark.weights import reference, rotation_copies, weight_bytes
from int4gemv.benchmark.workloads import check_workload, load_workload, workload_names

ROOT = Path(__file__).resolve().parents[1]


# -- the tuning adapter -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Tuned:
    variant: str
    cols: int | None = None
    unroll: int | None = None
    pdl: bool = False
    prefetch: bool = False


def test_variant_strings_and_launch_suffixes_become_fields():
    assert tuning_fields("auto+pdl+l2") | {} == dict(variant="auto", cols=None, unroll=None, activations=None,
                                                    pdl=True, prefetch=True)
    assert tuning_fields("single_warp+pdl")["pdl"] and not tuning_fields("single_warp+pdl")["prefetch"]
    assert tuning_fields(None)["variant"] is None
    with pytest.raises(ValueError, match="unknown tuning 'fast'; accepted: default, single_warp, auto, tensor_core, each "
                                         "optionally followed by [+]pdl or [+]pdl[+]l2") as caught:
        tuning_fields("fast")
    assert "+ +" not in str(caught.value)
    with pytest.raises(TypeError, match="int4gemv.Tuning"):
        tuning_fields(42)
    assert [tuning_label(t) for t in (None, "auto+pdl", _Tuned("single_warp", 4, 2), _Tuned("auto", pdl=True))] \
        == ["env", "auto+pdl", "sw 4x2", "auto+pdl"]


def test_with_int4gemv_tuning_the_adapter_passes_one_tuning(monkeypatch):
    made = []

    def fake_tuning(**fields):
        made.append(fields)
        return ("Tuning", tuple(sorted(fields.items())))

    monkeypatch.setattr(int4gemv, "Tuning", fake_tuning, raising=False)
    assert gemv_options(None) == {}
    options = gemv_options(_Tuned("single_warp", 4, 2, pdl=True))
    assert list(options) == ["tuning"]
    assert made[-1] == dict(variant="single_warp", cols=4, unroll=2, pdl=True, prefetch=False)
    gemv_options("auto+pdl", launch=False)
    assert made[-1] == {"variant": "auto"}


# -- workloads ------------------------------------------------------------------------------------------------
def test_the_installed_workload_loads_by_name_default_and_path():
    assert workload_names() == ["qwen3_vl_2b_decode"]
    wl = load_workload()
    assert wl["name"] == "qwen3-vl-2b-decode" and len(wl["projections"]) == 8
    path = ROOT / "int4gemv" / "workloads" / "qwen3_vl_2b_decode.json"
    assert load_workload(path) == wl == load_workload("qwen3_vl_2b_decode")
    with pytest.raises(ValueError, match="neither an installed workload"):
        load_workload("llama-70b")


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("projections"), "'projections' must be a non-empty list"),
    (lambda d: d["projections"][2].update(K=2044), r"projections\[2\] \(v_proj\): 'K' must be a multiple of 8"),
    (lambda d: d["projections"][0].update(N="2048"), r"projections\[0\] \(q_proj\): 'N' must be a positive integer"),
    (lambda d: d["projections"][1].update(name="q_proj"), "name 'q_proj' appears twice"),
    (lambda d: d["model"].update(num_hidden_layers=0), "num_hidden_layers"),
    (lambda d: d.update(block_size=48), "'block_size' must be one of"),
])
def test_a_malformed_workload_is_refused_naming_the_field(tmp_path, change, message):
    doc = load_workload()
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message):
        load_workload(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        load_workload(path)
    good = load_workload()
    assert check_workload(good) is good  # the document itself, unchanged
    assert [p["name"] for p in good["projections"]][-1] == "lm_head"


# -- weights ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize(("N", "K", "bs"), [(8, 64, 32), (5, 72, 16), (3, 200, 128)])
def test_random_weights_and_their_byte_counts(N, K, bs, zp):
    w = random_weight(N, K, bs, rng=1, zero_points=zp)
    assert w.nbytes == weight_bytes(N, K, bs, zero_points=zp)
    q = w.unpacked()
    assert q.min() == 0 and q.max() == 15 or q.size < 64
    assert np.all((w.scales >= 0.001) & (w.scales <= 0.0111))
    assert (w.zero_points is not None) == zp
    assert not np.array_equal(random_weight(N, K, bs, rng=2).packed, w.packed)


def test_rotation_covers_the_bytes_and_at_least_two_copies():
    assert rotation_copies(100 * 2**20, 256 * 2**20) == 3
    assert rotation_copies(1 << 40) == 2
    assert rotation_copies(256, 256 * 2**20) == 512   # tiny weights: capped (allocations, graph size)
    with pytest.raises(ValueError):
        rotation_copies(0)


@pytest.mark.parametrize("words, grid", [(1, 1), (7, 1), (64 * 4 - 1, 2), (64 * 8 + 3, 2), (1000, 3)])
def test_the_copy_kernel_copies_every_word_of_every_tail(words, grid):
    """The copy-bandwidth kernel: the unrolled body and the remainder loop, any grid."""
    from numba import cuda

    from int4gemv.kernels.copy import copy_words

    src = np.random.default_rng(words).integers(0, 2**63, words, dtype=np.uint64)
    dst = cuda.to_device(np.zeros(words + 1, np.uint64))
    copy_words[grid, 32](dst, cuda.to_device(src))
    out = dst.copy_to_host()
    np.testing.assert_array_equal(out[:words], src)
    assert out[words] == 0   # nothing past the source's end


def test_the_chunked_reference_equals_reference_gemv(rng):
    w = random_weight(8192 + 5, 16, 16, rng=3, zero_points=True)
    a = rng.standard_normal((2, 16)).astype(np.float16)
    bias = rng.standard_normal(w.N).astype(np.float16)
    np.testing.assert_allclose(reference(a, w, bias), int4gemv.reference_gemv(a, w, bias), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(reference(a[0], w)[0], int4gemv.reference_gemv(a[0], w), rtol=1e-12, atol=1e-12)


# -- timers -----------------------------------------------------------------------------------------------------
def test_the_eager_timer_runs_one_untimed_run_then_takes_medians():
    calls, syncs = [], []
    t = time_eager(lambda: calls.append(1), lambda: syncs.append(1), calls=7, runs=3)
    assert len(calls) == 7 * 4 and len(syncs) == 2 * 4
    assert 0 < t.issue_us <= t.complete_us and (t.calls, t.runs) == (7, 3)
    with pytest.raises(ValueError, match="calls and runs"):
        time_eager(lambda: None, lambda: None, calls=0)


# -- time_gemv and compare (the simulator: checked, not timed; a GPU: checked and timed) -------------------------
def test_time_gemv_checks_the_kernel_and_times_it_only_on_a_gpu():
    w = random_weight(8, 64, rng=4)
    r = time_gemv(w, tuning="single_warp")
    assert (r.method, r.kernel, r.family, r.M, r.bytes) == ("single_warp", "single_warp", "int4gemv", 1, w.nbytes)
    assert r.ok and r.rel_err < 1e-2 and r.simulated == simulated()
    if simulated():
        assert r.us is None and r.gbs is None
        assert "simulated (Numba CUDA simulator)" in str(r) and "not timed" in str(r)
    else:
        assert r.us > 0 and r.gbs > 0 and "not timed" not in str(r)
    r2 = time_gemv(w, M=2, tuning="default")
    assert r2.ok and r2.M == 2 and r2.kernel == "tensor_core"   # the default for M >= 2
    with pytest.raises(ValueError, match="M must be a positive int"):
        time_gemv(w, M=0)


def test_the_check_sees_an_output_the_kernel_did_not_write():
    with GemvBench(random_weight(8, 32, rng=5)) as bench:
        assert bench.check(lambda i, stream: None) == (float("inf"), False)
        err, written = bench.check(bench.launcher("default"))
        assert written and err < 1e-2


def test_compare_lists_every_tuning_and_peer_and_prints_a_table():
    table = compare([(8, 32), "16x32"], tunings=["default", "single_warp"], peers=["tinygemm"])
    assert [(r.N, r.method) for r in table.rows] == [(8, "default"), (8, "single_warp"), (8, "tinygemm"),
                                                     (16, "default"), (16, "single_warp"), (16, "tinygemm")]
    assert all(r.ok for r in table.rows if r.family == "int4gemv")
    text = str(table)
    assert text.count("tinygemm") == 2 and table.as_dicts()[3]["shape"] == "16x32"
    if simulated():   # torch missing: what to install; torch present: not run here
        assert all("install int4gemv[peers]" in r.error or "not run on the simulator" in r.error
                   or "no CUDA in torch" in r.error for r in table.rows if r.family == "peer")
        assert "nothing timed" in text and table.plot() is None
    else:   # timed; a peer that cannot take a tiny shape says why instead of timing it
        assert all(r.us > 0 for r in table.rows if r.family == "int4gemv")
        assert all((r.ok and r.us > 0) or r.error for r in table.rows if r.family == "peer")
        assert "nothing timed" not in text


def test_workload_names_resolve_to_their_shapes():
    from int4gemv.benchmark.comparison import resolve_shapes

    assert resolve_shapes(["lm_head", (4, 8), "qkv_proj"]) == [("4x8", 4, 8), ("lm_head", 151936, 2048),
                                                              ("qkv_proj", 4096, 2048)]


@pytest.mark.parametrize(("call", "message"), [
    (lambda w: compare([(8, 32)], peers=["cublas"]), "unknown peer 'cublas'; accepted: tinygemm, torch.mv"),
    (lambda w: compare([(8, 32)], tunings=["default", "fast"]), "unknown tuning 'fast'; accepted: default"),
    (lambda w: compare([(8, 32), "lm_haed"]), "unknown shape 'lm_haed'; accepted: .*lm_head.*'NxK'"),
    (lambda w: compare(["8x30"]), "K a positive multiple of 8"),
    (lambda w: time_gemv(w, tuning="fast"), "unknown tuning 'fast'; accepted: default, single_warp, auto"),
    (lambda w: time_gemv(w, peers=["cublas"]), "unknown peer 'cublas'; accepted:"),
])
def test_unknown_peers_tunings_and_shapes_are_refused_before_anything_runs(monkeypatch, call, message):
    from int4gemv.benchmark import comparison, gemv_timing

    def nothing_may_run(*args, **kwargs):
        raise AssertionError("a GemvBench was made before the arguments were checked")

    monkeypatch.setattr(gemv_timing, "GemvBench", nothing_may_run)
    monkeypatch.setattr(comparison, "GemvBench", nothing_may_run)
    with pytest.raises(ValueError, match=message):
        call(random_weight(8, 32, rng=0))


def test_a_bench_refuses_an_unknown_tuning_instead_of_reporting_a_row():
    with GemvBench(random_weight(8, 32, rng=0)) as bench:
        with pytest.raises(ValueError, match="unknown tuning 'fast'"):
            bench.time("fast")
        with pytest.raises(ValueError, match="unknown peer 'cublas'"):
            bench.time_peer("cublas")


# -- peers ------------------------------------------------------------------------------------------------------
def test_peers_without_torch_say_what_to_install(monkeypatch):
    import importlib.util

    from int4gemv.benchmark.peers import available_peers, require_torch

    monkeypatch.setitem(sys.modules, "torch", None)   # what a machine without torch sees
    assert importlib.util.find_spec("torch") is None
    for ok, why in available_peers(["tinygemm", "torch.mv", "dequant+mv"]).values():
        assert not ok and 'pip install "int4gemv[peers]"' in why
    with pytest.raises(ImportError, match=r"int4gemv\[peers\]"):
        require_torch()
    with GemvBench(random_weight(8, 32, rng=0)) as bench:   # the row names the cause, GPU or not
        row = bench.time_peer("tinygemm")
    assert "torch is not installed: install int4gemv[peers]" in row.error and row.us is None


# -- structure --------------------------------------------------------------------------------------------------
def _local_imports(folder: Path, package: str) -> dict:
    """``{module: {modules of the same package it imports}}`` from the source."""
    graph = {}
    for path in folder.glob("*.py"):
        mod = path.stem
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:
                    deps.add(node.module.split(".")[0])
                elif node.module and node.module.startswith(package + "."):
                    deps.add(node.module[len(package) + 1:].split(".")[0])
        graph[mod] = deps - {mod}
    return graph


@pytest.mark.parametrize(("folder", "package"), [("bench", "bench"), ("int4gemv/benchmark", "int4gemv.benchmark")])
def test_no_import_cycles(folder, package):
    graph = _local_imports(ROOT / folder, package)
    state = {}

    def visit(m, trail):
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", f"import cycle: {' -> '.join(trail + [m])}"
        state[m] = "open"
        for d in graph.get(m, ()):
            visit(d, trail + [m])
        state[m] = "done"

    for m in graph:
        visit(m, [])


@pytest.mark.parametrize("folder", ["bench", "int4gemv/benchmark"])
def test_no_private_names_imported_across_modules(folder):
    for path in (ROOT / folder).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def test_importing_the_library_loads_no_cuda_driver_and_no_torch():
    code = ("import sys, int4gemv.benchmark as b, int4gemv.benchmark.peers, int4gemv.benchmark.gemv_timing, "
            "int4gemv.benchmark.comparison; print(sorted(m for m in sys.modules if m.startswith(('torch', "
            "'numba.cuda.cudadrv.driver'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# -- GPU --------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_time_gemv_and_compare_time_on_the_gpu():
    w = random_weight(2048, 2048, rng=6)
    r = time_gemv(w, tuning="single_warp", replays=20, eager_calls=20)
    assert r.ok and r.error is None and not r.simulated, r
    assert r.launches >= 20 and r.copies >= 2 and r.p10_us <= r.us <= r.p90_us
    assert 0 < r.pct_copy < 150 and r.gbs == pytest.approx(w.nbytes / r.us / 1e3)
    assert r.eager_us > 0 and "µs" in str(r) and "% of copy" in str(r)
    table = compare([(1024, 2048)], tunings=["default", "auto+pdl"], peers=["torch.mv", "tinygemm"], replays=20,
                    eager_calls=20)
    for row in table.rows:
        if row.family == "int4gemv":
            assert row.ok and row.us > 0, row
        elif row.error is None:                                    # a peer that is installed
            assert row.us > 0 and (row.rel_err is None or row.rel_err < 1e-2), row
        else:
            assert "unavailable" in row.error, row
    fig = table.plot()
    timed = [r for r in table.rows if r.gbs]
    bars = [(bar.get_label(), [p.get_height() for p in bar.patches]) for bar in fig.axes[0].containers]
    shapes = list(dict.fromkeys((r.N, r.K) for r in timed))
    assert [m for m, _ in bars] == list(dict.fromkeys(r.method for r in timed))
    for method, heights in bars:  # one bar per shape at the method's GB/s (0: not timed there)
        want = [next((r.gbs for r in timed if (r.N, r.K) == s and r.method == method), 0) for s in shapes]
        assert heights == pytest.approx(want), method


# -- the replay timer's warm-up ---------------------------------------------------------------------------
def test_measure_replays_warms_up_for_a_count_and_for_a_time(monkeypatch):
    """At least ``warmup`` untimed replays, and replays until ``warmup_s`` has passed (an idle
    GPU's clocks ramp for tens of milliseconds: bench/NOTES.md, session 16), then ``replays``
    timed ones; negative values are refused before anything runs."""
    import time

    from numba import cuda

    from int4gemv.benchmark.timing import DEFAULT_WARMUP_S, measure_replays

    class Event:    # the simulator's events take no arguments and time nothing
        def record(self, stream):
            pass

        def synchronize(self):
            pass

    monkeypatch.setattr(cuda, "event", lambda timing: Event(), raising=False)
    monkeypatch.setattr(cuda, "event_elapsed_time", lambda a, b: 1.0, raising=False)
    assert DEFAULT_WARMUP_S >= 0.1
    calls = []
    start = time.perf_counter()
    t = measure_replays(lambda: calls.append(time.perf_counter()), 0, replays=4, warmup=2,
                        warmup_s=0.05)
    assert t.replays == 4 and len(calls) >= 2 + 4
    assert calls[-4] - start >= 0.05             # the first timed replay only after 50 ms
    calls.clear()
    measure_replays(lambda: calls.append(1), 0, replays=3, warmup=5, warmup_s=0.0)
    assert len(calls) == 5 + 3                   # the count alone when no time is asked
    for bad in (dict(warmup=-1), dict(warmup_s=-0.5), dict(warmup_s=float("nan"))):
        with pytest.raises(ValueError, match="warmup"):
            measure_replays(lambda: calls.append(1), 0, **bad)


def test_measure_replays_queues_the_timed_replays_behind_a_running_one(monkeypatch):
    """No wait between the last untimed replay and the timed ones, an event between each two
    timed replays, and each sample the time between consecutive events: the GPU records every
    event while busy, so the host's time to queue a replay is in no sample."""
    from numba import cuda

    from int4gemv.benchmark.timing import measure_replays

    log = []

    class Stream:
        def synchronize(self):
            log.append("wait")

    class Event:
        def __init__(self):
            self.at = None

        def record(self, stream):
            self.at = len([e for e in log if e == "replay"])   # replays queued before it
            log.append("event")

        def synchronize(self):
            log.append("wait event")

    monkeypatch.setattr(cuda, "default_stream", lambda: Stream())
    monkeypatch.setattr(cuda, "event", lambda timing: Event(), raising=False)
    # elapsed "ms" = replays between the two events x 1 ms: each sample must span one replay
    monkeypatch.setattr(cuda, "event_elapsed_time", lambda a, b: float(b.at - a.at), raising=False)
    t = measure_replays(lambda: log.append("replay"), 0, launches=4, replays=3, warmup=2, warmup_s=0.0)
    assert log == ["replay", "wait", "replay", "event", "replay", "event", "replay", "event",
                   "replay", "event", "wait event"]
    assert t.us == t.p10_us == t.p90_us == 1e3 / 4 and t.replays == 3


# -- the numbers a row reports ------------------------------------------------------------------------------
def test_a_timing_from_samples_is_the_median_and_the_10th_and_90th_percentiles():
    """``Timing.from_samples``: ``us`` the median, ``p10_us``/``p90_us`` numpy's 10th/90th
    percentiles of the per-launch samples (so p10 <= median <= p90 on uneven samples)."""
    from int4gemv.benchmark.timing import Timing

    samples = [5.0, 1.0, 9.0, 2.0, 3.0, 40.0, 4.0]
    t = Timing.from_samples(samples, launches=20)
    assert t.us == np.median(samples) and t.p10_us == np.percentile(samples, 10)
    assert t.p90_us == np.percentile(samples, 90)
    assert t.p10_us < t.us < t.p90_us and (t.replays, t.launches) == (7, 20)


def test_percent_of_copy_and_of_floor_are_exact():
    """``pct_copy`` = 100 * bytes / seconds / copy bandwidth (1 MB in 1 µs at 2000 GB/s: 50 %),
    ``gbs`` = bytes / µs / 1e3; ``pct_floor`` = 100 * the floor's µs / the row's µs (a row twice
    as slow as the ``stream`` floor: 50 %)."""
    from types import SimpleNamespace

    from int4gemv.benchmark.timing import Timing
    from int4gemv.benchmark.timing_row import GemvTiming

    def row(**kw):
        return GemvTiming(method="int4gemv", family="int4gemv", N=8, K=64, M=1, block_size=32,
                          bytes=10**6, simulated=False, **kw)
    filled = GemvBench._fill(SimpleNamespace(copy_bw=2000e9), row(), Timing(1.0, 0.9, 1.2, 30, 20), None)
    assert filled.pct_copy == pytest.approx(50.0) and filled.gbs == pytest.approx(1000.0)
    assert (filled.us, filled.p10_us, filled.p90_us, filled.replays, filled.launches) == (1.0, 0.9, 1.2, 30, 20)
    bench = SimpleNamespace(floor=lambda: row(us=4.0))
    slow = GemvBench._with_floor(bench, row(us=8.0))
    assert slow.floor_us == 4.0 and slow.pct_floor == pytest.approx(50.0)


def test_a_speed_up_is_shown_only_against_a_peer_of_the_same_shape_and_m():
    """``format_rows``: an int4gemv row's ``x peer`` column compares it with that peer timed on
    the same N, K *and* M; a peer timed only at M=8 gives an M=1 row no speed-up (a dash)."""
    from int4gemv.benchmark.table import format_rows
    from int4gemv.benchmark.timing_row import GemvTiming

    def row(method, family, M, us):
        return GemvTiming(method=method, family=family, N=8, K=64, M=M, block_size=32, bytes=1000,
                          simulated=False, us=us)
    text = format_rows([row("int4gemv", "int4gemv", 1, 10.0), row("int4gemv", "int4gemv", 8, 40.0),
                        row("torch", "peer", 8, 20.0)])
    lines = text.splitlines()
    assert lines[0].split()[-2:] == ["x", "torch"]
    assert lines[2].split()[1] == "1" and lines[2].split()[-1] == "—"   # M=1: no peer at M=1
    assert lines[3].split()[1] == "8" and lines[3].split()[-1] == "0.50"
