"""The default tiling's kernel against a float64 reference, launched directly on its config
(:mod:`default_kernel_check`: fresh random data, never zeros, the output poisoned with NaN and
every element checked, the error measure and its bounds).

Shapes cover every tail class: K shorter than one chunk of 32, K ending inside a chunk (each
remainder of the 4-word chunk), partial last quantization groups, N tails for every
columns-per-warp, several lanes per column (short K), several chunks per lane and unrolled steps
(long K), M = 1..16, fp16 and bf16, with and without zero points and bias.
"""

import numpy as np
import pytest
from default_kernel_check import BF16, DTYPES, SIMULATED, TOL, check, make, mma_config, reference, run

import int4gemv as ig
from int4gemv.device import device_facts, simulated
from int4gemv.kernels.default import DefaultConfig, choose_config
from int4gemv.kernels.default_config import STAGE_MAX_K
from int4gemv.kernels.default_config import stages_row
from int4gemv.kernels.default_m1 import CHUNK_STRIDE
from int4gemv.kernels.mma_tiling import mma_batch_reason


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("zp", [False, True])
def test_block_sizes_zero_points_bias(rng, dtype, bs, zp):
    # K = 2 bs + 8: a partial last group and a last chunk with one valid word (for bs >= 16).
    a, w, bias = make(rng, 7, 2 * bs + 8, bs, zp, 1, dtype)
    y, _ = run(a, w, bias, dtype)
    check(y, a, w, bias, dtype)


@pytest.mark.parametrize("K,bs", [(8, 16), (16, 32), (24, 64), (32, 128), (40, 16), (48, 16),
                                  (56, 32), (96, 64), (136, 128), (776, 64), (1424, 16)])
def test_k_tails(rng, K, bs):
    # K < one chunk, exactly one chunk, and each remainder of the 4-word chunk, odd group counts.
    for dtype in DTYPES:
        a, w, bias = make(rng, 5, K, bs, True, 2, dtype)
        y, _ = run(a, w, None, dtype)
        check(y, a, w, None, dtype)


@pytest.mark.parametrize("M", [1, 2, 3, 5, 8, 16])
def test_batch_rows(rng, M):
    for dtype in DTYPES:
        a, w, bias = make(rng, 6, 72, 16, True, M, dtype)
        y, _ = run(a, w, bias, dtype)
        check(y, a, w, bias, dtype)


@pytest.mark.parametrize("cols", [1, 2, 4, 8])
def test_n_tails_every_column_count(rng, cols):
    # N = 13 leaves a partial column group for every cols; two lanes per column (K = 64).
    a, w, bias = make(rng, 13, 64, 32, False, 1, "float16")
    y, config = run(a, w, bias, "float16", cols=cols)
    assert config.cols == cols and config.lanes == 2
    check(y, a, w, bias, "float16")


def test_long_k_several_chunks_per_lane_and_unroll(rng):
    # 65 chunks over 32 lanes: lane 0 takes 3 chunks, one of them in an unrolled step's tail.
    for dtype in DTYPES:
        a, w, bias = make(rng, 3, 2056, 32, True, 1, dtype)
        base = choose_config(1, 3, 2056, 32, dtype, True, multiprocessors=2)
        assert base.lanes == 32 and base.unroll == 1       # zero points at M = 1: unroll 1
        y, config = run(a, w, bias, dtype, config=DefaultConfig(**{**base.__dict__, "unroll": 2}))
        check(y, a, w, bias, dtype)


def test_unaligned_fallbacks(rng):
    # bs 16 with an odd group count: 8-byte-aligned rows (two 8-byte loads per chunk); and
    # activations read element by element.
    a, w, bias = make(rng, 4, 48, 16, True, 2, "float16")
    base = choose_config(2, 4, 48, 16, "float16", True, multiprocessors=2)
    assert not base.weight_vector
    config = DefaultConfig(**{**base.__dict__, "act_vector": False})
    y, _ = run(a, w, bias, "float16", config=config)
    check(y, a, w, bias, "float16")
    for dtype in DTYPES:                                # the M = 1 loop's unaligned paths
        a, w, bias = make(rng, 4, 48, 16, True, 1, dtype)
        base = choose_config(1, 4, 48, 16, dtype, True, multiprocessors=2)
        config = DefaultConfig(**{**base.__dict__, "act_vector": False})
        y, _ = run(a, w, bias, dtype, config=config)
        check(y, a, w, bias, dtype)


