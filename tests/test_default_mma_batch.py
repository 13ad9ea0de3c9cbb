"""The default tiling's M = 2..16 fold on tensor cores (``kernels/default_mma_batch.py``) against
float64: every format and dtype, every M, every K tail, several steps and column groups per warp,
outputs poisoned and every element checked (:mod:`default_kernel_check`)."""

import json
from dataclasses import replace
from importlib import resources

import numpy as np
import pytest

import int4gemv as ig
from default_kernel_check import DTYPES, TOL, check, make, mma_config, reference, run
from int4gemv.descriptor import Problem
from int4gemv.dispatch import plan_gemv
from int4gemv.kernels.default import MAX_M, DefaultConfig, choose_config
from int4gemv.kernels.mma_tiling import mma_batch_pays
from int4gemv.tuning import resolve_tuning


def _config(dtype, M, K, bs, zp, unroll=1, warps=1, pdl=False, cols=2):
    """The mma tiling (4 lanes, ``cols`` columns per lane) at M rows; with N = 69 one warp walks
    5 groups of 16 columns (cols 2) or 3 of 32 (cols 4), the last one partial."""
    return mma_config(dtype, M, K, bs, zp, cols=cols, unroll=unroll, warps=warps, pdl=pdl)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("zp", [False, True])
def test_every_format(rng, dtype, bs, zp):
    # K = 2 bs + 8: a partial last group and a last chunk of one word; M = 5 (rows 5..7 of the
    # tile absent); unroll 2 at bs >= 64 (the step's second chunk clamped past the column); two
    # column tiles (cols 4) with zero points.
    K = 2 * bs + 8
    a, w, bias = make(rng, 69, K, bs, zp, 5, dtype)
    config = _config(dtype, 5, K, bs, zp, unroll=2 if bs >= 64 else 1, pdl=bs == 32,
                     cols=4 if zp else 2)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)


@pytest.mark.parametrize("M", [2, 3, 8, 9, 16])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cols", [2, 4])
def test_every_row_tile(rng, M, dtype, cols):
    # One tile with and without absent rows (2, 3, 8), two tiles (9: rows 9..15 absent; 16 full);
    # two warps of a block, so the column groups go to warps 0 and 1 in turn.
    K = 264
    a, w, bias = make(rng, 69, K, 32, True, M, dtype)
    y, _ = run(a, w, bias, dtype, config=_config(dtype, M, K, 32, True, unroll=2, warps=2,
                                                 cols=cols), multiprocessors=1)
    check(y, a, w, bias, dtype)


@pytest.mark.parametrize("K", [8, 40, 104, 136, 520])
def test_k_tails(rng, K):
    # K shorter than a chunk, ending in each word of a chunk, and several steps per lane.
    a, w, bias = make(rng, 69, K, 16, True, 4, "float16")
    y, _ = run(a, w, None, "float16", config=_config("float16", 4, K, 16, True, unroll=2),
               multiprocessors=1)
    check(y, a, w, None, "float16")


def test_unroll_4_and_narrow_n(rng):
    # 8 chunks per lane step (K = 520: one full step, then one valid chunk of 16), and N = 7:
    # a single partial group whose columns 7..15 are clamped for loads and never stored.
    for N in (7, 69):
        a, w, bias = make(rng, N, 520, 32, False, 12, "bfloat16")
        y, _ = run(a, w, bias, "bfloat16", config=_config("bfloat16", 12, 520, 32, False, unroll=4),
                   multiprocessors=1)
        check(y, a, w, bias, "bfloat16")


@pytest.mark.parametrize("cols", [2, 4])
def test_each_column_and_row_lands_in_its_place(rng, cols):
    # A weight that is zero except a few columns makes a misplaced output an exact miss: columns
    # 0, 9, 17 and 26 (the first and second column of each A tile, cols 4: of each tile) and rows
    # 0..15.
    M, N, K = 16, 40, 64
    a, w, _ = make(rng, N, K, 32, False, M, "float16")
    keep = np.zeros(N, bool)
    keep[[0, 9, 17, 26]] = True
    w = ig.quantize(np.where(keep[:, None], rng.standard_normal((N, K)), 0).astype(np.float32), 32)
    y, _ = run(a, w, None, "float16", config=_config("float16", M, K, 32, False, cols=cols),
               multiprocessors=1)
    ref, size = reference(a, w, None, "float16")
    assert np.all(y[:, ~keep] == 0)
    assert np.max(np.abs(y - ref)[:, keep] / size[:, keep]) <= TOL["float16"]


def test_the_config_takes_m_above_one_only_with_its_tiling():
    DefaultConfig("float16", 16, 32, False, cols=2, lanes=4, mma=True)
    DefaultConfig("float16", 16, 32, False, cols=4, lanes=4, mma=True)
    for bad in ({"cols": 8}, {"lanes": 8}, {"pipeline": True}):
        with pytest.raises(ValueError, match="mma|pipeline"):
            DefaultConfig("float16", 4, 32, False, **{"cols": 2, "lanes": 4, "mma": True, **bad})


