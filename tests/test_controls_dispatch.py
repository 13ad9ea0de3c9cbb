"""The dispatcher: kernel descriptors, eligibility, plans and the autotune table. Pure functions,
no CUDA."""

import json

import pytest

from int4gemv import Problem, Tuning, plan_gemv
from int4gemv.autotune import load_autotune_table, lookup, parse_table
from int4gemv.descriptor import KernelDescriptor, Launch
from int4gemv.kernels import default as default_tiling
from int4gemv.kernels import single_warp
from int4gemv.registry import KERNELS, descriptor, register
from int4gemv.tuning import resolve_tuning

SW = descriptor("single_warp")
DEFAULT = descriptor("default")


def problem(M=1, N=4096, K=2048, bs=32, dtype="float16", zp=False, bias=False, align=16):
    return Problem(M, N, K, bs, dtype, zp, bias, align)


def plan(tuning=None, table=None, device=None, **kw):
    return plan_gemv(problem(**kw), resolve_tuning(tuning), device_name=device,
                     table={} if table is None else table)


@pytest.mark.parametrize("kw, ok, words", [
    (dict(), True, ""),
    (dict(bs=64), False, "block_size is 64"),
    (dict(bs=16), False, "block_size is 16"),
    (dict(M=2), False, "batch M is 2"),
    (dict(K=2056), False, "K=2056"),
    (dict(K=2064), False, "K=2064 is not a multiple of 32"),
    (dict(dtype="bfloat16"), False, "bfloat16, not float16"),
    (dict(zp=True, bias=True), True, ""),
])
def test_single_warp_eligibility(kw, ok, words):
    eligible, why = SW.eligibility(problem(N=151936, **kw))
    assert eligible == ok and words in why


