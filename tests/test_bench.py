"""The benchmark command and its helpers.

* Everywhere: ``python -m bench`` on Numba's simulator (tiny sizes, says it timed nothing, writes
  JSON and text, refuses to write an autotune table from it); the autotune writer, the report and
  the results loader/plotter on a synthetic timed document; workloads, merging, controls.
* ``@pytest.mark.gpu``: pytest-benchmark suites over the workload's shapes — the default tiling,
  the single-warp specialization, tuned variants (``BENCH_TUNINGS``, default a few; ``all`` for
  every compiled one) and each available peer, timed by the same library as ``python -m bench``
  (:class:`int4gemv.benchmark.GemvBench`). One benchmark round is one timed measurement (a median
  of graph replays over rotated weights); ``extra_info`` holds µs per launch, GB/s and % of copy.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import int4gemv
from bench import autotune, chart, report, results_io
from bench.kernels import add_speedups
from bench.merge import concat_weights
from bench.methods import int4gemv_methods, parse_tunings
from int4gemv.benchmark.weights import weight_bytes
from int4gemv.benchmark.workloads import (
    bench_shapes,
    load_workload,
    select_shapes,
    step_bytes,
    step_projections,
)

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = load_workload()


# -- a synthetic timed results document (what an H200 run writes, abridged) ---------------------------
def synthetic_doc(device="NVIDIA H200", date="2025-01-02T03:04:05+00:00"):
    """A timed results document with two shapes, four int4gemv methods, three peers, a decode step."""
    copy_gbs = 4248.0
    rows = []
    times = {"default": 60.0, "single_warp": 45.0, "sw 4x2": 41.2, "auto": 41.3,
             "tinygemm": 50.0, "torch.mv": 160.0, "dequant+mv": 400.0}
    tunings = {"single_warp": (2, 4), "sw 4x2": (4, 2), "auto": (4, 2)}
    for label, names, N, K, scale in (("q_proj/o_proj", ["q_proj", "o_proj"], 2048, 2048, 0.05),
                                      ("lm_head", ["lm_head"], 151936, 2048, 1.0)):
        nbytes = weight_bytes(N, K)
        for method, us in times.items():
            us *= scale
            peer = method in ("tinygemm", "torch.mv", "dequant+mv")
            b = N * K * 2 if method == "torch.mv" else nbytes
            row = dict(shape=label, names=names, N=N, K=K, merged=False, per_step=1, bytes=b, method=method,
                       family="peer" if peer else "int4gemv", us=us, p10_us=us * 0.98, p90_us=us * 1.02,
                       replays=30, launches=20, gbs=b / us / 1e3, pct_copy=100 * b / (us * 1e-6) / (copy_gbs * 1e9),
                       eager_us=us + 30, rel_err=1e-3)
            if not peer:
                cols, unroll = tunings.get(method, (None, None))
                row.update(variant="default" if method == "default" else ("auto" if method == "auto" else "single_warp"),
                           kernel="default" if method == "default" else "single_warp", cols=cols, unroll=unroll,
                           ok=True, all_written=True)
            rows.append(row)
    add_speedups(rows)
    floor = 967753728 / (copy_gbs * 1e9) * 1e6
    configs = []
    for layout, launches, us in (("separate", 197, 400.0), ("merged", 113, 330.0)):
        configs.append(dict(layout=layout, variant="single_warp", launches=launches, max_rel_err=1e-3, checked=20,
                            us=us, p10_us=us, p90_us=us, replays=30, gbs=967753728 / us / 1e3,
                            pct_copy=100 * floor / us, x_floor=us / floor, eager_us=us * 20,
                            **({"max_abs_diff_vs_separate": 0.0} if layout == "merged" else {})))
    return {
        "schema": 1, "kind": "int4gemv-bench", "timed": True,
        "device": {"name": device, "simulated": False}, "versions": {"python": "3.12"},
        "git": {"commit": "0123456789abcdef", "dirty": False}, "date": date, "command": "python -m bench",
        "copy_bandwidth_gbs": copy_gbs, "rows": rows,
        "method": {"replays": 30, "rotate_bytes": 256 * 2**20},
        "peers": {"tinygemm": {"available": True, "reason": "torch"}, "torch.mv": {"available": True},
                  "dequant+mv": {"available": True}, "gemlite": {"available": False, "reason": "gemlite is not installed"}},
        "decode_step": {"workload": "qwen3-vl-2b-decode", "owner": "lifecycle", "bytes": 967753728, "timed": True,
                        "launches": {"separate": 197, "merged": 113}, "floor_us": floor, "copy_gbs": copy_gbs,
                        "configs": configs},
        "problems": [], "ok": True,
    }


# -- workloads ----------------------------------------------------------------------------------------------
def test_the_decode_step_workload_has_197_projections_of_0_97_gb_and_a_228_us_floor():
    separate = step_projections(WORKLOAD, merged=False)
    merged = step_projections(WORKLOAD, merged=True)
    assert (len(separate), len(merged)) == (197, 28 * 4 + 1)
    assert step_bytes(separate) == step_bytes(merged) == 967_753_728
    assert step_bytes(separate) / 4.25e12 * 1e6 == pytest.approx(227.7, abs=0.1)
    assert {(x.name, x.N) for x in merged if x.parts} == {("qkv_proj", 4096), ("gate_up_proj", 12288)}


def test_bench_shapes_are_the_distinct_shapes_then_the_merged_ones():
    shapes = bench_shapes(WORKLOAD)
    assert [(s.N, s.K) for s in shapes] == [(2048, 2048), (1024, 2048), (6144, 2048), (2048, 6144),
                                           (151936, 2048), (4096, 2048), (12288, 2048)]
    assert shapes[0].names == ("q_proj", "o_proj") and shapes[0].per_step == 56
    assert select_shapes(shapes, ["lm_head", "2048x6144", "qkv_proj"]) == [shapes[4], shapes[3], shapes[5]]
    with pytest.raises(ValueError, match="unknown shape 'nope'.*gate_up_proj"):
        select_shapes(shapes, ["nope"])


# -- merging ------------------------------------------------------------------------------------------------
def test_a_merged_weight_computes_the_parts_outputs_concatenated(rng):
    a = rng.standard_normal(64).astype(np.float16)
    parts = [int4gemv.quantize(rng.standard_normal((n, 64)).astype(np.float32), 32, symmetric=sym)
             for n, sym in ((8, True), (4, False), (12, True))]
    merged = concat_weights(parts)
    assert (merged.N, merged.K, merged.block_size) == (24, 64, 32)
    np.testing.assert_array_equal(merged.dequantize(), np.concatenate([p.dequantize() for p in parts]))
    np.testing.assert_array_equal(int4gemv.reference_gemv(a, merged),
                                  np.concatenate([int4gemv.reference_gemv(a, p) for p in parts]))
    assert merged.nbytes == sum(p.packed.nbytes + p.scales.nbytes for p in parts) + merged.zero_points.nbytes


def test_merging_weights_of_different_k_is_refused(rng):
    w1 = int4gemv.quantize(rng.standard_normal((8, 64)).astype(np.float32))
    w2 = int4gemv.quantize(rng.standard_normal((8, 32)).astype(np.float32))
    with pytest.raises(ValueError, match="K=32"):
        concat_weights([w1, w2])


# -- methods and controls -------------------------------------------------------------------------------------
def test_tunings_parse_and_methods_skip_the_default_tuning():
    from int4gemv.kernels.single_warp import DEFAULT_TUNING, TUNINGS

    assert parse_tunings("all") == list(TUNINGS) and parse_tunings("none") == []
    assert parse_tunings("4x2,8x1") == [(4, 2), (8, 1)]
    with pytest.raises(ValueError, match="not compiled"):
        parse_tunings("8x8")
    methods = int4gemv_methods(TUNINGS)
    names = [m.name for m in methods]
    assert names[:2] == ["default", "single_warp"] and names[-1] == "auto"
    tuned = len(TUNINGS) - 1
    assert f"sw {DEFAULT_TUNING[0]}x{DEFAULT_TUNING[1]}" not in names and len(names) == 3 + tuned
    assert all((m.variant, m.pdl, m.prefetch) == ("single_warp", False, False) for m in methods[1:-1])


def test_the_benchmark_never_writes_the_environment():
    """No module of bench/ or int4gemv/benchmark/ assigns to os.environ (kernels are selected by
    arguments); the command-line entry points may only choose the simulator before Numba loads."""
    allowed = {"bench/__main__.py": 'os.environ["NUMBA_ENABLE_CUDASIM"]',
               "bench/targets.py": 'os.environ["NUMBA_ENABLE_CUDASIM"]'}
    for path in sorted(list((ROOT / "bench").glob("*.py")) + list((ROOT / "int4gemv" / "benchmark").glob("*.py"))):
        rel = path.relative_to(ROOT).as_posix()
        for line in path.read_text().splitlines():
            writes = ("os.environ[" in line and "=" in line.split("os.environ[", 1)[1].split("]", 1)[1][:3]) \
                or "os.environ.update" in line or "os.environ.pop" in line or "os.environ.setdefault" in line \
                or "putenv" in line
            if writes:
                assert allowed.get(rel, "\0") in line, f"{rel} writes the environment: {line.strip()}"


def test_a_results_file_names_the_command_that_wrote_it():
    """``command`` is ``python -m <module>`` and the arguments, quoted; every bench entry point
    that writes a results file names its own module (session 28: the boundary probe's files said
    ``python -m bench``)."""
    import ast

    from bench.environment import describe_run

    doc = describe_run(True, "bench.targets", ["--out", "a b", "--m", 1])
    assert doc["command"] == "python -m bench.targets --out 'a b' --m 1"
    assert describe_run(True, "bench", [])["command"] == "python -m bench"
    callers = 0
    for path in sorted((ROOT / "bench").glob("*.py")):
        module = "bench" if path.stem == "__main__" else f"bench.{path.stem}"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "describe_run":
                callers += 1
                assert ast.literal_eval(node.args[1]) == module, f"{path.name} names another module"
    assert callers >= 6


# -- the command on the simulator ----------------------------------------------------------------------------
def test_the_command_runs_on_the_simulator_and_says_it_timed_nothing(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "bench", "--simulate", "--out", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing was timed" in done.stdout
    (json_path,) = tmp_path.glob("*.json")
    assert not list(tmp_path.glob("*.png"))            # no chart without timings
    assert list(tmp_path.glob("*.txt"))
    doc = json.loads(json_path.read_text())
    assert doc["timed"] is False and doc["ok"] is True and doc["device"]["simulated"] is True
    assert {"versions", "git", "date", "command"} <= set(doc)
    assert [r["method"] for r in doc["rows"]] == ["default", "single_warp", "sw 8x1"]
    assert all(r["ok"] and r["us"] is None and r["simulated"] for r in doc["rows"])
    assert all("resident" not in r for r in doc["rows"])
    step = doc["decode_step"]
    assert [(c["layout"], c["launches"]) for c in step["configs"]] == [("separate", 8), ("merged", 5)]
    assert all(c["max_rel_err"] < 1e-2 and "us" not in c for c in step["configs"])
    assert step["configs"][1]["max_abs_diff_vs_separate"] == 0.0
    assert step["configs"][0]["counters_captured"]["pinned_bytes"] == step["staged_input_bytes"]
    assert step["configs"][0]["counters_released"]["graphs_alive"] == 0
    assert step["counters_closed"] == {"graphs_alive": 0, "pinned_buffers": 0, "pinned_bytes": 0, "pending_cleanup": 0}
    assert all(not p["available"] for p in doc["peers"].values())
    torch_missing = importlib.util.find_spec("torch") is None
    assert all(("install int4gemv[peers]" in doc["peers"][n]["reason"]) == torch_missing
               for n in ("tinygemm", "torch.mv", "dequant+mv"))

    from bench.__main__ import main

    table = tmp_path / "autotune_table.json"
    assert main(["--write-autotune", str(table), "--from", str(json_path)]) == 2
    assert not table.exists()


def test_without_out_the_command_writes_into_a_git_ignored_folder(tmp_path):
    from bench.__main__ import output_folder, parse_args
    from bench.results_io import RESULTS_DIR, RUNS_DIR

    assert output_folder(parse_args([])) == RUNS_DIR != RESULTS_DIR
    assert output_folder(parse_args(["--out", str(tmp_path)])) == tmp_path
    ignored = [line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines()]
    assert RUNS_DIR.relative_to(ROOT).as_posix() in ignored


def test_command_line_errors_exit_with_status_2():
    from bench.__main__ import parse_args

    for argv in (["--replays", "5"], ["--rotate-mb", "64"], ["--from", "x.json"]):
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        assert exc.value.code == 2


# -- the autotune table --------------------------------------------------------------------------------------
def test_the_autotune_table_picks_the_faster_path_per_shape_and_dispatch_reads_it(tmp_path):
    from int4gemv import Problem
    from int4gemv.autotune import load_autotune_table
    from int4gemv.dispatch import plan_gemv
    from int4gemv.tuning import resolve_tuning

    doc = synthetic_doc()
    for r in doc["rows"]:  # make the default tiling win on lm_head
        if r["shape"] == "lm_head" and r["family"] == "int4gemv" and r["method"] != "default":
            r["us"] *= 10
    results = tmp_path / "h200.json"
    results.write_text(json.dumps(doc))
    path = tmp_path / "autotune_table.json"
    path.write_text(json.dumps({"schema": 1, "devices": {"Other GPU": {"source": "x", "entries": [
        {"N": 8, "K": 32, "variant": "default"}]}}}))   # schema 1: read as M=1, bs 32, no zp, fp16

    from bench.__main__ import main

    assert main(["--write-autotune", str(path), "--from", str(results)]) == 0
    table = json.loads(path.read_text())
    assert set(table["devices"]) == {"Other GPU", "NVIDIA H200"}           # other devices kept, in schema 2
    assert table["devices"]["Other GPU"] == {"source": "x", "entries": [
        {"N": 8, "K": 32, "M": 1, "block_size": 32, "zero_points": False, "dtype": "float16",
         "variant": "default", "cols": None, "unroll": None, "note": ""}]}
    entries = {(e["N"], e["K"]): e for e in table["devices"]["NVIDIA H200"]["entries"]}
    assert table["schema"] == 2
    assert entries[(2048, 2048)] == {"N": 2048, "K": 2048, "M": 1, "block_size": 32, "zero_points": False,
                                     "dtype": "float16", "variant": "single_warp", "cols": 4, "unroll": 2,
                                     "note": "single_warp 4x2 2.1 us vs default 3.0 us"}
    assert entries[(151936, 2048)]["variant"] == "default" and entries[(151936, 2048)]["cols"] is None

    loaded = load_autotune_table(path)  # the written table passes the schema check
    auto = resolve_tuning("auto")

    def planned(N, K):
        return plan_gemv(Problem(1, N, K, 32, "float16", False, False), auto,
                         device_name="NVIDIA H200", table=loaded)
    plan = planned(2048, 2048)
    assert (plan.kernel, plan.config.cols, plan.config.unroll) == ("single_warp", 4, 2)
    assert planned(151936, 2048).kernel == "default"


def test_a_malformed_existing_table_is_not_overwritten(tmp_path):
    results = tmp_path / "h200.json"
    results.write_text(json.dumps(synthetic_doc()))
    path = tmp_path / "autotune_table.json"
    bad = json.dumps({"schema": 2, "devices": {"Other GPU": {"entries": [{"N": 8, "K": 32, "variant": "default"}]}}})
    path.write_text(bad)   # schema 2 entries must say M, block size, zero points and dtype

    from bench.__main__ import main

    assert main(["--write-autotune", str(path), "--from", str(results)]) == 2
    assert path.read_text() == bad


def test_an_untimed_document_gives_no_autotune_table():
    doc = synthetic_doc()
    doc["timed"] = False
    with pytest.raises(ValueError, match="timed nothing"):
        autotune.table_entries(doc)


# -- report and results --------------------------------------------------------------------------------------
def test_the_report_writes_json_table_and_chart_and_the_loader_finds_the_newest(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib draws the chart (a test and bench extra)")
    old, new = synthetic_doc(date="2025-01-01T00:00:00+00:00"), synthetic_doc(date="2025-02-01T00:00:00+00:00")
    new["rows"][0]["us"] = 1.0
    report.write_files(old, tmp_path)
    paths = report.write_files(new, tmp_path)
    assert set(paths) == {"json", "txt", "png"} and all(p.exists() for p in paths.values())
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    latest = results_io.load_latest(tmp_path)
    assert latest["date"] == new["date"] and latest["rows"][0]["us"] == 1.0
    text = results_io.describe(latest)
    assert "NVIDIA H200" in text and "decode step" in text and "byte floor 227.8 µs" in text
    table = report.format_table(new)
    assert "x tinygemm" in table and "x torch.mv" in table and "gemlite" not in table.splitlines()[0]
    assert "gemlite (gemlite is not installed)" in report.format_summary(new)
    check_chart(chart.plot(latest), latest)


def check_chart(fig, doc):
    """The chart draws ``doc``: each method's GB/s per shape (every timed row, at its shape's
    position), the copy roofline, one bar per decode-step configuration at its µs, the device
    and the byte floor in the titles."""
    assert fig is not None, "a timed document must be plotted"
    ax, ax2 = fig.axes[:2]
    rows = [r for r in doc["rows"] if r.get("gbs")]
    shapes = [t.get_text().split("\n")[0] for t in ax.get_xticklabels()]
    assert set(shapes) == {r["shape"] for r in rows}
    lines = {line.get_label(): line for line in ax.get_lines()}
    copy = [line for line in lines.values() if "roofline" in line.get_label()]
    assert len(copy) == 1 and copy[0].get_ydata()[0] == doc["copy_bandwidth_gbs"]
    for method in ("default", "single_warp", "auto") + tuple(
            dict.fromkeys(r["method"] for r in rows if r["family"] == "peer")):
        line = lines[method]
        plotted = dict(zip(line.get_xdata(), line.get_ydata()))
        for r in rows:
            if r["method"] == method:
                assert plotted[shapes.index(r["shape"])] == pytest.approx(r["gbs"]), (method, r["shape"])
    assert doc["device"]["name"] in ax.get_title()
    step = doc.get("decode_step") or {}
    configs = [c for c in step.get("configs", []) if c.get("us")]
    heights = [patch.get_height() for patch in ax2.patches]
    assert heights == pytest.approx([c["us"] for c in configs])
    if configs:
        floor = [line for line in ax2.get_lines() if "byte floor" in line.get_label()]
        assert len(floor) == 1 and floor[0].get_ydata()[0] == pytest.approx(step["floor_us"])


def test_the_decode_step_lines_count_the_step_launches_not_the_replays():
    doc = synthetic_doc()
    for c in doc["decode_step"]["configs"]:
        c["launches"] = 1  # what results written before the fix recorded (one replay per timing)
    summary = report.format_summary(doc)
    assert "197 launches:" in summary and "113 launches:" in summary


def test_committed_results_load_describe_and_plot():
    pytest.importorskip("matplotlib", reason="matplotlib draws the chart (a test and bench extra)")
    paths = results_io.list_results(results_io.RESULTS_DIR)
    if not paths:
        pytest.skip("no results committed in bench/results yet")
    for path in paths:
        doc = results_io.load(path)
        assert doc["device"]["name"] in results_io.describe(doc)
        if doc.get("timed"):
            check_chart(chart.plot(doc), doc)
        else:
            assert chart.plot(doc) is None


def test_with_no_results_the_loader_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path))
    assert results_io.load_latest() is None
    assert "No benchmark results are committed yet" in results_io.describe(None)
    assert chart.plot(None) is None


def test_the_progress_line_without_tqdm(monkeypatch, capsys):
    import builtins
    import io

    from bench.progress import Progress

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__",
                        lambda name, *a, **k: (_ for _ in ()).throw(ImportError) if name == "tqdm" else real_import(name, *a, **k))
    out = io.StringIO()
    with Progress(2, "bench", stream=out) as p:
        p.step("one")
        p.step("two")
    assert "bench [0/2 done] one" in out.getvalue() and "bench [2/2 done]" in out.getvalue()


def test_host_side_planning_cost(benchmark):
    """The host work a gemv call does before launching: controls and plan (cached)."""
    a = np.zeros(2048, np.float16)
    w = int4gemv.QuantizedWeight(np.zeros((2048, 64, 16), np.uint8), np.ones((2048, 64), np.float16),
                                 K=2048, N=2048, block_size=32)
    plan = benchmark.pedantic(int4gemv.explain, args=(a, w), kwargs={"variant": "single_warp"},
                              rounds=200, iterations=5, warmup_rounds=5)
    assert plan.kernel == "single_warp"


# -- GPU: pytest-benchmark suites over the workload ------------------------------------------------------------
def _suite_methods():
    from int4gemv.benchmark.peers import PEERS

    from bench.methods import QUICK_TUNINGS

    spec = os.environ.get("BENCH_TUNINGS")
    tunings = parse_tunings(spec) if spec else QUICK_TUNINGS
    return {m.name: m for m in int4gemv_methods(tunings)}, PEERS


_METHODS, _PEERS = _suite_methods()
_CASES = [(s, m) for s in bench_shapes(WORKLOAD) for m in list(_METHODS) + list(_PEERS)]


class _GpuSession:
    """One shape's library bench (rotated weights, input, reference) at a time."""

    def __init__(self):
        self.bench = self.shape = None

    def bench_for(self, shape):
        from int4gemv.benchmark import GemvBench, random_weight

        if self.shape != shape:
            self.close()
            self.bench, self.shape = GemvBench(random_weight(shape.N, shape.K)), shape
        return self.bench

    def close(self):
        if self.bench is not None:
            self.bench.close()
            self.bench = self.shape = None


