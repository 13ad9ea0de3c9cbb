"""The tensor-core kernel and its intrinsics, against float64, on the simulator and on the GPU.

* ``mma``: a kernel that loads ``A``, ``B``, ``C`` into fragments with the PTX ISA's m16n8k16
  mapping written out here (independently of the stand-in) must give ``A · B + C``; on the
  simulator this checks the stand-in, on the GPU the same test checks the hardware agrees.
* the operand pairs: every byte value and zero point, against ``(q - zp) * s`` rounded once.
* the kernel: fresh random data, output poisoned with NaN, every element checked; every block
  size with and without zero points, both dtypes, M = 1..16, K tails (each remainder of the
  128-element segment and of the 8-element word), N tails, every configuration path (tiles,
  unroll, ksplit, double buffer, 8-byte weight loads, element activation loads, persistent
  rounds).

Error measure (as tests/test_default_kernel.py): per output, relative to ``sum_k |a_k| |w_nk|``
(+ |bias|). fp16: each weight is ``(q - zp) * s`` rounded to fp16 (2**-12 relative), the sum is
float32, the output rounded to fp16 (2**-12): bound 2e-3. bf16: 2**-9 twice: 4e-3.
"""

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv.descriptor import Problem
from int4gemv.device import device_facts
from int4gemv.dispatch import plan_gemv
from int4gemv.kernels.mma import mma_bf16, mma_f16
from int4gemv.kernels.mma_tiling import mma_batch_reason
from int4gemv.kernels.mma_pairs import (scaled_pair_bf16, scaled_pair_f16, zero_point_offset_bf16,
                                        zero_point_offset_f16)
from int4gemv.kernels.tensor_core import tensor_core_kernel
from int4gemv.kernels.tensor_core_config import (TensorCoreConfig, choose_config, geometry,
                                                 wide_tiles)
from int4gemv.tuning import Tuning, resolve_tuning

BF16 = ml_dtypes.bfloat16
DTYPES = {"float16": np.float16, "bfloat16": BF16}
TOL = {"float16": 2e-3, "bfloat16": 4e-3}
NORM_TOL = {"float16": 1e-3, "bfloat16": 3e-3}


def bits(x):
    return np.ascontiguousarray(x).view(np.uint16)


# --- the mma fragment mapping -------------------------------------------------------------

def _fragment_kernel(mma):
    @cuda.jit
    def kernel(A, B, C, D):
        """A [16,16], B [16,8] as uint16 bits, C/D [16,8] float32; one warp."""
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4

        def pack(lo, hi):
            return np.uint32(lo) | (np.uint32(hi) << np.uint32(16))
        a0 = pack(A[g, 2 * t], A[g, 2 * t + 1])
        a1 = pack(A[g + 8, 2 * t], A[g + 8, 2 * t + 1])
        a2 = pack(A[g, 2 * t + 8], A[g, 2 * t + 9])
        a3 = pack(A[g + 8, 2 * t + 8], A[g + 8, 2 * t + 9])
        b0 = pack(B[2 * t, g], B[2 * t + 1, g])
        b1 = pack(B[2 * t + 8, g], B[2 * t + 9, g])
        d = mma(a0, a1, a2, a3, b0, b1, C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t],
                C[g + 8, 2 * t + 1])
        D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1] = d
    return kernel


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_mma_fragment_mapping_matches_a_float64_product(rng, dtype):
    A = rng.standard_normal((16, 16)).astype(DTYPES[dtype])
    B = rng.standard_normal((16, 8)).astype(DTYPES[dtype])
    C = rng.standard_normal((16, 8)).astype(np.float32)
    D = np.full((16, 8), np.nan, np.float32)
    kernel = _fragment_kernel(mma_f16 if dtype == "float16" else mma_bf16)
    kernel[1, 32](bits(A), bits(B), C, D)
    expect = A.astype(np.float64) @ B.astype(np.float64) + C
    # products of 16-bit floats are exact in fp32; the sum of 17 terms rounds a few times
    assert np.max(np.abs(D - expect) / (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))
                                        + np.abs(C))) < 1e-6


