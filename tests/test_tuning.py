"""Tunings as data: the Tuning value, the one resolution with its precedence, and explain()'s
account of where each field came from. Pure host logic except the last tests (simulator)."""

import numpy as np
import pytest

import int4gemv as ig
from int4gemv.tuning import COLS, LEGACY, PRIMARY, UNROLL, Tuning, resolve_tuning


def resolve(env, **kwargs):
    return resolve_tuning(environ=env, **kwargs)


@pytest.mark.parametrize("env, variant, want, source", [
    ({}, None, "default", "default"),
    ({PRIMARY: "1"}, None, "single_warp", PRIMARY),
    ({PRIMARY: "0"}, None, "default", PRIMARY),
    ({PRIMARY: "auto"}, None, "auto", PRIMARY),
    ({PRIMARY: " AUTO "}, None, "auto", PRIMARY),
    ({LEGACY: "1"}, None, "single_warp", LEGACY),
    ({LEGACY: "0"}, None, "default", LEGACY),
    ({PRIMARY: "1", LEGACY: "1"}, None, "single_warp", PRIMARY),
    ({PRIMARY: "0", LEGACY: "1"}, None, "default", PRIMARY),
    ({PRIMARY: "1", LEGACY: "0"}, None, "single_warp", PRIMARY),
    ({PRIMARY: "1"}, "default", "default", "argument variant="),
    ({LEGACY: "1"}, "default", "default", "argument variant="),
    ({}, "single_warp", "single_warp", "argument variant="),
    ({PRIMARY: "0"}, "auto", "auto", "argument variant="),
])
def test_variant_precedence(env, variant, want, source):
    r = resolve(env, variant=variant)
    assert r.tuning.variant == want and r.source("variant").startswith(source)


def test_disagreement_warns_naming_both_and_primary_wins():
    r = resolve({PRIMARY: "0", LEGACY: "1"})
    assert r.tuning.variant == "default"
    assert len(r.warnings) == 1 and PRIMARY in r.warnings[0] and LEGACY in r.warnings[0]
    assert resolve({PRIMARY: "1", LEGACY: "1"}).warnings == ()
    assert resolve({PRIMARY: "0", LEGACY: "1"}, variant="default").warnings  # still reported


@pytest.mark.parametrize("env, name", [
    ({PRIMARY: "yes"}, PRIMARY), ({PRIMARY: ""}, PRIMARY), ({LEGACY: "auto"}, LEGACY),
    ({LEGACY: "2"}, LEGACY), ({COLS: "3"}, COLS), ({COLS: "four"}, COLS), ({UNROLL: "16"}, UNROLL),
])
def test_invalid_environment_names_the_variable_and_accepted_values(env, name):
    with pytest.raises(ValueError, match=name) as info:
        resolve(env)
    assert "accepted values" in str(info.value)


def test_environment_sets_cols_and_unroll_and_names_itself():
    r = resolve({COLS: "2", UNROLL: "8"}, variant="single_warp")
    assert (r.tuning.cols, r.tuning.unroll) == (2, 8)
    assert r.source("cols") == f"{COLS}=2" and r.source("unroll") == f"{UNROLL}=8"


def test_a_given_tuning_is_used_as_given_and_reads_no_environment():
    env = {PRIMARY: "garbage", COLS: "3"}  # would be refused if it were read
    t = Tuning("single_warp", cols=2, unroll=4)
    assert resolve(env, tuning=t).tuning is t
    assert resolve(env, tuning="auto").tuning == Tuning("auto")
    assert resolve(env, tuning=t).source("cols") == "argument tuning="


