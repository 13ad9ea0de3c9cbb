"""Environment controls, precedence, eligibility and plans: pure functions, no CUDA."""

import numpy as np
import pytest

from int4gemv import plan_gemv, read_controls, single_warp_eligibility
from int4gemv.controls import COLS, LEGACY, PRIMARY, UNROLL, raw_environment
from int4gemv.kernels import default as default_tiling
from int4gemv.kernels import single_warp

F16 = np.float16


def plan(controls, M=1, N=4096, K=2048, bs=32, dtype=F16, device=None, table=None):
    return plan_gemv(M, N, K, bs, dtype, controls, device, {} if table is None else table)


@pytest.mark.parametrize("env, variant, mode, source", [
    ({}, None, "off", "default"),
    ({PRIMARY: "1"}, None, "on", PRIMARY),
    ({PRIMARY: "0"}, None, "off", PRIMARY),
    ({PRIMARY: "auto"}, None, "auto", PRIMARY),
    ({PRIMARY: "AUTO"}, None, "auto", PRIMARY),
    ({LEGACY: "1"}, None, "on", LEGACY),
    ({LEGACY: "0"}, None, "off", LEGACY),
    ({PRIMARY: "1", LEGACY: "1"}, None, "on", PRIMARY),
    ({PRIMARY: "0", LEGACY: "1"}, None, "off", PRIMARY),
    ({PRIMARY: "1", LEGACY: "0"}, None, "on", PRIMARY),
    ({PRIMARY: "1"}, "default", "off", "variant="),
    ({LEGACY: "1"}, "default", "off", "variant="),
    ({}, "single_warp", "on", "variant="),
    ({PRIMARY: "0"}, "auto", "auto", "variant="),
])
def test_precedence(env, variant, mode, source):
    c = read_controls(variant, env)
    assert c.mode == mode
    assert c.source.startswith(source)


def test_disagreement_warns_naming_both_and_primary_wins():
    c = read_controls(None, {PRIMARY: "0", LEGACY: "1"})
    assert c.mode == "off"
    assert len(c.warnings) == 1 and PRIMARY in c.warnings[0] and LEGACY in c.warnings[0]
    assert read_controls(None, {PRIMARY: "1", LEGACY: "1"}).warnings == ()
    # An argument still reports the conflicting environment.
    assert read_controls("default", {PRIMARY: "0", LEGACY: "1"}).warnings


@pytest.mark.parametrize("env, name", [
    ({PRIMARY: "yes"}, PRIMARY), ({PRIMARY: ""}, PRIMARY), ({LEGACY: "auto"}, LEGACY),
    ({LEGACY: "2"}, LEGACY), ({COLS: "3"}, COLS), ({COLS: "four"}, COLS), ({UNROLL: "16"}, UNROLL),
])
def test_invalid_values_name_the_variable_and_accepted_values(env, name):
    with pytest.raises(ValueError, match=name) as info:
        read_controls(None, env)
    assert "accepted values" in str(info.value)


@pytest.mark.parametrize("variant", ["fast", 1, ["single_warp"]])
def test_invalid_variant(variant):
    with pytest.raises(ValueError, match="variant"):
        read_controls(variant, {})


def test_environment_is_read_at_call_time(monkeypatch):
    assert read_controls().mode == "off"
    monkeypatch.setenv(PRIMARY, "1")
    assert read_controls().mode == "on"


def test_raw_environment_follows_os_environ(monkeypatch):
    """The fast path's key: every change to the four variables shows, unset reads as None."""
    for name in (PRIMARY, LEGACY, COLS, UNROLL):
        monkeypatch.delenv(name, raising=False)
    assert raw_environment() == (None, None, None, None)
    before = set()
    for i, name in enumerate((PRIMARY, LEGACY, COLS, UNROLL)):
        monkeypatch.setenv(name, str(i + 1))
        now = raw_environment()
        assert now[i] is not None and now not in before
        before.add(now)
    monkeypatch.delenv(COLS)
    assert raw_environment()[2] is None and raw_environment()[3] is not None