# --- the operand pairs --------------------------------------------------------------------

def _pairs_kernel(dtype):
    F16 = dtype == "float16"

    @cuda.jit
    def kernel(words, zps, scale_bits, out):
        """out[i, z, b] = scaled pair of byte b of words[i] with zero point zps[z]."""
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i >= words.shape[0]:
            return
        w = words[i]
        s = np.uint32(scale_bits[0])
        s2 = s | (s << np.uint32(16))
        for z in range(zps.shape[0]):
            zp = np.uint32(zps[z])
            for b in range(4):
                if F16:
                    out[i, z, b] = scaled_pair_f16(w, w >> np.uint32(4), b,
                                                   zero_point_offset_f16(zp), s2)
                else:
                    out[i, z, b] = scaled_pair_bf16(w, w >> np.uint32(4), b,
                                                    zero_point_offset_bf16(zp), s2)
    return kernel


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_scaled_pairs_every_byte_and_zero_point(rng, dtype):
    # 64 words cover all 256 byte values in every byte position; zero points 0, 7, 8, 15.
    bytes_ = np.stack([np.roll(np.arange(256, dtype=np.uint8), 64 * p) for p in range(4)], 1)
    words = np.ascontiguousarray(bytes_).view(np.uint32).reshape(-1)[:256]
    zps = np.array([0, 7, 8, 15], np.uint8)
    scale = np.array([rng.uniform(0.001, 0.1)], DTYPES[dtype])
    out = np.zeros((words.size, zps.size, 4), np.uint32)
    _pairs_kernel(dtype)[8, 32](words, zps, bits(scale), out)
    got = out.view(DTYPES[dtype]).reshape(words.size, zps.size, 4, 2).astype(np.float64)
    wb = words.view(np.uint8).reshape(-1, 4).astype(np.int64)
    q = np.stack([wb & 15, wb >> 4], -1)                      # [word, byte, low/high]
    expect = ((q[:, None] - zps[None, :, None, None]) * scale.astype(np.float64)[0])
    expect = expect.astype(DTYPES[dtype]).astype(np.float64)   # one rounding
    assert np.array_equal(got, expect)


# --- the kernel ---------------------------------------------------------------------------

def make(rng, N, K, bs, zp, M, dtype):
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), bs, symmetric=not zp)
    a = rng.standard_normal((M, K)).astype(DTYPES[dtype])
    bias = rng.standard_normal(N).astype(DTYPES[dtype])
    return a, w, bias


def run(a, w, bias, dtype, config=None, multiprocessors=2, **overrides):
    """Launch the kernel (``choose_config`` with ``overrides``); returns float64 [M, N]."""
    M, K = a.shape
    N, zp = w.N, w.zero_points is not None
    if config is None:
        config = choose_config(M, N, K, w.block_size, dtype, zp, multiprocessors=multiprocessors)
        config = TensorCoreConfig(**{**config.__dict__, **overrides})
    scales = bits(w.scales.astype(DTYPES[dtype])).reshape(-1)
    d_zp = cuda.to_device(w.zero_points.reshape(-1) if zp else np.zeros(1, np.uint8))
    act = bits(a).reshape(-1)
    if not config.act_vector:   # an activation address that is not 16-byte aligned
        act = cuda.to_device(np.concatenate([np.zeros(1, np.uint16), act]))[1:]
    poison = np.full(M * N, np.nan, np.float16)
    d_out = cuda.to_device(poison if dtype == "float16" else poison.view(np.uint16))
    has_bias = bias is not None
    b = (bias if dtype == "float16" else bits(bias)) if has_bias else np.zeros(1, np.uint16)
    grid, block = geometry(config, N, multiprocessors)
    tensor_core_kernel(config)[grid, block](act, cuda.to_device(w.packed.reshape(-1)), scales,
                                            d_zp, b, has_bias, d_out, K, N, M)
    y = d_out.copy_to_host()
    y = (y.view(BF16) if dtype == "bfloat16" else y).astype(np.float64).reshape(M, N)
    assert np.all(np.isfinite(y)), f"outputs not written: {np.argwhere(~np.isfinite(y))[:5]}"
    return y, config