def test_persistent_grid_walks_every_group(rng):
    # One block of 1 warp takes every column group in turn.
    a, w, bias = make(rng, 9, 64, 32, True, 1, "bfloat16")
    for pdl in (False, True):  # the programmatic-launch build has the same arithmetic
        config = DefaultConfig("bfloat16", 1, 32, True, cols=1, lanes=2, unroll=1, warps=1,
                               blocks_per_sm=1, pdl=pdl)
        y, _ = run(a, w, bias, "bfloat16", config=config, multiprocessors=1)
        check(y, a, w, bias, "bfloat16")


def test_config_validates_itself():
    with pytest.raises(ValueError, match="dtype"):
        DefaultConfig("float32", 1, 32, False)
    with pytest.raises(ValueError, match="M"):
        DefaultConfig("float16", 17, 32, False)
    with pytest.raises(TypeError, match="cols"):
        DefaultConfig("float16", 1, 32, False, cols=2.0)
    with pytest.raises(ValueError, match="lanes"):
        DefaultConfig("float16", 1, 32, False, lanes=3)


@pytest.mark.parametrize("dtype, M", [("float16", 1), ("float16", 3), ("float16", 16),
                                      ("bfloat16", 1), ("bfloat16", 3)])
def test_through_gemv_every_dtype_and_batch(rng, dtype, M):
    # (bf16 at M = 16 runs in test_batch_rows: through gemv it takes minutes on the simulator)
    # The public path: quantize in the dtype, gemv on host arrays, default tiling (no env set).
    w = ig.quantize(rng.standard_normal((11, 200)).astype(np.float32), 64, symmetric=False,
                    dtype=dtype)
    a = rng.standard_normal((M, 200)).astype(DTYPES[dtype])
    bias = rng.standard_normal(11).astype(DTYPES[dtype])
    plan = ig.explain(a, w, bias=bias)
    # (M >= 2 runs the tensor-core kernel for narrow N, except where the fold's K split gives
    # every SM a block: past 8 rows on the simulator's one SM)
    fold = M == 1 or mma_batch_reason(M, 11, 200, device_facts()[1])
    expected = "default" if fold else "tensor_core"
    assert plan.kernel == expected and plan.config.M == M and plan.config.dtype == dtype
    out = np.full((M, 11), np.nan, DTYPES[dtype])
    y = ig.gemv(a, w, bias=bias, out=out)
    assert y is out and y.dtype == DTYPES[dtype]
    y = y.astype(np.float64)
    assert np.all(np.isfinite(y))
    ref, size = reference(a, w, bias, dtype)
    assert np.max(np.abs(y - ref) / (size + np.abs(bias.astype(np.float64)))) <= TOL[dtype]


