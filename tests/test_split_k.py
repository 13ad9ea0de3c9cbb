"""The split-K down kernel of the decode chain (``int4gemv.decode.split_k``, issue 21) and the
``cvt.rn.f16x2.f32`` intrinsic it uses (``int4gemv.kernels.intrinsics.pack_half2``): against float64, fused
silu·mul bit for bit against the silu·mul kernel's output, bad input, and the chain wiring. Tiny
shapes (the simulator runs every thread as a Python thread); on a GPU the same tests run on the
hardware. Full size: ``tests/test_chain_gpu.py`` and ``bench.decode_chain``."""

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv.decode.chain import DecodeChain
from int4gemv.decode.model import ChainShape, random_chain, reference_logits, relative_error, tolerance
from int4gemv.decode.silu_mul import silu_mul_geometry, silu_mul_kernel
from int4gemv.decode.split_k import SplitK, SplitKLaunch
from int4gemv.kernels.intrinsics import pack_half2

#: Error bound of one half2 GEMV output against float64, relative to the sum of its terms'
#: magnitudes (``int4gemv.kernels.half2``: 9u + K/16 · 2**-24 ≈ 4.4e-3).
TERMS_BOUND = 4.4e-3


@cuda.jit
def _pack(lo, hi, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = pack_half2(lo[i], hi[i])


def test_pack_half2_rounds_like_an_fp16_store():
    """Ties to even, overflow to inf, NaN, subnormals, signed zero; ``low`` in bits 0..15."""
    h = np.float16
    lo = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520, -70000, np.nan, 2 ** -20, -0.0, 0.1],
                  np.float32)
    hi = np.array([3.0, -2 ** -25, 65519, 1e-9, 1.5, -(1 + 2 ** -11), 65504, -0.1], np.float32)
    out = cuda.to_device(np.zeros(lo.size, np.uint32))
    _pack[1, 8](cuda.to_device(lo), cuda.to_device(hi), out)
    got = out.copy_to_host().view(np.float16).reshape(-1, 2)
    with np.errstate(over="ignore"):
        want = np.stack([lo.astype(h), hi.astype(h)], axis=1)
    nan = np.isnan(want)  # NaN stays NaN; its payload is the hardware's (canonical), not numpy's
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert got[0, 0] == h(1) and got[1, 0] == h(1 + 2 ** -9) and np.isinf(got[2, 0])  # ties to even


def _silu_mul_f16(gu):
    """``silu(g)·u`` as the silu·mul kernel stores it (fp16), on the device running the tests."""
    n = gu.size // 2
    m = cuda.to_device(np.zeros(n, np.float16))
    grid, block = silu_mul_geometry(n)
    silu_mul_kernel(False)[grid, block](cuda.to_device(gu), m)
    return m.copy_to_host()


def _check_gemv(y, act, w, bias):
    ref = ig.reference_gemv(act, w, bias)
    terms = np.abs(act.astype(np.float64)) @ np.abs(w.dequantize().astype(np.float64)).T
    if bias is not None:
        terms += np.abs(bias.astype(np.float64))
    assert np.all(np.abs(y.astype(np.float64) - ref) <= TERMS_BOUND * terms + 2 ** -24)


@pytest.mark.parametrize("N, K, shape, zp, with_bias, max_blocks", [
    (10, 1056, SplitK(2, 1, 2), True, True, 2),     # 3 chunks, the last ragged; N tail; 2 blocks walk 3 groups
    (7, 96, SplitK(4, 1, 1), False, False, None),   # one chunk, most of it past K
])
def test_split_k_matches_float64_and_fuses_silu_bit_for_bit(rng, N, K, shape, zp, with_bias, max_blocks):
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32, symmetric=not zp)
    gu = (rng.standard_normal(2 * K) * 2).astype(np.float16)
    m = _silu_mul_f16(gu)
    bias = rng.standard_normal(N).astype(np.float16) if with_bias else None
    outs = {}
    for fused in (False, True):
        out = cuda.to_device(np.full(N + 3, np.nan, np.float16))  # poisoned, 3 past the end
        op = SplitKLaunch(cuda.to_device(gu if fused else m), w, out[:N],
                          None if bias is None else cuda.to_device(bias), shape=shape, fused=fused,
                          pdl=True, max_blocks=max_blocks)
        assert op.block == (32 * shape.chunks(K) * shape.col_warps,)
        op()
        outs[fused] = out.copy_to_host()
        assert np.all(np.isnan(outs[fused][N:]))
    _check_gemv(outs[False][:N], m, w, bias)
    np.testing.assert_array_equal(outs[True], outs[False])  # the fused activations are the same fp16