def check(y, a, w, bias, dtype):
    scales = w.scales.astype(DTYPES[dtype]).astype(np.float64)
    k_block = np.arange(w.K) // w.block_size
    deq = (w.unpacked().astype(np.float64)
           - w.zero_point_values().astype(np.float64)[:, k_block]) * scales[:, k_block]
    a64 = a.astype(np.float64)
    ref, size = a64 @ deq.T, np.abs(a64) @ np.abs(deq).T
    if bias is not None:
        ref, size = ref + bias.astype(np.float64), size + np.abs(bias.astype(np.float64))
    termwise = np.max(np.abs(y - ref) / size)
    normwise = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    assert termwise <= TOL[dtype], f"term-wise error {termwise:.2e}"
    assert normwise <= NORM_TOL[dtype], f"norm-wise error {normwise:.2e}"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("zp", [False, True])
def test_block_sizes_zero_points_bias(rng, dtype, bs, zp):
    # K = 2 bs + 8: a partial last group, a partial last segment; N = 20: a partial tile.
    a, w, bias = make(rng, 20, 2 * bs + 8, bs, zp, 3, dtype)
    y, _ = run(a, w, bias, dtype)
    check(y, a, w, bias, dtype)


@pytest.mark.parametrize("M", range(1, 17))
def test_every_batch_size(rng, M):
    # one 8-row tile up to M = 8, two beyond; rows >= M are padding that is never stored
    # (M = 8 and 16 compile without row predicates); a few dtypes and zero points (compiled in)
    # vary so the GPU run compiles few kernels
    dtype = "bfloat16" if M in (5, 16) else "float16"
    a, w, bias = make(rng, 17, 136, 32, M in (3, 12), M, dtype)
    y, config = run(a, w, bias, dtype)
    assert config.row_tiles == (1 if M <= 8 else 2)
    check(y, a, w, bias, dtype)


@pytest.mark.parametrize("K,bs", [(8, 16), (16, 32), (24, 64), (120, 128), (128, 32), (136, 16),
                                  (200, 64), (248, 128), (264, 32), (392, 16)])
def test_k_tails(rng, K, bs):
    # K below one word group, each remainder class of the 128-element segment and of the
    # 32-element lane range, odd group counts (8-byte weight rows for bs 16)
    dtype = "float16" if K % 16 else "bfloat16"     # both dtypes, one compilation per K
    a, w, _ = make(rng, 9, K, bs, True, 2, dtype)
    y, _ = run(a, w, None, dtype)
    check(y, a, w, None, dtype)


@pytest.mark.parametrize("N", [1, 7, 16, 33])
def test_n_tails(rng, N):
    a, w, bias = make(rng, N, 64, 32, False, 4, "float16")
    y, _ = run(a, w, bias, "float16")
    check(y, a, w, bias, "float16")


