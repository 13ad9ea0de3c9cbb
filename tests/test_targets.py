"""``python -m bench.targets``: the simulator run writes the schema of DESIGN.md with every row
checked, and the target table judges a timed document row by row (pure functions)."""

import json
import pathlib
import subprocess
import sys

import pytest

from bench import targets
from bench.target_table import GOALS, check_batch_targets, check_targets, format_markdown, format_targets
from int4gemv.device import simulated

SIMULATED = simulated()

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = ("kind", "shape", "N", "K", "M", "bs", "zp", "dtype", "us", "floor_us", "tinygemm_us", "error",
          "variant", "pct_floor")


def simulated_run(args, capsys):
    """``python -m bench.targets --simulate ARGS``: in this process on the simulator; on a GPU in
    a fresh one (the simulator must be chosen before CUDA starts). Returns (exit code, stdout,
    stderr)."""
    if SIMULATED:
        rc = targets.main(["--simulate", *args])
        captured = capsys.readouterr()
        return rc, captured.out, captured.err
    proc = subprocess.run([sys.executable, "-m", "bench.targets", "--simulate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def test_the_simulator_run_writes_every_row_checked(tmp_path, capsys):
    rc, out, _ = simulated_run(["--out", str(tmp_path), "--formats", "16+zp",
                             "--variants", "default,single_warp,tensor_core,env", "--m", "1,3"], capsys)
    assert rc == 0
    (path,) = tmp_path.glob("targets-*.json")
    doc = json.loads(path.read_text())
    for key in ("device", "versions", "date", "git", "command", "copy_bandwidth_gbs"):
        assert key in doc
    assert doc["command"].startswith("python -m bench.targets")
    rows = doc["rows"]
    assert all(set(SCHEMA) <= set(r) for r in rows)
    gemv = [r for r in rows if r["kind"] == "int4gemv"]
    # 2 shapes x 2 dtypes x 2 M x (tensor_core, env) + default at M = 1 (at M = 3 the dispatcher
    # runs tensor cores for it: skipped); single-warp is ineligible at bs 16: skipped.
    assert len(gemv) == 20 and all(r["ok"] and r["error"] < 1e-2 and r["us"] is None for r in gemv)
    assert {r["variant"] for r in gemv} == {"default", "tensor_core", "env"} and len(doc["skipped"]) == 12
    assert [r["ok"] for r in rows if r["kind"] == "floor"] == [True, True]
    assert "not checked" in out


def test_variants_default_to_every_registered_kernel_then_auto_and_env():
    from int4gemv.registry import KERNELS

    assert targets.variants() == list(KERNELS) + ["auto", "env"]
    with pytest.raises(ValueError, match="unknown variants"):
        targets.variants(["fastest"])
    assert targets.variants(["none"]) == []


@pytest.mark.parametrize("argv", [["--out", "x", "--m", "0"], ["--out", "x", "--formats", "48"],
                                  ["--out", "x", "--shapes", "qkv"], ["--out", "x", "--replays", "3"], []])
def test_bad_options_are_usage_errors(argv):
    with pytest.raises(SystemExit) as exc:
        targets.parse_args(argv)
    assert exc.value.code == 2


def timed_doc():
    def row(kind, variant, shape, us, floor, dtype="float16", bs=32, zp=False, tg=None, M=1):
        return dict(kind=kind, variant=variant, shape=shape, N=1, K=1, M=M, bs=bs, zp=zp, dtype=dtype, us=us,
                    floor_us=floor, pct_floor=100 * floor / us, tinygemm_us=tg, error=1e-4)
    return {"timed": True, "copy_bandwidth_gbs": 4100.0, "device": {"name": "GPU"}, "git": {"commit": "abc"},
            "command": "python -m bench.targets", "rows": [
                dict(row("floor", "stream", "lm_head", 40.0, 40.0), M=None, dtype=None),
                row("int4gemv", "default", "lm_head", 44.0, 40.0, tg=100.0),           # 90.9 %: holds
                row("int4gemv", "default", "lm_head", 44.0, 40.0, dtype="bfloat16", tg=100.0),
                row("int4gemv", "single_warp", "lm_head", 44.0, 40.0),                 # 90.9 % < 92
                row("int4gemv", "env", "lm_head", 46.0, 40.0),                         # slower than default
                row("int4gemv", "default", "k/v", 4.0, 3.0, tg=4.1),                   # 1.33x floor: misses
                row("int4gemv", "default", "down", 5.0, 4.0, tg=6.0),                 # 1.2x tinygemm < 1.3
                dict(row("int4gemv", "default", "q/o", 1.0, 3.0, tg=9.0), ok=False)]}  # wrong: judges nothing


def test_the_target_table_judges_each_row():
    checks = {(t, r): ok for t, r, _, _, ok in check_targets(timed_doc())}
    assert checks[("lm_head default % of floor", "bs32 float16")]
    assert not checks[("lm_head single_warp % of floor", "bs32 float16")]
    assert not checks[("env-unset / default", "lm_head bs32 float16 M=1")]
    assert not checks[("default x floor", "k/v float16")] and checks[("default x floor", "down float16")]
    assert checks[("tinygemm / default", "k/v float16")] and not checks[("tinygemm / default", "down float16")]
    assert checks[("bf16 / fp16 default", "lm_head bs32")]
    assert not any("q/o" in r for _, r in checks)
    text = format_targets(timed_doc())
    assert "9 of 13 target rows hold" in text and GOALS["decode_x_floor"] == 1.3


def test_the_markdown_table_is_generated_from_the_rows():
    md = format_markdown(timed_doc())
    assert "| lm_head | 32 | no | 1 | 40.00 | 44.00 (91%) | 44.00 (91%) | 44.00 (91%) | 46.00 (87%) |" in md


def batch_doc():
    def row(variant, shape, us, floor, M, dtype="float16", bs=32, zp=False, tg=None):
        return dict(kind="int4gemv", variant=variant, shape=shape, N=1, K=1, M=M, bs=bs, zp=zp,
                    dtype=dtype, us=us, floor_us=floor, pct_floor=100 * floor / us, tinygemm_us=tg,
                    error=1e-4)
    return {"timed": True, "copy_bandwidth_gbs": 3000.0, "device": {"name": "GPU"},
            "git": {"commit": "abc"}, "command": "python -m bench.targets", "rows": [
                dict(kind="floor", variant="stream", shape="lm_head", N=1, K=1, M=None, bs=32, zp=False,
                     dtype=None, us=60.0, floor_us=60.0, pct_floor=100.0, tinygemm_us=None, error=None),
                dict(kind="peer", variant="tinygemm", shape="lm_head", N=1, K=1, M=16, bs=32, zp=False,
                     dtype="bfloat16", us=340.0, floor_us=None, pct_floor=None, tinygemm_us=None, error=None),
                row("env", "lm_head", 90.0, 60.0, 16, tg=340.0),              # 1.5x floor: holds
                row("env", "lm_head", 95.0, 60.0, 16, dtype="bfloat16"),      # 1.056x fp16: misses
                row("env", "lm_head", 79.0, 60.0, 8, tg=150.0),               # 1.32x: misses; 1.9x tinygemm
                row("env", "k/v", 3.1, 1.5, 16, tg=3.0),                      # 2.07x floor; slower than tinygemm
                row("env", "lm_head", 115.0, 70.0, 16, bs=16, zp=True),       # 1.095x bs 32's ratio
                row("tensor_core", "lm_head", 120.0, 60.0, 16)]}              # not env: judges nothing


def test_the_batch_targets_judge_the_environment_unset_rows():
    checks = {(t, r): ok for t, r, _, _, ok in check_batch_targets(batch_doc())}
    assert checks[("M=16 x floor", "lm_head bs32 float16 M=16")]
    assert not checks[("bf16 / fp16 env (M>=2)", "lm_head bs32 M=16")]
    assert not checks[("M=8 x floor", "lm_head bs32 float16 M=8")]
    assert not checks[("tinygemm / env (M>=2)", "lm_head bs32 float16 M=8")]     # 1.9 < 2
    assert checks[("tinygemm / env (M>=2)", "lm_head bs32 float16 M=16")]
    assert not checks[("M=16 x floor", "k/v bs32 float16 M=16")]                # 2.07 > 2
    assert not checks[("tinygemm / env (M>=2)", "k/v bs32 float16 M=16")]
    assert checks[("format / bs32 at M=16", "bs16+zp float16")]
    assert not checks[("M=16 x floor", "lm_head bs32 bfloat16 M=16")] and len(checks) == 10
    md = format_markdown(batch_doc())
    assert "| lm_head | 32 | no | 16 | 60.00 | 90.00 (67%) | 95.00 (63%) | 120.00 (50%) | 340.00 |" in md


def test_the_markdown_table_shows_probe_configurations_after_the_variants():
    doc = batch_doc()
    doc["rows"].append(dict(doc["rows"][-1], kind="probe", variant="c2l4u4b3w4mk4", us=80.0,
                            pct_floor=75.0))
    md = format_markdown(doc)
    assert "| tensor_core fp16 | c2l4u4b3w4mk4 fp16 | tinygemm µs |" in md
    assert "| 120.00 (50%) | 80.00 (75%) | 340.00 |" in md


def test_probe_configs_parse_or_are_refused():
    from bench.target_probes import parse_config

    assert parse_config("c4u1b5p") == {"cols": 4, "unroll": 1, "blocks_per_sm": 5, "pipeline": True,
                                       "mma": False}
    assert parse_config("c2u2b6") == {"cols": 2, "unroll": 2, "blocks_per_sm": 6, "pipeline": False,
                                      "mma": False}
    assert parse_config("c2l4u2b4m") == {"cols": 2, "lanes": 4, "unroll": 2, "blocks_per_sm": 4,
                                         "pipeline": False, "mma": True}
    assert parse_config("c2l4u2b2w8m") == {"cols": 2, "lanes": 4, "unroll": 2, "blocks_per_sm": 2,
                                           "warps": 8, "pipeline": False, "mma": True}
    assert parse_config("c2l4u4b4w4mk4") == {"cols": 2, "lanes": 4, "unroll": 4, "blocks_per_sm": 4,
                                             "warps": 4, "pipeline": False, "mma": True, "ksplit": 4}
    assert parse_config("c4u2b4d120") == {"cols": 4, "unroll": 2, "blocks_per_sm": 4, "pipeline": False,
                                          "mma": False, "stagger": 120}
    for bad in ("c2l4u2b4mx0", "c2l4u2b4mn", "c2l4u2b4w", "c2l4u2b4mw8", "c2l4u2b4k4m",
                "c4u2b4d"):   # fold variants; w before p/m, k last
        with pytest.raises(ValueError, match="config"):
            parse_config(bad)
    with pytest.raises(SystemExit):
        targets.parse_args(["--out", "x", "--configs", "c4u1"])


@pytest.mark.parametrize("spec, fields, shapes", [
    ("tck4u4w8b2d0@gate/up+down", dict(ksplit=4, unroll=4, warps=8, blocks_per_sm=2, double_buffer=False),
     ("gate/up", "down")),
    ("tct2b2", dict(tiles=2, blocks_per_sm=2), None), ("tcd1", dict(double_buffer=True), None)])
def test_tensor_core_probe_specs_parse(spec, fields, shapes):
    from bench.target_tc_probes import parse_tc_config, tc_config, tc_shapes

    assert parse_tc_config(spec) == (fields, shapes)
    assert tc_shapes(spec, ["lm_head"]) == (shapes or ("lm_head",))
    config = tc_config(spec, 8, 6144, 2048, 32, "float16", False, 132)
    assert all(getattr(config, k) == v for k, v in fields.items())


@pytest.mark.parametrize("spec", ["tck4k2", "tcd2", "tcx4", "tck4@qkv", "tck4u"])
def test_bad_tensor_core_probe_specs_are_usage_errors(spec):
    with pytest.raises(SystemExit) as exc:
        targets.parse_args(["--out", "x", "--configs", spec])
    assert exc.value.code == 2


def test_the_simulator_runs_tensor_core_probes_checked(tmp_path, capsys):
    rc, _, _ = simulated_run(["--out", str(tmp_path), "--formats", "32", "--variants", "tensor_core",
                              "--m", "1,2", "--dtypes", "float16", "--no-tinygemm",
                              "--configs", "tck4u4w8b2d0@gate/up+down,tct2b2@lm_head"], capsys)
    assert rc == 0
    (path,) = tmp_path.glob("targets-*.json")
    probes = [r for r in json.loads(path.read_text())["rows"] if r["kind"] == "probe"]
    # 2 tiny shapes x 2 specs at M = 2 (none at M = 1): poisoned, every element checked
    assert len(probes) == 4 and all(r["ok"] and r["M"] == 2 for r in probes)


def test_the_gpu_lock_is_released_only_while_compiling(tmp_path):
    import fcntl

    from bench import gpu_lock

    lock = tmp_path / "gpu.lock"

    def free():
        with open(lock, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(f, fcntl.LOCK_UN)
            return True
    gpu_lock.configure(lock)
    try:
        assert free()
        gpu_lock.acquire()
        assert not free()
        with gpu_lock.compiling():
            assert free()
        assert not free()
    finally:
        gpu_lock.configure(None)
        assert free()
    with gpu_lock.compiling():   # no lock file: a no-op
        pass


def test_the_env_row_is_skipped_not_faked_when_a_control_is_set(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "1")
    rc, _, err = simulated_run(["--out", str(tmp_path), "--formats", "32", "--dtypes", "float16",
                                "--variants", "default,env"], capsys)
    assert rc == 0
    doc = json.loads(next(tmp_path.glob("targets-*.json")).read_text())
    assert {r["variant"] for r in doc["rows"] if r["kind"] == "int4gemv"} == {"default"}
    assert "INT4GEMV_SINGLE_WARP set" in err


def test_runs_started_in_the_same_second_get_their_own_files(tmp_path):
    # Two bench.targets processes started in one second wrote one file on the H200 (78f170d):
    # each run claims its name (its partial file) exclusively.
    from bench.targets import claim_paths
    first = claim_paths(tmp_path, "targets-x-20261204T153925")
    second = claim_paths(tmp_path, "targets-x-20261204T153925")
    assert first[0].name == "targets-x-20261204T153925.json"
    assert second[0].name == "targets-x-20261204T153925-2.json"
    assert first[1].exists() and second[1].exists()
    first[0].write_text("{}")
    first[1].unlink()  # a finished run: its final file keeps the name taken
    assert claim_paths(tmp_path, "targets-x-20261204T153925")[0].name == "targets-x-20261204T153925-3.json"