@pytest.mark.parametrize("M, K, bs, dtype, ok, words", [
    (1, 2048, 32, F16, True, ""),
    (1, 2048, 64, F16, False, "block_size is 64"),
    (2, 2048, 32, F16, False, "batch M is 2"),
    (1, 2056, 32, F16, False, "K=2056"),
    (1, 2048, 32, np.float32, False, "float32"),
])
def test_eligibility(M, K, bs, dtype, ok, words):
    eligible, why = single_warp_eligibility(M, K, bs, dtype, N=151936)
    assert eligible == ok and words in why


@pytest.mark.parametrize("N, ok", [(2**32 // 128 - 1, True), (2**32 // 128, False)])
def test_eligibility_needs_32_bit_word_indices(N, ok):
    eligible, why = single_warp_eligibility(1, 2048, 32, F16, N=N)
    assert eligible == ok and (ok or "2**32" in why)


def test_default_is_default_tiling_and_opt_in():
    p = plan(read_controls(None, {}))
    assert p.kernel == "default" and "opt-in" in p.reason
    assert (p.grid, p.block, p.shared_bytes) == ((512, 1, 1), (256, 1, 1), default_tiling.SHARED_BYTES)


def test_forced_single_warp_and_its_geometry():
    p = plan(read_controls(None, {PRIMARY: "1"}), N=4097)
    assert p.kernel == "single_warp" and (p.cols, p.unroll) == single_warp.DEFAULT_TUNING
    assert p.grid == (min(-(-4097 // p.cols), 132 * single_warp.BLOCKS_PER_SM), 1, 1)
    assert p.block == (32, 1, 1) and p.shared_bytes == 0
    assert p.activations == ("registers" if 2048 <= 512 * p.unroll else "streaming")
    assert PRIMARY in p.control and "eligible" in p.reason


def test_forced_on_ineligible_shape_falls_back_and_says_why():
    p = plan(read_controls(None, {LEGACY: "1"}), bs=64)
    assert p.kernel == "default" and "ineligible" in p.reason and "block_size is 64" in p.reason
    assert "legacy alias" in p.control


def test_activation_modes():
    assert plan(read_controls("single_warp", {UNROLL: "4"}), K=2048).activations == "registers"
    assert plan(read_controls("single_warp", {UNROLL: "4"}), K=2080).activations == "streaming"
    p = plan(read_controls("single_warp", {}), K=6144)
    assert p.activations == "streaming" and p.shared_bytes == 0


def test_tuning_overrides():
    p = plan(read_controls("single_warp", {COLS: "2", UNROLL: "8"}))
    assert (p.cols, p.unroll) == (2, 8) and COLS in p.tuning
    with pytest.raises(ValueError, match="not a compiled tuning"):
        plan(read_controls("single_warp", {COLS: "8", UNROLL: "8"}))


def test_auto_uses_the_table_exact_then_nearest_then_rule():
    table = {"GPU X": {(4096, 2048): dict(N=4096, K=2048, variant="default", cols=None, unroll=None),
                       (151936, 2048): dict(N=151936, K=2048, variant="single_warp", cols=2, unroll=4)}}
    auto = read_controls("auto", {})
    exact = plan(auto, N=4096, device="GPU X", table=table)
    assert exact.kernel == "default" and "measured" in exact.reason
    near = plan(auto, N=100000, device="GPU X", table=table)
    assert near.kernel == "single_warp" and (near.cols, near.unroll) == (2, 4) and "nearest" in near.reason
    unknown = plan(auto, device="GPU Y", table=table)
    assert unknown.kernel == "single_warp" and "no measurements" in unknown.reason
    inel = plan(auto, bs=16, device="GPU X", table=table)
    assert inel.kernel == "default" and "ineligible" in inel.reason


def test_committed_autotune_table_is_consistent():
    from int4gemv.dispatch import load_autotune_table
    for gpu, entries in load_autotune_table().items():
        for (N, K), e in entries.items():
            assert e["variant"] in ("default", "single_warp")
            if e["variant"] == "single_warp":
                assert (e["cols"], e["unroll"]) in single_warp.TUNINGS


def test_plan_str_is_readable():
    text = str(plan(read_controls(None, {PRIMARY: "0", LEGACY: "1"})))
    for word in ("kernel", "grid", "block", "shared", "control", "reason", "warning"):
        assert word in text