@pytest.mark.parametrize("overrides, dtype, M", [
    (dict(tiles=2), "float16", 10), (dict(tiles=4, unroll=1), "bfloat16", 3),
    (dict(unroll=4, double_buffer=False), "float16", 3), (dict(double_buffer=False), "bfloat16", 16), (dict(ksplit=4, unroll=1), "bfloat16", 3),
    (dict(double_buffer=True, unroll=1), "float16", 3),
    (dict(double_buffer=True, unroll=2, ksplit=2), "bfloat16", 10),
    (dict(double_buffer=True, unroll=1, ksplit=4), "float16", 3),
    (dict(act_vector=False), "bfloat16", 3), (dict(ksplit=2, warps=4, blocks_per_sm=1), "float16", 3),
    (dict(ksplit=8, unroll=1), "float16", 5),   # more K-split warps than segments and than sums
    # the session-6 probe candidates (bench/target_tc_probes.py): fewer, longer warps; two tiles
    # at 2 blocks per SM; split-K 4 double-buffered
    (dict(ksplit=4, unroll=4, warps=8, blocks_per_sm=2, double_buffer=False), "float16", 8),
    (dict(ksplit=4, unroll=4, warps=8, blocks_per_sm=2, double_buffer=False), "bfloat16", 16),
    (dict(ksplit=8, unroll=4, warps=8, blocks_per_sm=2, double_buffer=False), "float16", 2),
    (dict(tiles=2, blocks_per_sm=2), "float16", 16),
    (dict(ksplit=4, unroll=2, warps=8, blocks_per_sm=2, double_buffer=True), "bfloat16", 8),
])
def test_configuration_paths(rng, overrides, dtype, M):
    # K = 392: 4 segments (the last holds one word), so steps are full and partial, slices
    # uneven, the double buffer ends on either buffer; bs 16 with 25 groups: 8-byte weight rows
    a, w, bias = make(rng, 17, 392, 16, True, M, dtype)
    y, config = run(a, w, bias, dtype, multiprocessors=1, **overrides)
    assert not config.weight_vector
    check(y, a, w, bias, dtype)


def test_a_slice_that_is_not_a_whole_number_of_steps(rng):
    # K = 648: 6 segments, ksplit 2 -> 3 per warp, unroll 2: each warp's second step holds one
    # segment of its own; the next segment belongs to the other warp (a "full" step must not
    # take it)
    a, w, bias = make(rng, 9, 648, 32, False, 3, "float16")
    y, config = run(a, w, bias, "float16", multiprocessors=1, ksplit=2, unroll=2)
    check(y, a, w, bias, "float16")


def test_persistent_rounds_with_split_k(rng):
    # one block of 2 slots x ksplit 2 walks 3 column groups: the last round has an idle slot
    a, w, bias = make(rng, 48, 256, 64, True, 5, "bfloat16")
    config = TensorCoreConfig("bfloat16", 5, 64, True, ksplit=2, warps=4, blocks_per_sm=1)
    y, _ = run(a, w, bias, "bfloat16", config=config, multiprocessors=1)
    check(y, a, w, bias, "bfloat16")


@pytest.mark.gpu
@pytest.mark.parametrize("N, K, M, dtype", [(6144, 2048, 16, "float16"), (2048, 6144, 8, "bfloat16"),
                                            (6144, 2048, 2, "bfloat16")])
def test_decode_shapes_as_chosen_for_the_h200(rng, N, K, M, dtype):
    # gate/up and down at the configuration the dispatcher chooses on 132 SMs (split-K, one
    # step per warp, 3 blocks of 8 warps or one of 16 double-buffered): every element
    a, w, bias = make(rng, N, K, 32, False, M, dtype)
    y, config = run(a, w, bias, dtype, multiprocessors=132)
    assert config.ksplit > 1
    check(y, a, w, bias, dtype)


def test_config_validates_itself():
    with pytest.raises(ValueError, match="dtype"):
        TensorCoreConfig("float32", 1, 32, False)
    with pytest.raises(ValueError, match="M"):
        TensorCoreConfig("float16", 17, 32, False)
    with pytest.raises(ValueError, match="warps"):
        TensorCoreConfig("float16", 1, 32, False, ksplit=8, warps=4)
    with pytest.raises(TypeError, match="tiles"):
        TensorCoreConfig("float16", 1, 32, False, tiles=1.0)
    with pytest.raises(TypeError, match="config"):
        tensor_core_kernel("config")


def test_choice_fills_the_gpu_and_splits_k_only_when_needed():
    lm = choose_config(16, 151936, 2048, 32, "float16", False)
    assert lm.ksplit == 1 and lm.row_tiles == 2 and lm.blocks_per_sm == 3 and not lm.double_buffer
    down = choose_config(16, 2048, 6144, 32, "float16", False)
    assert down.ksplit == 16 and down.blocks_per_sm == 1 and down.double_buffer
    small = choose_config(8, 2048, 2048, 32, "float16", False)
    assert small.ksplit == 16 and small.warps == 16 and small.row_tiles == 1
    grid, block = geometry(small, 2048, 132)
    assert grid[0] * small.slots * 16 >= 2048 and block == (512, 1, 1)