@pytest.fixture(scope="module")
def gpu_session():
    session = _GpuSession()
    yield session
    session.close()


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "method"), [  # one worker per shape builds its rotated weights once
    pytest.param(s, m, id=f"{s.label}-{m.replace(' ', '')}", marks=pytest.mark.xdist_group(f"bench_{s.label}"))
    for s, m in _CASES])
def test_benchmark_gemv(benchmark, gpu_session, shape, method):
    bench = gpu_session.bench_for(shape)
    if method in _PEERS:
        ok, why = _PEERS[method].available()
        if not ok:
            pytest.skip(f"{method}: {why}")

    def measure():
        if method in _METHODS:
            return bench.time(_METHODS[method], replays=20, eager_calls=10)
        return bench.time_peer(method, replays=20, eager_calls=10)

    t = benchmark.pedantic(measure, rounds=3, warmup_rounds=0, iterations=1)
    assert t.error is None, t.error
    assert t.ok is not False, f"{method} on {shape.label}: rel err {t.rel_err}"
    benchmark.extra_info.update(N=shape.N, K=shape.K, launches_per_replay=t.launches, us_per_launch=t.us,
                                gbs=t.gbs, pct_copy=t.pct_copy, rel_err=t.rel_err)


def test_no_peers_means_none_and_unknown_peers_are_named():
    from int4gemv.benchmark.peers import available_peers

    assert available_peers([]) == {}
    with pytest.raises(ValueError, match="unknown peer 'cublas'"):
        available_peers(["cublas"])