@pytest.mark.parametrize(("N", "K", "bs", "zp", "cols", "lanes", "unroll", "pdl"), [
    (9, 64, 32, True, 1, 2, 1, False),       # one block of one warp walks 9 groups: A/B alternate
    (10, 64, 32, False, 2, 2, 1, True),      # an odd number of items, PDL build
    (8, 2056, 16, True, 1, 32, 2, False),    # 65 chunks: several steps per group, the last partial
    (5, 200, 64, True, 2, 4, 2, False),      # K tail inside a chunk, N tail inside a group
    (5, 200, 64, False, 2, 2, 1, False),     # 4 steps per group: both buffers hold middle steps
])
def test_pipelined_m1_loop_walks_every_step_of_every_group(rng, N, K, bs, zp, cols, lanes, unroll, pdl):
    # pipeline=True: the next step's loads (across column groups) are issued before this step
    # is folded, alternating two register buffers; one warp so that it walks every item.
    # (A probe option no chooser takes: on a GPU, where each case compiles for a minute, the cases
    # alternate the dtype; the simulator runs both.)
    dtypes = list(DTYPES) if simulated() else [list(DTYPES)[N % 2]]
    for dtype in dtypes:
        a, w, bias = make(rng, N, K, bs, zp, 1, dtype)
        rows16 = -(-K // bs) * bs // 2 % 16 == 0       # else two 8-byte loads per chunk
        config = DefaultConfig(dtype, 1, bs, zp, cols=cols, lanes=lanes, unroll=unroll, warps=1,
                               blocks_per_sm=1, pdl=pdl, pipeline=True, weight_vector=rows16)
        y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
        check(y, a, w, bias, dtype)


def test_pipeline_is_an_m1_option():
    with pytest.raises(ValueError, match="pipeline"):
        DefaultConfig("float16", 2, 32, False, pipeline=True)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
def test_m1_unroll_is_the_largest_that_does_not_spill(dtype, bs):
    # Offline ptxas (sm_90, 4 columns, 128 registers): unroll 2 spills with zero points at M = 1
    # (4-104 bytes) and fits without; fp16 with blocks >= 64 spills 8 B there and still gains
    # (H100, session 19); bf16 at M > 1 spills at 2 (bench/NOTES.md).
    zp_unroll = 2 if dtype == "float16" and bs >= 64 else 1
    for zp in (False, True):   # the CUDA-core fold (cols given; the mma fold takes 2 always)
        assert choose_config(1, 151936, 2048, bs, dtype, zp, cols=4).unroll == (zp_unroll if zp else 2)
    assert choose_config(1, 6144, 2048, bs, dtype, True).unroll == zp_unroll      # narrow N too
    # M > 1 on CUDA cores (N too narrow for the mma fold's grid: gate_up)
    assert choose_config(2, 12288, 2048, bs, dtype, False).unroll == (1 if dtype == "bfloat16" else 2)


def _walker(dtype, K, bs, zp, pipeline=False, unroll=1):
    """One warp of two lanes per column (16 columns per group): with N = 65 it folds 5 column
    groups, enough for bf16 to take the fp16 arithmetic (``STAGE_MIN_GROUPS``)."""
    rows16 = -(-K // bs) * bs // 2 % 16 == 0       # else two 8-byte loads per chunk
    return DefaultConfig(dtype, 1, bs, zp, cols=1, lanes=2, unroll=unroll, warps=1,
                         blocks_per_sm=1, pipeline=pipeline, weight_vector=rows16)


def test_bf16_m1_takes_the_fp16_arithmetic_only_where_warps_fold_several_groups():
    # The H200 geometry (132 SMs): lm_head's warps fold 18 groups; gate/up's and k/v's at most 1.
    bf16 = lambda **kw: DefaultConfig("bfloat16", 1, 32, False, **kw)  # noqa: E731
    assert stages_row(bf16(cols=4, blocks_per_sm=4), 151936, 2048, 132)       # lm_head, c4 u2 b4
    assert not stages_row(bf16(cols=4, blocks_per_sm=4), 6144, 2048, 132)     # gate/up
    assert not stages_row(bf16(cols=1, blocks_per_sm=8), 1024, 2048, 132)     # k/v, c1 u2 b8
    walker = _walker("bfloat16", 72, 32, False)
    assert stages_row(walker, 65, 72, 1) and not stages_row(walker, 48, 72, 1)  # 5 groups; 3


@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("zp", [False, True])
def test_bf16_m1_fp16_arithmetic_every_format(rng, bs, zp):
    # Every activation in range: the fp16 fold for every block size and zero-point setting,
    # K = 2 bs + 8 (a partial last group, a last chunk of one word), several steps per lane.
    a, w, bias = make(rng, 65, 2 * bs + 8, bs, zp, 1, "bfloat16")
    y, _ = run(a, w, bias, "bfloat16", config=_walker("bfloat16", 2 * bs + 8, bs, zp, unroll=2),
               multiprocessors=1)
    check(y, a, w, bias, "bfloat16")


@pytest.mark.parametrize("pipeline", [False, True])
@pytest.mark.parametrize("scale, half", [(2.0 ** -20, True), (2.0 ** 14, True), (1.0, True),
                                         (2.0 ** -30, False), (2.0 ** 45, False), (0.0, True)])
def test_bf16_m1_rows_fold_in_fp16_where_their_power_of_two_scale_allows(rng, monkeypatch, scale,
                                                                        half, pipeline):
    # bf16 at M = 1 takes the fp16 arithmetic on its row scaled by 2**s (max |a| into [128, 256),
    # |s| <= 32): at 2**-20 unscaled fp16 would lose bits (subnormals), at 2**14 the first
    # product would overflow fp16. Scale 1: one chunk 2**14 larger (chunk 2 of 4, a second
    # unrolled chunk), so the rest lands near fp16's subnormals once scaled, with exact zeros.
    # At 2**-30 and 2**45 the scale would pass 2**32: the block folds in float32. On the
    # simulator the fp16 fold's dot8 calls are counted: taken exactly where expected.
    from int4gemv.kernels import default_m1
    a, w, _ = make(rng, 65, 128, 32, False, 1, "bfloat16")
    a64 = a.astype(np.float64) * scale
    if scale == 1.0:
        a64[0, 64:96] *= 2.0 ** 14
        a64[0, 40:48] = 0.0
    a = a64.astype(BF16)
    calls = []
    if SIMULATED:
        real = default_m1.dot8
        monkeypatch.setattr(default_m1, "dot8", lambda *args: calls.append(1) or real(*args))
    config = _walker("bfloat16", 128, 32, False, pipeline, unroll=2)
    y, _ = run(a, w, None, "bfloat16", config=config, multiprocessors=1)
    if scale == 0.0:    # an all-zero row: s = 0, exact zeros
        assert np.all(y == 0)
    else:
        check(y, a, w, None, "bfloat16")
    if SIMULATED:
        assert bool(calls) == half


def test_bf16_m1_fp16_arithmetic_at_the_lm_head_configuration(rng):
    # lm_head's bf16 CUDA-core choice on the H200 (4 columns, 32 lanes, unroll 2: with the
    # columns given, so not the mma fold) with one warp walking 4 column groups (so it takes the
    # fp16 fold), the last one partial; K = 2048: one full step.
    base = choose_config(1, 151936, 2048, 32, "bfloat16", False, cols=4)
    assert (base.cols, base.lanes, base.unroll, base.mma) == (4, 32, 2, False)
    a, w, bias = make(rng, 13, 2048, 32, False, 1, "bfloat16")
    config = DefaultConfig(**{**base.__dict__, "warps": 1, "blocks_per_sm": 1})
    y, _ = run(a, w, bias, "bfloat16", config=config, multiprocessors=1)
    check(y, a, w, bias, "bfloat16")


def test_fp16_m1_on_cuda_cores_never_stages_its_row():
    # Its one-pass stage was slower wherever timed (bench/NOTES.md, session 15).
    f16 = lambda **kw: DefaultConfig("float16", 1, 32, False, **kw)  # noqa: E731
    for N, K, cols in ((151936, 2048, 4), (6144, 2048, 4), (2048, 6144, 2), (1024, 2048, 1)):
        assert not stages_row(f16(cols=cols, blocks_per_sm=4), N, K, 132)


@pytest.mark.parametrize("dtype, N", [("float16", 3), ("bfloat16", 5)])
def test_m1_rows_longer_than_the_stage(rng, dtype, N):
    # K > STAGE_MAX_K: not staged (the stage holds 4096 activations): fp16 loads its
    # activations, bf16 folds in float32; one warp walking N columns, 2 steps (the second partial).
    K = STAGE_MAX_K + 40
    a, w, bias = make(rng, N, K, 32, False, 1, dtype)
    config = DefaultConfig(dtype, 1, 32, False, cols=1, lanes=32, unroll=2, warps=1, blocks_per_sm=1)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)


def test_bf16_m1_stage_filled_by_every_warp_of_a_block(rng):
    # 4 warps (128 threads) fill the stage together; one column per group, 16 groups = 4 per warp.
    # The row's largest values are the last 8 (staged by warp 1): every warp must use the
    # block's scale, not its own.
    a, w, bias = make(rng, 16, 2 * 128 + 8, 128, True, 1, "bfloat16")
    a = (a.astype(np.float64) * np.where(np.arange(2 * 128 + 8) >= 256, 64.0, 1.0)).astype(BF16)
    config = DefaultConfig("bfloat16", 1, 128, True, cols=1, lanes=32, unroll=1, warps=4,
                           blocks_per_sm=1, weight_vector=False)
    y, _ = run(a, w, bias, "bfloat16", config=config, multiprocessors=1)
    check(y, a, w, bias, "bfloat16")


def test_bf16_m1_stage_layout_reads_each_group_as_one_conflict_free_lds128():
    """A lane reads its chunk's 4-word groups with one 16-byte ``LDS.128`` each: every group
    starts at a multiple of 4 words, and the 8 lanes of a quarter-warp (one LDS.128 wavefront),
    reading chunks ``s .. s + 7``, cover 32 different banks (pure layout arithmetic)."""
    for s in range(32):
        for q in range(4):
            starts = [CHUNK_STRIDE * (s + i) + 4 * q for i in range(8)]
            assert all(b % 4 == 0 for b in starts)
            banks = {(b + e) % 32 for b in starts for e in range(4)}
            assert len(banks) == 32, (s, q, sorted(banks))


# -- the M = 1 tensor-core fold (kernels/default_mma.py) -------------------------------------------

def _mma(dtype, K, bs, zp, unroll=1, pipeline=False, pdl=False):
    """The mma fold's tiling on one warp: with N = 69 it walks 5 groups of 16 columns (the last
    one partial), enough for the stage (``MMA_STAGE_MIN_GROUPS``)."""
    return mma_config(dtype, 1, K, bs, zp, unroll=unroll, pipeline=pipeline, pdl=pdl)


def test_lm_head_takes_the_mma_fold_where_each_warp_has_groups_to_fold(monkeypatch):
    # The rule, with the chooser's switch on (it ships off until a GPU run confirms the fold).
    from int4gemv.kernels import default_config
    monkeypatch.setattr(default_config, "MMA_CHOSEN", True)
    for dtype in DTYPES:
        for bs in ig.BLOCK_SIZES:
            for zp in (False, True):
                c = choose_config(1, 151936, 2048, bs, dtype, zp)
                assert (c.mma, c.cols, c.lanes, c.warps, c.blocks_per_sm, c.unroll) == \
                    (True, 2, 4, 4, 4, 2)    # ptxas: no spills at unroll 2 (bench/NOTES.md)
    assert not choose_config(1, 151936, 2048, 32, "float16", False, cols=2).mma   # cols given
    assert choose_config(2, 151936, 2048, 32, "float16", False).M == 2            # M > 1: its own fold
    assert not choose_config(1, 151936, STAGE_MAX_K + 8, 32, "float16", False).mma  # not staged
    assert not choose_config(1, 12288, 2048, 32, "float16", False).mma   # gate_up: 768 groups
    monkeypatch.setattr(default_config, "MMA_CHOSEN", False)
    assert not choose_config(1, 151936, 2048, 32, "float16", False).mma
    with pytest.raises(ValueError, match="mma"):
        DefaultConfig("float16", 1, 32, False, cols=4, lanes=4, mma=True)
    with pytest.raises(ValueError, match="pipeline"):   # M > 1 takes mma, not the pipeline
        DefaultConfig("float16", 2, 32, False, cols=2, lanes=4, mma=True, pipeline=True)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("zp", [False, True])
def test_mma_fold_every_format(rng, dtype, bs, zp):
    # K = 2 bs + 8: a partial last group and a last chunk of one word; unroll 2 at bs >= 64 (two
    # chunks per step, the second clamped past the column), the pipeline on the zero-point cases.
    K = 2 * bs + 8
    a, w, bias = make(rng, 69, K, bs, zp, 1, dtype)
    config = _mma(dtype, K, bs, zp, unroll=2 if bs >= 64 else 1, pipeline=zp, pdl=bs == 32)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)