# --- two tiles per warp for wide N at M <= 8 (session 7) ---------------------------------

LM_HEAD = (151936, 2048)


def test_wide_tiles_rule_is_exact_at_its_bounds():
    # 132 SMs x 16 warps = 2112 groups of 32 columns: N = 32 * 2111 + 1 is the narrowest N with
    # one group per warp (a partial group counts); one column less is one group short
    for M, N, tiles in [(8, 67553, 2), (1, 67553, 2), (9, 67553, 1), (8, 67552, 1),
                        (8, 67584, 2), (16, 151936, 1), (8, 151936, 2), (2, 151936, 2),
                        (8, 101376, 2)]:   # 396 blocks: balancing alone would take 3 per SM
        c = choose_config(M, N, 2048, 32, "float16", False)
        assert c.tiles == tiles, (M, N)
        if tiles == 2:
            assert (c.ksplit, c.warps, c.blocks_per_sm, c.double_buffer) == (1, 8, 2, False)
    # one multiprocessor (the simulator): 16 groups of 32 columns
    assert choose_config(8, 481, 136, 32, "bfloat16", False, multiprocessors=1).tiles == 2
    assert choose_config(8, 480, 136, 32, "bfloat16", False, multiprocessors=1).tiles == 1
    # zero points at M = 8 spill with 2 tiles unless the group is a whole segment
    for bs, zp, M, tiles in [(32, True, 8, 1), (16, True, 8, 1), (64, True, 8, 1),
                             (128, True, 8, 2), (16, True, 7, 2), (16, False, 8, 2)]:
        assert choose_config(M, 151936, 2048, bs, "bfloat16", zp).tiles == tiles, (bs, zp, M)
    # gate/up and down keep their split-K choices
    gate = choose_config(8, 6144, 2048, 32, "float16", False)
    assert (gate.tiles, gate.ksplit, gate.blocks_per_sm) == (1, 8, 3)
    down = choose_config(8, 2048, 6144, 32, "float16", False)
    assert (down.tiles, down.ksplit, down.blocks_per_sm, down.double_buffer) == (1, 16, 1, True)


@pytest.mark.parametrize("M, N, zp, tiles, words", [
    (4, 151936, False, 2, "session 7"), (8, 151936, False, 2, "session 7"),
    (9, 151936, False, 1, "two row tiles"), (16, 151936, False, 1, "two row tiles"),
    (8, 151936, True, 1, "2 tiles spill"), (8, 6144, False, 1, "192 groups of 32 columns < 2112")])
def test_explain_says_why_tiles(M, N, zp, tiles, words):
    # named: with the environment unset lm_head-wide N takes the default tiling's mma fold
    p = plan_gemv(Problem(M, N, 2048, 32, "float16", zp, False),
                  resolve_tuning("tensor_core", environ={}), device_name="G", table={})
    assert p.config.tiles == tiles
    why = dict((name, source) for name, _, source in p.sources)["unroll"]
    assert f"{tiles} tile(s) of 16 columns" in why and words in why


# Every configuration the rule gives the GPU (lm_head on 132 SMs): each dtype x block size x
# zero points (zero points at M = 8 only with bs 128: the others spill and keep 1 tile), M = 1..8
# (tails of the 8-row tile), unroll 1/2 (K of one segment or more) and the Tuning overrides 4/8,
# 16- and 8-byte weight rows, vector and element activation loads; run at
# N = 33 / 52 (a second group of one column / with a partial second tile; 6 idle warps), once at
# N = 545 (18 groups over 16 warp slots: a second round), K = 376 (3 segments, the last partial)
# unless said.
WIDE_CASES = [("float16", 16, False, 4, {}), ("float16", 16, True, 3, dict(K=392)),
              ("float16", 32, False, 8, {}), ("float16", 32, True, 7, dict(act_aligned16=False)),
              ("float16", 64, False, 5, dict(unroll=4)), ("float16", 64, True, 2, {}),
              ("float16", 128, False, 6, {}), ("float16", 128, True, 8, {}),
              ("bfloat16", 16, False, 1, {}), ("bfloat16", 16, True, 6, {}),
              ("bfloat16", 32, False, 8, dict(K=120)), ("bfloat16", 32, True, 4, {}),
              ("bfloat16", 64, False, 7, {}), ("bfloat16", 64, True, 5, {}),
              ("bfloat16", 128, False, 3, {}), ("bfloat16", 128, True, 2, dict(unroll=8)),
              ("bfloat16", 32, False, 3, dict(N=545, K=120))]