def test_the_default_tiling_probe_table_gives_ratios_to_m1_fp16_and_peers():
    from bench.probe_default import target_table

    def default(M, us, dtype="float16", bs=32, zp=False):
        return dict(kind="default", shape="gate/up", M=M, bs=bs, zp=zp, dtype=dtype, us=us, pct_copy=50.0)
    rows = [default(1, 5.0), default(1, 6.0, "bfloat16"), default(4, 10.0), default(1, 99.0, bs=64, zp=True),
            dict(kind="single_warp", shape="gate/up", M=1, us=4.5), dict(kind="tinygemm", shape="gate/up", M=1, us=7.5),
            dict(kind="tinygemm", shape="gate/up", M=4, us=9.0), default(1, 50.0)]   # the last: a tuning experiment
    lines = target_table(rows).splitlines()
    assert len(lines) == 1 + 4
    assert lines[1].split()[-4:] == ["50.0", "1.00", "1.50", "0.90"]      # fp16 M = 1: %copy, /M=1, tinygemm/, sw/
    assert lines[2].split()[-4:] == ["1.00", "1.20", "1.25", "0.75"]      # bf16: /M=1, bf16/fp16, tinygemm/, sw/
    assert lines[3].split()[-2:] == ["2.00", "0.90"]                      # M = 4: /M=1 and tinygemm at M = 4
    assert lines[4].split()[-1] == "1.00"                                 # bs 64 + zp: no peer of its format