# -- the dispatcher: M >= 2 on lm_head-wide N takes this fold -------------------------------------

def _plan(M, N, zp=False, tuning=None, dtype="float16", sms=132, K=2048):
    return plan_gemv(Problem(M, N, K, 32, dtype, zp, False), resolve_tuning(tuning, environ={}),
                     device_name="G", table={}, multiprocessors=sms)


@pytest.mark.parametrize("M, zp, tiling", [(2, False, (2, 4, 4)), (4, False, (2, 4, 4)),
                                           (5, False, (4, 2, 4)), (8, False, (4, 2, 4)),
                                           (9, False, (4, 2, 3)), (16, False, (4, 2, 3)),
                                           (4, True, (2, 2, 4)), (5, True, (4, 2, 3)),
                                           (8, True, (4, 2, 3)), (9, True, (4, 2, 3)),
                                           (16, True, (4, 2, 3))])
def test_wide_n_at_m_above_one_takes_the_default_tilings_mma_fold(M, zp, tiling):
    p = _plan(M, 151936, zp)
    assert p.kernel == "default" and p.config.mma and p.config.M == M and p.config.ksplit == 1
    assert (p.config.cols, p.config.unroll, p.config.blocks_per_sm, p.config.lanes) == tiling + (4,)
    assert "tensor-core fold" in p.reason and "151936" in p.reason
    assert "tensor-core fold" in dict((n, s) for n, _, s in p.sources)["cols"]


