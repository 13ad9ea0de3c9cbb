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


#: Float32 arithmetic slack of ``x * (1 / scale) + zp`` (|t| <= 16: a few ulps of 2**-19), in steps.
ARITHMETIC_STEPS = 2.0 ** -16


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_quantize_error_is_within_half_a_step_of_the_stored_scale(rng, bs, symmetric):
    """Half a step of the *stored* scale (plus float32 slack), except the symmetric range's
    clipped positive end (x / scale in (7.5, 8]: q = 15). Rounding with another scale than the
    stored one (e.g. the float32 scale before it is rounded to float16, 2**-11 apart) puts
    elements near a tie up to 8 * 2**-11 steps further away and fails."""
    N, K = 5, 200
    x = (rng.standard_normal((N, K)) * 10.0 ** rng.uniform(-2, 2, (N, 1))).astype(np.float32)
    w = quantize(x, bs, symmetric)
    k_block = np.arange(K) // bs
    step = np.abs(w.scales.astype(np.float64))[:, k_block]
    err = np.abs(w.dequantize(np.float64) - x) / step
    zp = w.zero_point_values().astype(np.float64)[:, k_block]
    t = x / w.scales.astype(np.float64)[:, k_block] + zp
    clipped = t > 15.5
    assert np.all(err[~clipped] <= 0.5 + ARITHMETIC_STEPS), \
        f"worst {err[~clipped].max() - 0.5:.2e} steps over half"
    assert np.all(w.unpacked()[clipped] == 15) and np.all(t[clipped] <= 16 + ARITHMETIC_STEPS)
    assert (w.zero_points is None) == symmetric


@pytest.mark.parametrize("symmetric", [True, False])
def test_quantize_rounds_ties_up_as_orts_roundf_of_x_over_scale_plus_zp(rng, symmetric):
    """ORT rounds ``roundf(x * (1 / scale) + zp)``; that sum is >= 0 wherever it matters, so a
    tie rounds up (toward +inf in x), for negative x too: not half to even, and not
    ``roundf(x / scale) + zp`` (away from zero in x)."""
    bs, scale = 32, 0.25  # a power of two: x / scale is exact
    halves = np.arange(-15, 15) + 0.5  # every half step of the range
    x = np.zeros((2, 2 * bs), np.float32)
    if symmetric:
        x[:, 0] = -8 * scale  # the block's extreme: scale = 0.25, zp = 8
        x[:, 1:31] = halves[(halves > -8) & (halves < 7)][:30].repeat(3)[:30] * scale
    else:
        x[:, 0], x[:, 1] = -6 * scale, 9 * scale  # (hi - lo) / 15 = 0.25, zp = 6
        x[:, 2:32] = halves[(halves > -6) & (halves < 9)][:30].repeat(3)[:30] * scale
    w = quantize(x, bs, symmetric)
    assert float(w.scales[0, 0]) == scale and w.zero_point_values()[0, 0] == (8 if symmetric else 6)
    q = w.unpacked()[:, :bs].astype(np.float64)
    zp = 8 if symmetric else 6
    tie = (x[:, :bs] / scale) % 1 == 0.5
    assert tie.sum() >= 40
    np.testing.assert_array_equal(q[tie], np.floor(x[:, :bs][tie] / scale + zp) + 1)


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
    (dict(scales=np.ones((2, 1), np.int16)), TypeError, "scales"),
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


# -- issue 14: bad input to weights and quantize -----------------------------------------------

def _args(**kw):
    args = dict(packed=np.zeros((2, 1, 16), np.uint8), scales=np.ones((2, 1), np.float16),
                zero_points=None, K=32, N=2, block_size=32)
    args.update(kw)
    return args


def _make(**kw):
    args = _args(**kw)
    return QuantizedWeight(args.pop("packed"), args.pop("scales"), args.pop("zero_points"), **args)


@pytest.mark.parametrize("scales, words", [
    (np.array([[70000.0], [1.0]], np.float32), "overflow float16"),
    (np.array([[-1e6], [1.0]], np.float32), "overflow float16"),
    (np.array([[1e-9], [1.0]], np.float32), "underflow float16"),
    (np.array([[np.nan], [1.0]], np.float32), "finite"),
])
def test_fp32_scales_that_do_not_fit_fp16_are_refused(scales, words):
    with pytest.raises(ValueError, match=f"scales.*{words}|scales must be {words}"):
        _make(scales=scales)


def test_fp32_scales_that_fit_are_converted_and_zero_stays_allowed():
    w = _make(scales=np.array([[65504.0], [0.0]], np.float32))
    assert w.scales.dtype == np.float16 and w.scales[0, 0] == 65504 and w.scales[1, 0] == 0
    assert _make(scales=np.array([[1e-9], [1.0]], np.float32), dtype="bfloat16").dtype == "bfloat16"


@pytest.mark.parametrize("packed", [
    np.zeros((16, 2), np.uint8),        # the right size, transposed
    np.zeros((2, 16, 1), np.uint8),
    np.zeros((1, 32), np.uint8),
    np.zeros((2, 1, 16, 1), np.uint8),
    np.zeros(33, np.uint8),
])
def test_packed_only_in_its_documented_shapes(packed):
    with pytest.raises(ValueError, match="packed must have shape"):
        _make(packed=packed)