@pytest.mark.parametrize("K", [8, 40, 104, 136, 520])
def test_mma_fold_k_tails(rng, K):
    # K shorter than a chunk, ending in each word of a chunk, and several steps per lane.
    a, w, bias = make(rng, 69, K, 16, True, 1, "float16")
    y, _ = run(a, w, bias, "float16", config=_mma("float16", K, 16, True, unroll=2),
               multiprocessors=1)
    check(y, a, w, bias, "float16")


@pytest.mark.parametrize("dtype, bs, zp", [("float16", 32, False), ("bfloat16", 32, False),
                                           ("float16", 16, True)])
def test_mma_fold_at_unroll_4(rng, dtype, bs, zp):
    # The configurations session 16 left to time (c2l4u4b4m, c2l4u2b4m): 8 chunks per lane step;
    # K = 520 (17 chunks): the first step full, the second with 1 valid chunk of 16 and 3 of its
    # lanes' chunks clamped past the column, the last chunk one word long.
    a, w, bias = make(rng, 69, 520, bs, zp, 1, dtype)
    y, _ = run(a, w, bias, dtype, config=_mma(dtype, 520, bs, zp, unroll=4), multiprocessors=1)
    check(y, a, w, bias, dtype)


def _count_mma_calls(monkeypatch):
    """A list that gets one entry per ``mma_f16``/``mma_bf16`` call of the fold (simulator only:
    on the GPU the kernel is compiled and the list stays empty)."""
    from int4gemv.kernels import default_mma
    calls = []
    if SIMULATED:
        for name in ("mma_f16", "mma_bf16"):
            real = getattr(default_mma, name)
            monkeypatch.setattr(default_mma, name,
                                lambda *args, real=real: calls.append(1) or real(*args))
    return calls