def test_split_k_refuses_bad_input(rng):
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)
    a, out = cuda.to_device(np.zeros(64, np.float16)), cuda.to_device(np.zeros(8, np.float16))
    with pytest.raises(ValueError, match="SplitK.cols must be a power of two"):
        SplitK(cols=3)
    with pytest.raises(ValueError, match="SplitK.unroll must be 1, 2, 4 or 8"):
        SplitK(unroll=3)
    with pytest.raises(ValueError, match="SplitK.col_warps must be a positive int"):
        SplitK(col_warps=0)
    with pytest.raises(TypeError, match="shape must be a SplitK"):
        SplitKLaunch(a, w, out, shape=(4, 4, 4))
    with pytest.raises(ValueError, match=r"a must have shape \(128,\)"):
        SplitKLaunch(a, w, out, fused=True)
    with pytest.raises(TypeError, match="a must be a Numba device array"):
        SplitKLaunch(np.zeros(64, np.float16), w, out)
    with pytest.raises(ValueError, match="a is misaligned"):
        SplitKLaunch(cuda.to_device(np.zeros(66, np.float16))[2:], w, out)
    with pytest.raises(TypeError, match="bias must be float16"):
        SplitKLaunch(a, w, out, cuda.to_device(np.zeros(8, np.float32)))
    with pytest.raises(ValueError, match="w must have block_size 32"):
        SplitKLaunch(a, ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 16), out)
    with pytest.raises(ValueError, match="threads for K=64; a block has at most 1024"):
        SplitKLaunch(a, w, out, shape=SplitK(col_warps=33))
    with pytest.raises(ValueError, match="max_blocks must be None or a positive int"):
        SplitKLaunch(a, w, out, max_blocks=0)


def test_split_k_takes_a_block_of_exactly_1024_threads(rng):
    """CUDA's block limit is 1024 threads inclusive: a shape needing exactly 1024 (K=64: one
    chunk, 32 column warps; K=4096 at unroll 4: two chunks, 16 warps) is accepted and sized to
    it, one warp more is refused. Built only: nothing is launched."""
    a, out = cuda.to_device(np.zeros(64, np.float16)), cuda.to_device(np.zeros(8, np.float16))
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)
    assert SplitKLaunch(a, w, out, shape=SplitK(col_warps=32)).block == (1024,)
    with pytest.raises(ValueError, match="= 1056 threads for K=64; a block has at most 1024"):
        SplitKLaunch(a, w, out, shape=SplitK(col_warps=33))
    wide = ig.quantize(rng.standard_normal((8, 4096)).astype(np.float32), 32)
    a = cuda.to_device(np.zeros(4096, np.float16))
    assert SplitK(unroll=4).chunks(4096) == 2
    assert SplitKLaunch(a, wide, out, shape=SplitK(unroll=4, col_warps=16)).block == (1024,)
    with pytest.raises(ValueError, match="2 chunks x 17 warps = 1088 threads"):
        SplitKLaunch(a, wide, out, shape=SplitK(unroll=4, col_warps=17))


ONE_LAYER = ChainShape(layers=1, hidden=32, intermediate=64, q_dim=32, kv_dim=16, vocab=48)


def test_chain_with_fused_split_k_down_matches_float64(rng, monkeypatch):
    """One layer, merged, every launch programmatic: qkv, o, gate_up, down (silu fused), lm_head."""
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP_COLS", "16")  # a quarter of the simulated threads
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP_UNROLL", "1")
    layers, lm_head = random_chain(ONE_LAYER, seed=5)
    chain = DecodeChain(layers, lm_head, tuning="single_warp+pdl", down_split=SplitK(16, 1, 1), fuse_silu=True)
    assert chain.launches == 5 and [k[0] for k in chain.kernels] == ["qkv", "o", "gate_up", "down", "lm_head"]
    for buf in (chain.qkv, chain.h, chain.gu, chain.m, chain.logits):
        buf.copy_to_device(np.full(buf.shape, np.nan, np.float16))
    x = rng.standard_normal(ONE_LAYER.hidden).astype(np.float16)
    logits = chain.run(x)
    assert relative_error(logits, reference_logits(layers, lm_head, x)) < tolerance(ONE_LAYER.layers)
    assert np.all(np.isnan(chain.m.copy_to_host()))  # nothing wrote m: down read gate/up's output


def test_chain_refuses_inconsistent_down_options(rng):
    layers, lm_head = random_chain(ONE_LAYER, seed=5)
    with pytest.raises(ValueError, match="fuse_silu needs down_split"):
        DecodeChain(layers, lm_head, fuse_silu=True)
    with pytest.raises(TypeError, match="down_split must be None or a SplitK"):
        DecodeChain(layers, lm_head, down_split=(4, 4, 4))
    with pytest.raises(ValueError, match="down_split and kind_tunings"):
        DecodeChain(layers, lm_head, down_split=SplitK(), kind_tunings={"down": ig.Tuning("single_warp")})
    with pytest.raises(TypeError, match="fuse_silu must be a bool"):
        DecodeChain(layers, lm_head, down_split=SplitK(), fuse_silu=1)


def test_bench_parses_split_k_and_fused_silu():
    from bench.decode_configs import chain_options, parse_config

    cfg = parse_config("merged:single_warp+pdl:qkv=4x4s:down=4x4k2:silu=fused")
    opts = chain_options(cfg)
    assert opts["down_split"] == SplitK(4, 4, 2) and opts["fuse_silu"] and opts["merged"]
    assert "down" not in opts["kind_tunings"] and "qkv" in opts["kind_tunings"]
    with pytest.raises(ValueError, match="silu=fused needs down=CxUkP"):
        parse_config("merged:single_warp+pdl:silu=fused")
