"""QuantizedWeight and quantize: the MatMulNBits layout, host side only (no CUDA)."""

import numpy as np
import pytest

from int4gemv import BLOCK_SIZES, QuantizedWeight, quantize


def _pack(q):
    """Reference packing written out by hand: byte i holds k=2i (low) and k=2i+1 (high)."""
    n, k = q.shape
    out = np.zeros((n, k // 2), np.uint8)
    for i in range(k // 2):
        out[:, i] = q[:, 2 * i] | (q[:, 2 * i + 1] << 4)
    return out


@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_layout_low_nibble_is_even_k(rng, bs):
    N, K = 3, 2 * bs
    q = rng.integers(0, 16, (N, K), dtype=np.uint8)
    scales = rng.uniform(0.5, 2, (N, 2)).astype(np.float16)
    w = QuantizedWeight(_pack(q).reshape(N, 2, bs // 2), scales, K=K, N=N, block_size=bs)
    np.testing.assert_array_equal(w.unpacked(), q)
    expect = (q.astype(np.float64) - 8) * np.repeat(scales.astype(np.float64), bs, axis=1)
    np.testing.assert_array_equal(w.dequantize(np.float64), expect)


def test_zero_points_low_nibble_is_even_block(rng):
    N, K, bs = 2, 96, 32  # 3 blocks -> 2 zero-point bytes per column, last high nibble unused
    zp = rng.integers(0, 16, (N, 3), dtype=np.uint8)
    packed_zp = np.stack([zp[:, 0] | (zp[:, 1] << 4), zp[:, 2]], axis=1).astype(np.uint8)
    q = rng.integers(0, 16, (N, K), dtype=np.uint8)
    w = QuantizedWeight(_pack(q), np.ones((N, 3), np.float16), packed_zp, K=K, N=N, block_size=bs)
    np.testing.assert_array_equal(w.zero_point_values(), zp)
    np.testing.assert_array_equal(w.dequantize(np.float64), q - np.repeat(zp, bs, axis=1).astype(np.float64))


def test_k_tail_padding_nibbles_are_ignored(rng):
    N, K, bs = 2, 40, 32  # second block holds 8 real elements and 24 padding nibbles
    q = rng.integers(0, 16, (N, 64), dtype=np.uint8)
    w = QuantizedWeight(_pack(q), np.ones((N, 2), np.float16), K=K, N=N, block_size=bs)
    assert w.dequantize().shape == (N, K)
    np.testing.assert_array_equal(w.unpacked(), q[:, :K])


def test_ort_flat_arrays_and_fp32_scales_are_accepted(rng):
    N, K, bs = 4, 64, 16
    w = quantize(rng.standard_normal((N, K)).astype(np.float32), bs, symmetric=False)
    flat = QuantizedWeight(w.packed.reshape(-1), w.scales.astype(np.float32).reshape(-1),
                           w.zero_points.reshape(-1), K=K, N=N, block_size=bs)
    assert flat.scales.dtype == np.float16
    np.testing.assert_array_equal(flat.dequantize(), w.dequantize())
    two_d = QuantizedWeight(w.packed.reshape(N, -1), w.scales, w.zero_points, K=K, N=N, block_size=bs)
    np.testing.assert_array_equal(two_d.packed, w.packed)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_quantize_error_is_within_half_a_step(rng, bs, symmetric):
    N, K = 5, 200
    x = rng.standard_normal((N, K)).astype(np.float32)
    w = quantize(x, bs, symmetric)
    err = np.abs(w.dequantize(np.float64) - x)
    step = np.repeat(np.abs(w.scales.astype(np.float64)), bs, axis=1)[:, :K]
    # Half a step of rounding, plus the symmetric range [-8, 7] clipping the positive extreme.
    assert np.all(err <= step * (1.0 if symmetric else 0.5) + 1e-3 * np.abs(x) + 1e-6)
    assert (w.zero_points is None) == symmetric


def test_quantize_symmetric_maps_the_largest_magnitude_to_q0(rng):
    x = rng.standard_normal((1, 32)).astype(np.float32)
    w = quantize(x, 32)
    i = np.abs(x).argmax()
    assert w.unpacked()[0, i] == 0
    assert np.isclose(float(w.scales[0, 0]), x[0, i] / -8, rtol=1e-3)


def test_quantize_zero_block_gets_unit_scale():
    w = quantize(np.zeros((2, 32), np.float32), 32)
    assert np.all(w.scales == 1) and np.all(w.dequantize() == 0)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(packed=np.zeros((2, 1, 16), np.int8)), TypeError, "packed"),
    (dict(packed=np.zeros((2, 1, 8), np.uint8)), ValueError, "packed"),
    (dict(packed=[1, 2]), TypeError, "packed"),
    (dict(scales=np.ones((2, 1), np.float64)), TypeError, "scales"),
    (dict(scales=np.ones((2, 2), np.float16)), ValueError, "scales"),
    (dict(scales=np.full((2, 1), np.inf, np.float16)), ValueError, "scales"),
    (dict(zero_points=np.zeros((2, 2), np.uint8)), ValueError, "zero_points"),
    (dict(zero_points=np.zeros((2, 1), np.int32)), TypeError, "zero_points"),
    (dict(K=30), ValueError, "K"),
    (dict(K=32.0), TypeError, "K"),
    (dict(N=0), ValueError, "N"),
    (dict(block_size=48), ValueError, "block_size"),
])
def test_bad_arrays_are_rejected_by_name(kwargs, exc, match):
    args = dict(packed=np.zeros((2, 1, 16), np.uint8), scales=np.ones((2, 1), np.float16),
                zero_points=None, K=32, N=2, block_size=32)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        QuantizedWeight(args.pop("packed"), args.pop("scales"), args.pop("zero_points"), **args)


@pytest.mark.parametrize("w, bs, exc", [
    (np.zeros((2, 30), np.float32), 32, ValueError),
    (np.zeros((2, 32), np.int32), 32, TypeError),
    (np.zeros(32, np.float32), 32, TypeError),
    (np.zeros((2, 32), np.float32), 8, ValueError),
])
def test_quantize_rejects_bad_input(w, bs, exc):
    with pytest.raises(exc):
        quantize(w, bs)


def test_nbytes_counts_everything_a_gemv_reads(rng):
    w = quantize(rng.standard_normal((8, 64)).astype(np.float32), 32, symmetric=False)
    assert w.nbytes == 8 * 32 + 8 * 2 * 2 + 8 * 1
    assert "N=8" in repr(w) and "host only" in repr(w)