@pytest.mark.parametrize("argv, named", [
    (["--shape", "nope"], "--shape"), (["--launches", "0"], "--launches"), (["--nk", "9"], "--nk"),
    (["--nk", "69x100"], "--nk"), (["--variant", "default", "--config", "c2l4u2b4m"], "--config")])
def test_the_ncu_probe_names_a_bad_argument_before_any_gpu_work(capsys, argv, named):
    from bench import ncu_probe

    with pytest.raises(SystemExit) as exc:
        ncu_probe.main(argv)
    assert exc.value.code == 2 and named in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--nk", "69x520", "--config", "c2l4u2b4m", "--bs", "16", "--zp"],
                                  ["--nk", "40x96", "--M", "5", "--variant", "env"]])
def test_the_ncu_probe_launches_a_checked_kernel(capsys, argv):
    from bench import ncu_probe

    assert ncu_probe.main(argv) == 0
    assert "relative error" in capsys.readouterr().out


def test_the_ncu_probe_fails_when_its_kernel_writes_nothing(monkeypatch, capsys):
    from bench import ncu_probe

    monkeypatch.setattr(ncu_probe, "_launcher", lambda *args: ((lambda: None), "no-op"))
    assert ncu_probe.main(["--nk", "40x96"]) == 1      # the poisoned output is never written
    assert "relative error inf" in capsys.readouterr().out