@pytest.mark.parametrize("case", ["bf16 out of range", "few groups", "long row"])
def test_mma_config_folds_directly_where_the_row_is_not_staged(rng, monkeypatch, case):
    # A bf16 row past the fp16 range (scale 2**45), a grid whose warps have too few groups for
    # the stage (N = 13: 1 group), K > STAGE_MAX_K (N = 17: 2 groups, which would stage a
    # shorter row): the same config takes the direct fold (its
    # activations loaded by the lanes that feed B, the offset sums from a second mma; bf16 on
    # bf16 tensor cores, in any range). On the simulator every lane's mma calls are counted: per
    # 16-column group and lane step 4 words x (2 products + 2 sums), twice the staged fold's.
    dtype = "bfloat16" if case == "bf16 out of range" else "float16"
    N, K = {"few groups": (13, 72), "long row": (17, STAGE_MAX_K + 40)}.get(case, (69, 72))
    a, w, bias = make(rng, N, K, 32, False, 1, dtype)
    if case == "bf16 out of range":
        a = (a.astype(np.float64) * 2.0 ** 45).astype(BF16)
        bias = (bias.astype(np.float64) * 2.0 ** 45).astype(BF16)
    calls = _count_mma_calls(monkeypatch)
    y, _ = run(a, w, bias, dtype, config=_mma(dtype, K, 32, False), multiprocessors=1)
    check(y, a, w, bias, dtype)
    chunks = -(-K // 32)
    steps = -(-chunks // 4)                 # 4 chunk stripes, unroll 1
    assert len(calls) == (32 * 16 * -(-N // 16) * steps if SIMULATED else 0)


# -- the M = 1 K split (kernels/default_mma.py's direct fold, default_mma_batch.ksplit_walk) ----

def _ksplit(dtype, K, bs, zp, ksplit, warps=4, unroll=1, pdl=False):
    return mma_config(dtype, 1, K, bs, zp, unroll=unroll, warps=warps, ksplit=ksplit, pdl=pdl)


@pytest.mark.parametrize("dtype, bs, zp, K, N, ksplit, warps, unroll", [
    ("float16", 32, False, 264, 33, 2, 4, 2),    # 2 groups a round; round 2: 1 column, 1 idle slot
    ("bfloat16", 16, True, 136, 17, 4, 4, 1),    # two groups a chunk, a last word alone
    ("float16", 64, True, 520, 20, 4, 8, 2),     # 8 warps: 2 groups a block, the 2nd one partial
    ("bfloat16", 128, False, 1032, 16, 2, 2, 2),  # 33 chunks over 8 stripes at unroll 2: the
                                                  # last step holds one chunk of one word
])
def test_mma_ksplit_at_m1_every_format(rng, dtype, bs, zp, K, N, ksplit, warps, unroll):
    # M = 1 with ksplit warps a column group: the direct fold on every warp part's stripes
    # (chunk stride 4 * ksplit), the parts summed in shared memory and then over the column's
    # 4 lanes, on one SM (the grid walks several rounds where N allows).
    a, w, bias = make(rng, N, K, bs, zp, 1, dtype)
    config = _ksplit(dtype, K, bs, zp, ksplit, warps=warps, unroll=unroll, pdl=bs == 64)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)


def test_mma_ksplit_at_m1_rules():
    DefaultConfig("float16", 1, 32, False, cols=2, lanes=4, warps=4, mma=True, ksplit=4)
    for bad in (dict(mma=False), dict(pipeline=True), dict(pdl=True, words=True)):
        with pytest.raises(ValueError, match="ksplit"):
            DefaultConfig("float16", 1, 32, False, **{**dict(cols=2, lanes=4, warps=4, mma=True,
                                                             ksplit=4), **bad})
    with pytest.raises(ValueError, match="ksplit"):   # dividing the block's warps
        DefaultConfig("float16", 1, 32, False, cols=2, lanes=4, warps=2, mma=True, ksplit=4)


def test_stages_row_says_where_the_mma_fold_runs():
    # lm_head on 132 SMs: 9496 groups of 16 columns over 4 x 6 x 132 warps (3.0 each) still stage
    # the row for the mma fold (>= 2 groups a warp; session 14's 5-block probes, at the old 4,
    # silently took the fallback), 8 blocks (2.2) too, not 10 (1.8); nor does K past the stage.
    # The tests' one-warp grid: 2 groups stage, 1 does not.
    lm = DefaultConfig("float16", 1, 32, False, cols=2, lanes=4, warps=4, blocks_per_sm=4, mma=True)
    at = lambda b: DefaultConfig(**{**lm.__dict__, "blocks_per_sm": b})  # noqa: E731
    assert stages_row(lm, 151936, 2048, 132) and stages_row(at(6), 151936, 2048, 132)
    assert stages_row(at(8), 151936, 2048, 132) and not stages_row(at(10), 151936, 2048, 132)
    assert not stages_row(lm, 151936, STAGE_MAX_K + 8, 132)
    one = _mma("float16", 72, 32, False)
    assert stages_row(one, 17, 72, 1) and not stages_row(one, 16, 72, 1)


@pytest.mark.parametrize("N", [17, 69])     # 2 groups on the one-warp grid (the bound), 5
def test_mma_fold_is_taken_where_the_row_is_staged(rng, monkeypatch, N):
    calls = _count_mma_calls(monkeypatch)
    a, w, bias = make(rng, N, 72, 32, False, 1, "bfloat16")
    y, _ = run(a, w, bias, "bfloat16", config=_mma("bfloat16", 72, 32, False), multiprocessors=1)
    check(y, a, w, bias, "bfloat16")
    assert calls or not SIMULATED


def test_mma_fold_with_unaligned_activations_stages_them_element_by_element(rng):
    # act_vector False (an activation row not 16-byte aligned): the stage fill reads 2 bytes at
    # a time; the fold itself reads only the stage.
    a, w, bias = make(rng, 69, 104, 32, True, 1, "float16")
    config = DefaultConfig(**{**_mma("float16", 104, 32, True, unroll=2).__dict__, "act_vector": False})
    y, _ = run(a, w, bias, "float16", config=config, multiprocessors=1)
    check(y, a, w, bias, "float16")