def test_the_rule_is_two_groups_of_16_columns_per_warp_of_the_grid():
    # 4 warps x 4 blocks x 132 SMs = 2112 warps: 4224 groups of 16 columns = 67584 columns.
    assert mma_batch_pays(8, 67584, 132) and not mma_batch_pays(8, 67568, 132)
    assert not mma_batch_pays(1, 151936, 132)               # M = 1 has its own rules
    assert mma_batch_pays(8, 67584 // 2, 66)                # half the SMs, half the columns
    assert _plan(8, 67584).kernel == "default" and _plan(8, 67568).kernel == "tensor_core"
    assert _plan(8, 6144).kernel == "tensor_core"           # gate/up: split K


@pytest.mark.parametrize("zp", [False, True])
def test_narrow_n_past_8_rows_takes_the_k_split(zp):
    # One group of 32 columns per SM: 132 x 32 = 4224 columns (gate/up's 6144: 192 groups).
    for M in (9, 16):
        p = _plan(M, 6144, zp)
        assert p.kernel == "default" and p.config.mma and p.config.ksplit == 4
        assert (p.config.cols, p.config.unroll, p.config.blocks_per_sm, p.config.warps) == (4, 1, 3, 4)
        assert "K split" in p.reason and "6144" in p.reason
        assert "K split" in dict((n, s) for n, _, s in p.sources)["cols"]
    assert _plan(9, 4224, zp).config.cols == 4 and _plan(9, 4192, zp).config.cols == 2
    assert _plan(8, 6144, zp).kernel == "tensor_core"       # level at M = 8 (H100)


@pytest.mark.parametrize("zp", [False, True])
def test_narrower_n_takes_the_k_split_with_one_column_tile(zp):
    # No group of 32 columns per SM (k/v 1024, q/o 2048, down 2048 x 6144 on 132 SMs): groups
    # of 16 columns, from 5 rows where K gives a lane one step (K <= 2048), from 9 rows any K.
    for M, N, K in [(5, 1024, 2048), (8, 2048, 2048), (9, 2048, 6144), (16, 4192, 2048),
                    (16, 1024, 6144)]:
        p = _plan(M, N, zp, K=K)
        assert p.kernel == "default" and p.config.mma and p.config.ksplit == 4
        unroll = 2 if zp and M > 8 else 4                  # 2 x 4 spills with zero points
        assert (p.config.cols, p.config.unroll, p.config.blocks_per_sm, p.config.warps) == (2, unroll, 3, 4)
        assert "groups of 16 columns" in p.reason and str(N) in p.reason
    assert _plan(4, 2048, zp).kernel == "tensor_core"       # fewer rows: not measured
    assert _plan(8, 2048, zp, K=2056).kernel == "tensor_core"   # down at M = 8: slower (H100)
    assert _plan(16, 1016, zp).kernel == "tensor_core"      # narrower N: not measured
    assert _plan(8, 4224, zp).kernel == "tensor_core"       # a group of 32 columns per SM
    assert _plan(8, 4192, zp).kernel == "default"


def test_named_kernels_and_given_columns_keep_their_meaning():
    assert _plan(8, 151936, tuning="tensor_core").kernel == "tensor_core"
    p = _plan(8, 151936, tuning=ig.Tuning(variant="default", cols=2))
    assert p.kernel == "default" and p.config.mma and p.config.cols == 2
    # a column count the fold does not take keeps the tensor-core kernel (as before the fold)
    assert _plan(8, 151936, tuning=ig.Tuning(variant="default", cols=1)).kernel == "tensor_core"
    assert not choose_config(8, 151936, 2048, 32, "float16", False, cols=1).mma


def test_short_k_lowers_the_unroll_to_the_chunks_a_lane_has():
    # K = 128: one chunk per lane (4 lanes x 32 elements)
    assert choose_config(2, 151936, 128, 32, "float16", False).unroll == 1
    assert choose_config(2, 151936, 256, 32, "float16", False).unroll == 2


def _fold_choices():
    """Every M > 1 fold configuration ``choose_config`` gives the decode workload's shapes
    (``int4gemv/workloads``, lm_head included) on a 132-SM GPU for M = 2..16, fp16 and bf16,
    with and without zero points: one per tiling (columns, unroll, blocks per SM, K split,
    dtype, zero points, row tiles), at its fewest rows (rows past M predicated off)."""
    doc = json.loads(resources.files("int4gemv.workloads").joinpath(
        "qwen3_vl_2b_decode.json").read_text())
    found = {}
    for M in range(2, MAX_M + 1):
        for p in doc["projections"]:
            for dtype in DTYPES:
                for zp in (False, True):
                    c = choose_config(M, p["N"], p["K"], doc["block_size"], dtype, zp,
                                      multiprocessors=132)
                    if c.mma:
                        found.setdefault((c.cols, c.unroll, c.blocks_per_sm, c.ksplit, dtype, zp,
                                          (M + 7) // 8), c)
    return list(found.values())


FOLD_CHOICES = _fold_choices()


def test_the_workload_reaches_both_kinds_of_fold():
    assert {c.ksplit for c in FOLD_CHOICES} == {1, 4}
    assert {c.M for c in FOLD_CHOICES} == {2, 5, 9}


@pytest.mark.parametrize("config", FOLD_CHOICES, ids=lambda c: (
    f"M{c.M}-c{c.cols}u{c.unroll}b{c.blocks_per_sm}k{c.ksplit}-{c.dtype}-zp{int(c.zero_points)}"))
def test_every_fold_configuration_the_gpu_chooses_runs(rng, config):
    # The configuration as the GPU gets it, on one SM at N = 69 (3 groups of 32 columns or 5 of
    # 16, the last partial) and K = 520 (17 chunks: a last chunk of one word); bs 16 with zero
    # points (two groups per chunk, rows not 16-byte aligned: 8-byte loads), else bs 128.
    bs = 16 if config.zero_points else 128
    K = 520
    config = replace(config, block_size=bs, weight_vector=-(-K // bs) * bs // 2 % 16 == 0)
    a, w, bias = make(rng, 69, K, bs, config.zero_points, config.M, config.dtype)
    y, _ = run(a, w, bias, config.dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, config.dtype)


# -- the K split: warps of a block share a column group ------------------------------------------

@pytest.mark.parametrize("ksplit, warps, M, dtype, bs, zp, cols", [
    (2, 4, 5, "float16", 16, True, 2), (4, 4, 9, "bfloat16", 32, False, 2),
    (2, 2, 16, "float16", 64, True, 4), (8, 8, 3, "float16", 128, False, 2),
    (4, 8, 8, "bfloat16", 16, True, 4)])
def test_k_split_sums_the_warps_of_a_group(rng, ksplit, warps, M, dtype, bs, zp, cols):
    # K = 520: 17 chunks over 8-32 stripes (most stripes hold one chunk, some none, the last is a
    # single word); N = 69: 5 (or 3) groups over warps / ksplit slots of one block, so the last
    # round has idle slots that still reach both barriers.
    K = 520
    a, w, bias = make(rng, 69, K, bs, zp, M, dtype)
    config = replace(_config(dtype, M, K, bs, zp, unroll=2, warps=warps, cols=cols), ksplit=ksplit)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)


def test_k_split_short_k_and_pdl(rng):
    # K = 40: one chunk and a word, so three of the four warps' stripes are empty; a PDL build.
    a, w, bias = make(rng, 40, 40, 32, False, 4, "float16")
    config = replace(_config("float16", 4, 40, 32, False, warps=4, pdl=True), ksplit=4)
    y, _ = run(a, w, bias, "float16", config=config, multiprocessors=1)
    check(y, a, w, bias, "float16")


def test_k_split_is_refused_where_it_has_no_meaning():
    # (M = 1 takes it since session 32, on the direct fold: test_default_kernel.py's K-split tests)
    for bad in (dict(M=1, pipeline=True), dict(mma=False, cols=2, lanes=4), dict(warps=2, ksplit=4),
                dict(ksplit=3)):
        fields = {"M": 4, "cols": 2, "lanes": 4, "mma": True, "warps": 4, "ksplit": 4, **bad}
        M = fields.pop("M")
        with pytest.raises(ValueError, match="ksplit"):
            DefaultConfig("float16", M, 32, False, **fields)
    assert DefaultConfig("float16", 4, 32, False, cols=2, lanes=4, mma=True, ksplit=4).groups_per_block == 1