@pytest.mark.parametrize("N, ok", [(2**32 // 128 - 1, True), (2**32 // 128, False)])
def test_single_warp_needs_32_bit_word_indices(N, ok):
    eligible, why = SW.eligibility(problem(N=N))
    assert eligible == ok and (ok or "2**32" in why)


@pytest.mark.parametrize("kw", [dict(), dict(M=16, bs=128, zp=True, K=8), dict(dtype="bfloat16"),
                                dict(M=3, bs=16, K=40, align=2)])
def test_default_tiling_serves_every_problem(kw):
    eligible, why = DEFAULT.eligibility(problem(**kw))
    assert eligible and "every" in why


def test_problem_checks_itself():
    with pytest.raises(ValueError, match="above 16"):
        problem(M=17)
    with pytest.raises(ValueError, match="dtype"):
        problem(dtype="float32")
    with pytest.raises(ValueError, match="act_align"):
        problem(align=3)


def test_default_is_default_tiling_and_opt_in():
    p = plan()
    assert p.kernel == "default" and "opt-in" in p.reason
    config = default_tiling.choose_config(1, 4096, 2048, 32, "float16", False)
    assert p.config == config
    assert (p.grid, p.block) == default_tiling.geometry(config, 4096, 132) and p.shared_bytes == 0
    assert "default (INT4GEMV_SINGLE_WARP unset)" in p.control


def test_batch_is_one_launch_of_an_m_specialized_kernel():
    # every row in one launch (the weight is read once): M is compiled in, not grid.y
    p = plan(M=5)
    assert p.config.M == 5 and p.grid[1] == 1 and p.grid[2] == 1


def test_forced_single_warp_and_its_geometry():
    p = plan("single_warp", N=4097)
    assert p.kernel == "single_warp" and (p.cols, p.unroll) == single_warp.DEFAULT_TUNING
    assert p.grid == (min(-(-4097 // p.cols), 132 * single_warp.BLOCKS_PER_SM), 1, 1)
    assert p.block == (32, 1, 1) and p.shared_bytes == 0
    assert p.activations == ("registers" if 2048 <= 512 * p.unroll else "streaming")
    assert "eligible" in p.reason


@pytest.mark.parametrize("kw, words", [(dict(bs=64), "block_size is 64"), (dict(M=2), "batch M"),
                                       (dict(K=2056), "K=2056")])
def test_forced_on_ineligible_problem_falls_back_and_says_why(kw, words):
    p = plan("single_warp", **kw)
    fallback = "tensor_core" if kw.get("M", 1) >= 2 else "default"   # the default for M >= 2
    assert p.kernel == fallback and "ineligible" in p.reason and words in p.reason


def test_bf16_runs_the_default_tiling_and_says_why():
    for tuning in ("default", "single_warp", "auto"):
        p = plan(tuning, dtype="bfloat16")
        assert p.kernel == "default" and p.config.dtype == "bfloat16"
    assert "bfloat16, not float16" in plan("single_warp", dtype="bfloat16").reason


def test_activation_modes_and_alignment():
    assert plan(Tuning("single_warp", unroll=4), K=2048).activations == "registers"
    assert plan(Tuning("single_warp", unroll=4), K=2080).activations == "streaming"
    assert plan(Tuning("single_warp", activations="streaming"), K=64).activations == "streaming"
    with pytest.raises(ValueError, match="registers.*needs K <= 512"):
        plan(Tuning("single_warp", unroll=1, activations="registers"), K=1024)
    assert plan("single_warp", align=8).config.wide and not plan("single_warp", align=4).config.wide


def test_tuning_fields_reach_the_config():
    p = plan(Tuning("single_warp", cols=2, unroll=8, pdl=True, prefetch=True))
    assert (p.cols, p.unroll, p.config.pdl, p.config.prefetch) == (2, 8, True, True)
    with pytest.raises(ValueError, match="not a compiled single-warp tuning"):
        plan(Tuning("single_warp", cols=8, unroll=8))


TABLE = parse_table({"schema": 2, "devices": {"GPU X": {"entries": [
    dict(N=4096, K=2048, M=1, block_size=32, zero_points=False, dtype="float16", variant="default"),
    dict(N=151936, K=2048, M=1, block_size=32, zero_points=False, dtype="float16",
         variant="single_warp", cols=2, unroll=4, note="2x4 faster"),
    dict(N=4096, K=2048, M=1, block_size=32, zero_points=True, dtype="float16",
         variant="single_warp", cols=8, unroll=2)]}}})


def test_auto_uses_the_table_exact_then_nearest_then_rule():
    exact = plan("auto", TABLE, "GPU X", N=4096)
    assert exact.kernel == "default" and "measured" in exact.reason
    near = plan("auto", TABLE, "GPU X", N=100000)
    assert near.kernel == "single_warp" and (near.cols, near.unroll) == (2, 4) and "nearest" in near.reason
    assert dict((n, s) for n, _, s in near.sources)["cols"].startswith("autotune table")
    unknown = plan("auto", TABLE, "GPU Y")
    assert unknown.kernel == "single_warp" and "no measurements" in unknown.reason
    inel = plan("auto", TABLE, "GPU X", bs=16)
    assert inel.kernel == "default" and "ineligible" in inel.reason


def test_auto_skips_a_table_entry_whose_kernel_is_ineligible():
    """auto takes a table entry only where its kernel can run the problem: the single_warp
    entry nearest K=2064 (not a multiple of 32) is passed over for the default kernel."""
    assert not SW.eligibility(problem(N=151936, K=2064))[0]
    p = plan("auto", TABLE, "GPU X", N=151936, K=2064)
    assert p.kernel == "default" and "ineligible" in p.reason and "K=2064" in p.reason
    assert not any(s.startswith("autotune table") for _, _, s in p.sources)


def test_auto_nearest_shape_weighs_k_as_well_as_n():
    """The nearest measured shape is nearest in log N and log K: at N=2048, K=8000 the entry
    at K=8192 is taken, not the one at K=2048 (same N)."""
    table = parse_table({"schema": 2, "devices": {"GPU X": {"entries": [
        dict(N=2048, K=2048, M=1, block_size=32, zero_points=False, dtype="float16", variant="default"),
        dict(N=2048, K=8192, M=1, block_size=32, zero_points=False, dtype="float16",
             variant="single_warp", cols=2, unroll=4)]}}})
    p = plan("auto", table, "GPU X", N=2048, K=8000)
    assert p.kernel == "single_warp" and (p.cols, p.unroll) == (2, 4)
    assert "nearest measured shape on GPU X is N=2048 K=8192" in p.reason


def test_auto_table_is_keyed_on_zero_points_and_given_fields_win():
    zp = plan("auto", TABLE, "GPU X", N=4096, zp=True)
    assert zp.kernel == "single_warp" and (zp.cols, zp.unroll) == (8, 2)
    own = plan(Tuning("auto", cols=1), TABLE, "GPU X", N=151936)
    assert (own.cols, own.unroll) == (1, 4)


def test_committed_autotune_table_reads_as_m1_bs32_fp16():
    table = load_autotune_table()
    assert table, "the committed table is package data"
    for gpu, configs in table.items():
        assert set(configs) == {(1, 32, False, "float16")}
        for e in configs[(1, 32, False, "float16")].values():
            if e.variant == "single_warp":
                assert (e.cols, e.unroll) in single_warp.TUNINGS
    entry, how = lookup(table, "NVIDIA H200", problem(N=2048, K=2048))
    assert entry is not None and "measured" in how


@pytest.mark.parametrize("doc, words", [
    ({"schema": 3, "devices": {}}, "'schema'"),
    ({"schema": 2, "devices": []}, "'devices'"),
    ({"schema": 2, "devices": {"G": {"entries": {}}}}, "entries'] must be a list"),
    ({"schema": 2, "devices": {"G": {"entries": [dict(N=1, K=8, variant="default")]}}}, "lacks 'M'"),
    ({"schema": 1, "devices": {"G": {"entries": [dict(N=0, K=8, variant="default")]}}}, "'N' must be"),
    ({"schema": 1, "devices": {"G": {"entries": [dict(N=1, K=8, variant="fast")]}}}, "'variant'"),
    ({"schema": 1, "devices": {"G": {"entries": [dict(N=1, K=8, variant="default", cols=3)]}}}, "'cols'"),
    ({"schema": 1, "devices": {"G": {"entries": [dict(N=1, K=8, variant="default", colz=2)]}}}, "unknown keys"),
    ({"schema": 2, "devices": {"G": {"entries": [dict(N=1, K=8, M=1, block_size=32, zero_points=0,
                                                     dtype="float16", variant="default")]}}}, "'zero_points'"),
])
def test_malformed_tables_are_refused_naming_the_entry(doc, words):
    with pytest.raises(ValueError, match="my.json") as info:
        parse_table(doc, "my.json")
    assert words in str(info.value)


def test_malformed_table_file(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_autotune_table(str(bad))
    good = tmp_path / "g.json"
    good.write_text(json.dumps({"schema": 1, "devices": {"G": {"entries": [
        dict(N=8, K=64, variant="single_warp", cols=1, unroll=1)]}}}))
    assert load_autotune_table(str(good))["G"][(1, 32, False, "float16")][(8, 64)].cols == 1


def test_registry_holds_one_descriptor_per_kernel():
    assert set(KERNELS) == {"default", "single_warp", "tensor_core"}
    with pytest.raises(ValueError, match="already registered"):
        register(SW)
    with pytest.raises(TypeError):
        register("single_warp")
    with pytest.raises(KeyError, match="registered: default, single_warp, tensor_core"):
        descriptor("tiled")
    with pytest.raises(TypeError, match="callable"):
        KernelDescriptor("k", "s", None, None, None)
    with pytest.raises(ValueError, match="grid"):
        Launch(None, (), (0, 1, 1), (32, 1, 1))


def test_plan_str_is_readable():
    text = str(plan_gemv(problem(), resolve_tuning(environ={"INT4GEMV_SINGLE_WARP": "0",
                                                          "INT4GEMV_ENABLE_SINGLE_WARP_GEMV": "1"}),
                         table={}))
    for word in ("kernel", "grid", "block", "shared", "tuning", "reason", "warning", "problem"):
        assert word in text