@pytest.mark.parametrize("dtype, bs, zp, M, kw", WIDE_CASES)
def test_every_wide_tiles_choice_runs(rng, dtype, bs, zp, M, kw):
    kw = dict(kw)
    K, N = kw.pop("K", 376), kw.pop("N", 52 if M % 2 else 33)
    config = choose_config(M, LM_HEAD[0], K, bs, dtype, zp, **kw)
    assert config.tiles == 2 and config.blocks_per_sm == 2 and not config.double_buffer
    assert config.weight_vector == (K != 392)
    assert config.unroll == kw.get("unroll", 1 if K <= 128 else 2)
    a, w, bias = make(rng, N, K, bs, zp, M, dtype)
    bias = bias if (M + bs) % 3 else None
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)


def _weight(rng, N, dtype, symmetric, K=136):
    return ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32, symmetric=symmetric,
                       dtype=dtype)


@pytest.mark.parametrize("dtype, M", [("bfloat16", 5), ("float16", 8)])
def test_explain_applies_the_rule_at_its_bound(rng, dtype, M):
    # on the simulator (one multiprocessor) N = 481 is 16 groups of 32, the last of one column:
    # two tiles; 480 is one group short. On a GPU, whatever the rule says for its SMs.
    sms = device_facts()[1]
    a = rng.standard_normal((M, 136)).astype(DTYPES[dtype])
    for N in (481, 480):
        w = _weight(rng, N, dtype, symmetric=M == 8)
        assert ig.explain(a, w).config.tiles == (2 if wide_tiles(M, N, sms) else 1)
    assert sms != 1 or (wide_tiles(M, 481, sms) and not wide_tiles(M, 480, sms))


def test_the_rule_through_gemv(rng):
    # The public path where the simulator's rule gives 2 tiles (M = 8 runs in
    # test_every_wide_tiles_choice_runs: through gemv it takes 70 s on the simulator).
    dtype, M = "bfloat16", 5
    w = _weight(rng, 481, dtype, symmetric=False, K=72)
    a = rng.standard_normal((M, 72)).astype(DTYPES[dtype])
    assert ig.explain(a, w).config.tiles == (2 if wide_tiles(M, 481, device_facts()[1]) else 1)
    bias = rng.standard_normal(481).astype(DTYPES[dtype])
    out = np.full((M, 481), np.nan, DTYPES[dtype])
    y = ig.gemv(a, w, bias=bias, out=out)
    assert np.all(np.isfinite(y.astype(np.float64)))
    check(y.astype(np.float64), a, w, bias, dtype)


# --- the dispatcher -----------------------------------------------------------------------

def plan(tuning=None, M=4, dtype="float16", bs=32, zp=False, table=None, environ=None, N=6144):
    p = Problem(M, N, 2048, bs, dtype, zp, False)
    resolved = resolve_tuning(tuning, environ=environ or {})
    return plan_gemv(p, resolved, device_name="G", table=table)