def test_scales_and_zero_points_transposed_are_refused():
    with pytest.raises(ValueError, match="scales must have shape"):
        _make(scales=np.ones((2, 4), np.float16).T, K=128, block_size=32,
              packed=np.zeros((2, 4, 16), np.uint8))
    with pytest.raises(ValueError, match="zero_points must have shape"):
        _make(zero_points=np.zeros((2, 4), np.uint8).T, K=128, block_size=16,
              packed=np.zeros((2, 8, 8), np.uint8), scales=np.ones((2, 8), np.float16))


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(block_size=32.0), TypeError, "block_size must be an int"),
    (dict(block_size="32"), TypeError, "block_size must be an int"),
    (dict(block_size=True), TypeError, "block_size must be an int"),
    (dict(block_size=48), ValueError, "block_size must be one of"),
    (dict(symmetric=1), TypeError, "symmetric must be a bool"),
    (dict(symmetric="yes"), TypeError, "symmetric must be a bool"),
    (dict(dtype="float32"), ValueError, "dtype must be one of"),
    (dict(w=np.zeros((2, 30), np.float32)), ValueError, "w must have shape"),
    (dict(w=np.zeros((0, 32), np.float32)), ValueError, "w must have shape"),
    (dict(w=np.zeros((2, 32), np.int32)), TypeError, "w must be a 2-D float"),
    (dict(w=np.zeros(32, np.float32)), TypeError, "w must be a 2-D float"),
    (dict(w=[[0.0] * 32]), TypeError, "w must be a numpy.ndarray"),
    (dict(w=np.full((2, 32), np.inf, np.float32)), ValueError, "w must be finite"),
    (dict(w=np.full((2, 32), 1e6, np.float32)), ValueError, "w is too large"),
])
def test_quantize_checks_name_the_users_arguments(kwargs, exc, match):
    args = dict(w=np.ones((2, 32), np.float32), block_size=32, symmetric=True)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        quantize(args.pop("w"), **args)


def test_weight_arrays_are_read_only_copies(rng):
    packed = rng.integers(0, 256, (2, 1, 16), dtype=np.uint8)
    scales = np.ones((2, 1), np.float16)
    w = QuantizedWeight(packed, scales, K=32, N=2, block_size=32)
    before = w.dequantize()
    packed[:] = 0
    scales[:] = 5  # the caller's arrays change; the weight does not
    np.testing.assert_array_equal(w.dequantize(), before)
    for array in (w.packed, w.scales):
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 1
    q = quantize(rng.standard_normal((2, 32)).astype(np.float32), symmetric=False)
    with pytest.raises(ValueError, match="read-only"):
        q.zero_points[0, 0] = 3


def test_bf16_weights_from_bf16_scales_or_quantize(rng):
    import ml_dtypes
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = quantize(x, 32, dtype="bfloat16")
    assert w.dtype == "bfloat16" and w.scales.dtype == ml_dtypes.bfloat16
    err = np.abs(w.dequantize(np.float64) - x)
    step = np.repeat(np.abs(w.scales.astype(np.float64)), 32, axis=1)
    assert np.all(err <= step + 1e-6)
    again = QuantizedWeight(w.packed, w.scales, K=64, N=3, block_size=32)
    assert again.dtype == "bfloat16" and "bfloat16" in repr(again)
    with pytest.raises(TypeError, match="scales are bfloat16 but dtype='float16'"):
        QuantizedWeight(w.packed, w.scales, K=64, N=3, block_size=32, dtype="float16")


def test_from_device_shares_the_callers_memory(rng):
    from numba import cuda
    w = quantize(rng.standard_normal((4, 64)).astype(np.float32), 32, symmetric=False)
    d_packed, d_scales, d_zp = (cuda.to_device(np.ascontiguousarray(x)) for x in
                                (w.packed, w.scales, w.zero_points))
    dw = QuantizedWeight.from_device(d_packed, d_scales, d_zp, K=64, N=4, block_size=32)
    assert dw.dtype == "float16" and dw.has_zero_points and dw.is_on_device
    np.testing.assert_array_equal(dw.dequantize(), w.dequantize())
    d_scales.copy_to_device(np.ascontiguousarray(w.scales) * np.float16(2))  # changes are seen
    np.testing.assert_allclose(dw.dequantize(), 2 * w.dequantize())


@pytest.mark.parametrize("case, exc, match", [
    ("host packed", TypeError, "packed must be a device array"),
    ("transposed", ValueError, "packed must have shape"),
    ("fp32 scales", TypeError, "scales must be float16"),
    ("K float", TypeError, "K must be an int"),
])
def test_from_device_refuses_bad_arrays_by_name(rng, case, exc, match):
    from numba import cuda
    packed = cuda.to_device(np.zeros((2, 2, 16), np.uint8))
    scales = cuda.to_device(np.ones((2, 2), np.float16))
    kw = dict(K=64, N=2, block_size=32)
    args = {"host packed": (np.zeros((2, 2, 16), np.uint8), scales),
            "transposed": (cuda.to_device(np.zeros((32, 2), np.uint8)), scales),
            "fp32 scales": (packed, cuda.to_device(np.ones((2, 2), np.float32))),
            "K float": (packed, scales)}[case]
    if case == "K float":
        kw["K"] = 64.0
    with pytest.raises(exc, match=match):
        QuantizedWeight.from_device(*args, **kw)


def test_reference_computes_bf16_exactly_in_float64(rng):
    import ml_dtypes

    from int4gemv import reference_gemv
    w = quantize(rng.standard_normal((3, 64)).astype(np.float32), 32, dtype="bfloat16")
    a = rng.standard_normal((2, 64)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(3).astype(ml_dtypes.bfloat16)
    want = a.astype(np.float64) @ w.dequantize(np.float64).T + bias.astype(np.float64)
    np.testing.assert_array_equal(reference_gemv(a, w, bias), want)