def test_environment_is_read_at_call_time(monkeypatch):
    assert resolve_tuning().tuning.variant == "default"
    monkeypatch.setenv(PRIMARY, "1")
    assert resolve_tuning().tuning.variant == "single_warp"


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(variant="fast"), ValueError, "Tuning.variant"),
    (dict(variant=1), ValueError, "Tuning.variant"),
    (dict(cols=3), ValueError, "Tuning.cols must be one of"),
    (dict(cols=2.0), TypeError, "Tuning.cols must be an int"),
    (dict(cols=True), TypeError, "Tuning.cols must be an int"),
    (dict(unroll=16), ValueError, "Tuning.unroll must be one of"),
    (dict(unroll="4"), TypeError, "Tuning.unroll must be an int"),
    (dict(activations="shared"), ValueError, "Tuning.activations"),
    (dict(pdl=1), TypeError, "Tuning.pdl must be a bool"),
    (dict(prefetch="yes"), TypeError, "Tuning.prefetch must be a bool"),
    (dict(prefetch=True), ValueError, "Tuning.prefetch needs pdl=True"),
])
def test_tuning_checks_itself_naming_the_field(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Tuning(**kwargs)


def test_tuning_is_frozen_hashable_and_equal_by_value():
    t = Tuning("single_warp", np.int64(4), 2, "streaming", True, True)
    assert t == Tuning("single_warp", 4, 2, "streaming", True, True) and type(t.cols) is int
    assert hash(t) == hash(Tuning("single_warp", 4, 2, "streaming", True, True))
    assert len({t, Tuning("single_warp", 4, 2, "streaming", True, True), Tuning()}) == 2
    with pytest.raises(AttributeError):
        t.cols = 8


@pytest.mark.parametrize("variant", ["fast", 1, ["single_warp"]])
def test_invalid_variant_keyword(variant):
    with pytest.raises(ValueError, match="variant"):
        resolve({}, variant=variant)


def test_tuning_and_shorthands_are_exclusive():
    with pytest.raises(TypeError, match="not both"):
        resolve({}, tuning=Tuning(), pdl=True)


@pytest.mark.parametrize("M, K, dtype, cols, unroll, cols_why, unroll_why", [
    (1, 2048, "float16", 4, 2, "4 columns per lane step at M = 1 (8 loads", "2 chunks per lane step (each lane has 2"),
    (1, 2048, "bfloat16", 4, 2, "32 lanes per column (K = 2048: 64 chunks", "2 chunks per lane step"),
])
def test_explain_says_why_the_default_tiling_chose_its_columns_and_unroll(rng, M, K, dtype, cols, unroll,
                                                                        cols_why, unroll_why):
    # N = 9216: enough column groups that no SM count up to 132 halves the columns; on a device
    # of few SMs (the simulator's 1) enough for the tensor-core fold too, which says so.
    from int4gemv.device import device_facts
    from int4gemv.kernels.default_config import mma_pays

    w = ig.quantize(rng.standard_normal((9216, K)).astype(np.float32), 32, dtype=dtype)
    a = rng.standard_normal((M, K)).astype(w.dtype)
    plan = ig.explain(a, w)
    rows = {name: (value, source) for name, value, source in plan.sources}
    if mma_pays(M, 9216, K, device_facts()[1]):
        cols, cols_why = 2, "the tensor-core fold (mma.sync m16n8k16"
        unroll_why = "2 chunks per lane step (each lane has 16"     # 64 chunks over 4 lanes
    assert plan.kernel == "default" and (rows["cols"][0], rows["unroll"][0]) == (cols, unroll)
    assert rows["cols"][1].startswith("default kernel's choice: ") and cols_why in rows["cols"][1]
    assert unroll_why in rows["unroll"][1] and unroll_why in str(plan)


def test_the_default_tiling_says_when_it_halved_its_columns_for_a_short_n(monkeypatch):
    from int4gemv.kernels import default_config
    from int4gemv.kernels.default import choice_reasons, choose_config

    monkeypatch.setattr(default_config, "MMA_CHOSEN", True)    # the mma rule's explanation too
    config = choose_config(1, 1024, 2048, 32, "float16", False, multiprocessors=132)
    why = choice_reasons(config, 1024, 2048, 132)
    assert config.cols == 1 and "halved to 1 so N = 1024 gives every one of 132 SMs 4 warps" in why["cols"]
    wide = choose_config(1, 65536, 2048, 32, "float16", False, multiprocessors=132)
    assert wide.cols == 4 and "halved" not in choice_reasons(wide, 65536, 2048, 132)["cols"]
    lm_head = choose_config(1, 151936, 2048, 32, "float16", False, multiprocessors=132)
    why = choice_reasons(lm_head, 151936, 2048, 132)["cols"]
    assert lm_head.mma and "tensor-core fold" in why and "each of the 2112 warps >= 4 groups" in why


@pytest.mark.parametrize("M, N, cols, warps", [
    (1, 2109, 4, 4),     # ceil(2109 / 4) = 528 groups of 4 columns: 4 warps on each of 132 SMs
    (1, 2108, 2, 4),     # 527 groups: 2 columns per lane
    (1, 1055, 2, 4),     # 528 groups of 2 columns
    (1, 1054, 1, 4),
    (2, 2111, 2, 8),     # M > 1: the 8-warp target, 1056 groups of 2 columns
    (2, 2110, 1, 8),
])
def test_m1_halves_columns_below_four_warps_per_sm(M, N, cols, warps):
    from int4gemv.kernels.default import choice_reasons, choose_config

    config = choose_config(M, N, 2048, 32, "float16", False, multiprocessors=132)
    why = choice_reasons(config, N, 2048, 132)["cols"]
    assert config.cols == cols
    assert (f"SMs {warps} warps" in why) == (cols < (4 if M == 1 else 2))


@pytest.mark.parametrize("M, blocks", [(2, 4), (4, 4), (5, 2), (8, 2)])
def test_cuda_core_tiling_keeps_four_blocks_per_sm_up_to_m4(M, blocks):
    """The default tiling on CUDA cores with several columns: 4 resident blocks per SM up to
    M = 4, 2 beyond (measured on the H200, bench/NOTES.md). N = K = 4096 keeps it off the
    tensor-core folds at every M here."""
    from int4gemv.kernels.default import choose_config

    config = choose_config(M, 4096, 4096, 32, "float16", False, multiprocessors=132)
    assert not config.mma and config.cols == 2 and config.blocks_per_sm == blocks


def test_explain_shows_every_field_and_its_source(rng, monkeypatch):
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)
    a = rng.standard_normal(64).astype(np.float16)
    monkeypatch.setenv(PRIMARY, "1")
    monkeypatch.setenv(COLS, "2")
    plan = ig.explain(a, w)
    rows = {name: (value, source) for name, value, source in plan.sources}
    assert rows["variant"] == ("single_warp", f"{PRIMARY}=1")
    assert rows["cols"] == (2, f"{COLS}=2")
    assert rows["unroll"][1] == "single_warp kernel's choice"
    assert rows["pdl"] == (False, "default")
    text = str(plan)
    assert f"{COLS}=2" in text and "kernel's choice" in text
    given = ig.explain(a, w, tuning=Tuning("single_warp", cols=1, unroll=2))
    assert dict((n, s) for n, _, s in given.sources)["cols"] == "argument tuning="
    assert (given.cols, given.unroll) == (1, 2)
    fallback = ig.explain(a, w, tuning=Tuning("default", cols=2, activations="streaming"))
    sources = dict((n, s) for n, _, s in fallback.sources)
    assert fallback.config.cols == 2 and sources["cols"] == "argument tuning="
    assert "not used by the default kernel" in sources["activations"]