@pytest.mark.parametrize("M", [2, 8, 16])
@pytest.mark.parametrize("dtype, bs, zp", [("float16", 32, False), ("bfloat16", 128, True)])
def test_batches_run_on_tensor_cores_and_say_why(M, dtype, bs, zp):
    # N = 512 past 8 rows: narrower than the fold's K splits take (32 or 16 columns a group)
    p = plan(M=M, dtype=dtype, bs=bs, zp=zp, N=6144 if M <= 8 else 512)
    assert p.kernel == "tensor_core" and p.config.M == M and p.config.dtype == dtype
    for words in (f"M = {M} >= 2", "mma.sync", dtype, f"block_size {bs}",
                  "with zero points" if zp else "no zero points"):
        assert words in p.reason
    rows = {name: (value, source) for name, value, source in p.sources}
    assert "segment" in rows["unroll"][1] and "not used" in rows["cols"][1]


def test_m1_stays_on_the_cuda_core_kernels_unless_asked_or_measured():
    assert plan(M=1).kernel == "default"
    assert plan("tensor_core", M=1).kernel == "tensor_core"
    assert plan(Tuning("tensor_core", unroll=4), M=1).config.unroll == 4
    table = ig.autotune.parse_table({"schema": 2, "devices": {"G": {"entries": [dict(
        N=6144, K=2048, M=1, block_size=32, zero_points=False, dtype="float16",
        variant="tensor_core", note="measured faster")]}}})
    p = plan("auto", M=1, table=table)
    assert p.kernel == "tensor_core" and "measured" in p.reason


def test_the_environment_keeps_its_values_and_batches_fall_back_to_tensor_cores():
    p = plan(M=4, environ={"INT4GEMV_SINGLE_WARP": "1"})
    assert p.kernel == "tensor_core" and "single_warp requested but ineligible" in p.reason
    assert plan(M=1, environ={"INT4GEMV_SINGLE_WARP": "1"}).kernel == "single_warp"
    with pytest.raises(ValueError, match="INT4GEMV_SINGLE_WARP"):
        plan(M=4, environ={"INT4GEMV_SINGLE_WARP": "tensor_core"})


@pytest.mark.parametrize("dtype, M", [("float16", 16), ("bfloat16", 2)])
def test_through_gemv(rng, dtype, M):
    w = ig.quantize(rng.standard_normal((21, 200)).astype(np.float32), 16, symmetric=False,
                    dtype=dtype)
    a = rng.standard_normal((M, 200)).astype(DTYPES[dtype])
    bias = rng.standard_normal(21).astype(DTYPES[dtype])
    # past 8 rows, 21 columns give the simulator's one SM a block of the fold's K split
    expected = "default" if mma_batch_reason(M, 21, 200, device_facts()[1]) else "tensor_core"
    assert ig.explain(a, w, bias=bias).kernel == expected
    out = np.full((M, 21), np.nan, DTYPES[dtype])
    y = ig.gemv(a, w, bias=bias, out=out, tuning="tensor_core")
    assert y is out and np.all(np.isfinite(y.astype(np.float64)))
    check(y.astype(np.float64), a, w, bias, dtype)


def test_the_benchmark_selects_it_by_name():
    from int4gemv.benchmark import random_weight, time_gemv
    r = time_gemv(random_weight(32, 256, rng=1), M=4, tuning="tensor_core")
    assert r.kernel == "tensor_core" and r.ok and r.rel_err < 1e-2


def test_offline_sass_summary_counts_up_to_the_first_unpredicated_weight_load():
    from bench.offline_sass import summarize
    sass = "\n".join([
        "        /*0000*/                   LDC R1, c[0x0][0x28] ;",
        "        /*0010*/              @!P0 LDG.E.NA.128.CONSTANT R4, desc[UR4][R2.64] ;",
        "        /*0020*/                   IMAD R5, R5, 0x2, RZ ;",
        "        /*0030*/                   LDG.E.NA.128.CONSTANT R8, desc[UR4][R2.64] ;",
        "        /*0040*/                   HMMA.16816.F32 R12, R4, R8, R12 ;"])
    s = summarize(sass)
    assert s["static"] == 5 and s["before_first_full_weight_load"] == 3
    assert s["mix"] == {"LDC": 1, "LDG": 2, "IMAD": 1, "HMMA": 1}
