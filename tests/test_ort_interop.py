"""Interop with ONNX Runtime (CPU): its quantizer's arrays are accepted verbatim, and our
reference and kernels compute what its ``com.microsoft.MatMulNBits`` operator computes."""

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is a test extra (pip install -e .[test])")
onnx = pytest.importorskip("onnx", reason="onnx is a test extra (pip install -e .[test])")
from onnx import TensorProto, helper  # noqa: E402
from onnxruntime.capi._pybind_state import quantize_matmul_4bits  # noqa: E402


def ort_quantize(w_nk, bs, symmetric):
    """ONNX Runtime's own block quantizer, exactly as its MatMulNBits quantizer calls it."""
    N, K = w_nk.shape
    k_blocks = -(-K // bs)
    packed = np.zeros((N, k_blocks, bs // 2), np.uint8)
    zero_points = np.zeros(N * ((k_blocks + 1) // 2), np.uint8)
    scales = np.zeros(N * k_blocks, np.float32)
    quantize_matmul_4bits(packed, np.ascontiguousarray(w_nk.T), scales, zero_points, bs, N, K,
                          symmetric)
    return packed, scales, (None if symmetric else zero_points)


def ort_matmulnbits(a, packed, scales, zero_points, K, N, bs, bias=None):
    """Run one MatMulNBits node on ONNX Runtime's CPU provider (float32 activations)."""
    inits = [helper.make_tensor("B", TensorProto.UINT8, packed.shape, packed.tobytes(), raw=True),
             helper.make_tensor("scales", TensorProto.FLOAT, scales.shape, scales)]
    inputs = ["A", "B", "scales"]
    if zero_points is not None:
        inits.append(helper.make_tensor("zp", TensorProto.UINT8, zero_points.shape,
                                        zero_points.tobytes(), raw=True))
        inputs.append("zp")
    if bias is not None:
        inputs += [""] * (5 - len(inputs)) + ["bias"]  # A, B, scales, zero_points, g_idx, bias
        inits.append(helper.make_tensor("bias", TensorProto.FLOAT, bias.shape, bias))
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain="com.microsoft",
                            K=K, N=N, bits=4, block_size=bs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"A": a.reshape(1, K).astype(np.float32)})[0][0].astype(np.float64)


@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_ort_quantizer_arrays_are_accepted_verbatim(rng, bs, symmetric):
    N, K = 6, 2 * bs + 16  # a partial last block, an odd number of blocks for zero points
    w_nk = rng.standard_normal((N, K)).astype(np.float32)
    packed, scales, zero_points = ort_quantize(w_nk, bs, symmetric)
    w = ig.QuantizedWeight(packed, scales, zero_points, K=K, N=N, block_size=bs)
    assert w.scales.dtype == np.float16 and w.scales.shape == (N, -(-K // bs))
    # Dequantized ORT arrays approximate the weight within a quantization step.
    step = np.repeat(np.abs(w.scales.astype(np.float64)), bs, axis=1)[:, :K]
    assert np.all(np.abs(w.dequantize(np.float64) - w_nk) <= step + 1e-3)


@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_reference_matches_ort_matmulnbits(rng, bs, symmetric):
    N, K = 7, 3 * bs + 8
    packed, scales32, zero_points = ort_quantize(rng.standard_normal((N, K)).astype(np.float32), bs,
                                                 symmetric)
    scales16 = scales32.astype(np.float16)  # our kernels keep fp16 scales; give ORT the same values
    a = rng.standard_normal(K).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float32)
    y_ort = ort_matmulnbits(a, packed, scales16.astype(np.float32), zero_points, K, N, bs, bias)
    w = ig.QuantizedWeight(packed, scales16, zero_points, K=K, N=N, block_size=bs)
    y_ref = ig.reference_gemv(a, w, bias.astype(np.float16))
    bias_rounding = np.abs(bias - bias.astype(np.float16).astype(np.float64))
    np.testing.assert_allclose(y_ref, y_ort, rtol=1e-5, atol=1e-4 + bias_rounding.max())


def test_kernels_match_ort_matmulnbits(rng):
    N, K, bs = 9, 96, 32
    packed, scales32, zero_points = ort_quantize(rng.standard_normal((N, K)).astype(np.float32), bs,
                                                 symmetric=False)
    scales16 = scales32.astype(np.float16)
    a = rng.standard_normal(K).astype(np.float16)
    y_ort = ort_matmulnbits(a, packed, scales16.astype(np.float32), zero_points, K, N, bs)
    w = ig.QuantizedWeight(packed, scales16, zero_points, K=K, N=N, block_size=bs)
    for variant in ("default", "single_warp"):
        out = cuda.to_device(np.full(N, np.nan, np.float16))
        ig.gemv(cuda.to_device(a), w, out=out, variant=variant)
        y = out.copy_to_host().astype(np.float64)
        assert np.linalg.norm(y - y_ort) / np.linalg.norm(y_ort) <= 2e-3, variant


# quantize follows ORT's own 4-bit quantizer bit for bit (issue 22, item 6).

#: The onnxruntime whose ``quantize_matmul_4bits`` (MLAS ``BlockwiseQuantizer``, float16 path)
#: this rule was checked against; the test runs on whatever version is installed and names both.
ORT_CHECKED = "1.32.0"


def ort_quantize16(w16, bs, symmetric):
    """ORT's quantizer on float16 weights: float16 scales, exactly as for an fp16 model."""
    N, K = w16.shape
    k_blocks = -(-K // bs)
    packed = np.zeros((N, k_blocks, bs // 2), np.uint8)
    zero_points = np.zeros((N, (k_blocks + 1) // 2), np.uint8)
    scales = np.zeros((N, k_blocks), np.float16)
    quantize_matmul_4bits(packed, np.ascontiguousarray(w16.T), scales, zero_points, bs, N, K,
                          symmetric)
    return packed, scales, zero_points


def tie_weight(rng, N, K, bs, symmetric):
    """fp16 weights whose blocks have power-of-two scales (exact reciprocals) and elements on
    half steps: ``x / scale + zp`` lands exactly on .5 for about half of them. Asymmetric blocks
    span [-6.5, 8.5] steps, so their zero point 6.5 is a tie too."""
    nb = -(-K // bs)
    w = np.zeros((N, nb * bs))
    for n in range(N):
        for b in range(nb):
            step = 2.0 ** int(rng.integers(-6, 3))
            blk = rng.integers(-15, 16, bs) * step / 2  # whole and half steps
            if symmetric:
                blk = np.clip(blk, -7.5 * step, 7.5 * step)
                blk[rng.integers(bs)] = -8 * step  # the extreme: scale = step exactly
            else:
                blk = np.clip(blk, -6.5 * step, 8.5 * step)
                blk[:2] = -6.5 * step, 8.5 * step  # scale = 15 step / 15, zp = 6.5
            w[n, b * bs:(b + 1) * bs] = blk
    return w[:, :K].astype(np.float16)


def _ties(w16, w):
    """How many elements are exact ties that round-half-to-even would round down."""
    k_block = np.arange(w.K) // w.block_size
    s = w.scales.astype(np.float32)[:, k_block]
    zp = w.zero_point_values().astype(np.float32)[:, k_block]
    t = (w16.astype(np.float32) * (np.float32(1) / s) + zp).astype(np.float64)
    return int(np.sum((t - np.floor(t) == 0.5) & (np.floor(t) % 2 == 0) & (t > 0) & (t < 15)))


@pytest.mark.parametrize("bs", ig.BLOCK_SIZES)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("data", ["random", "ties"])
def test_quantize_is_orts_quantizer_bit_for_bit(rng, bs, symmetric, data):
    N, K = 6, 3 * bs - 8  # a partial last block, an odd number of blocks (a zero-point pad nibble)
    if data == "ties":
        w16 = tie_weight(rng, N, K, bs, symmetric)
    else:  # magnitudes from 1e-3 to 1e2: scales far from powers of two
        w16 = (rng.standard_normal((N, K)) * 10.0 ** rng.uniform(-3, 2, (N, 1))).astype(np.float16)
    packed, scales, zero_points = ort_quantize16(w16, bs, symmetric)
    w = ig.quantize(w16, bs, symmetric)
    versions = f"(onnxruntime {ort.__version__}; rule checked against {ORT_CHECKED})"
    assert np.array_equal(w.scales.view(np.uint16), scales.view(np.uint16)), f"scales differ {versions}"
    assert np.array_equal(w.packed, packed), f"packed nibbles differ {versions}"
    if not symmetric:
        assert np.array_equal(w.zero_points, zero_points), f"zero points differ {versions}"
    if data == "ties":
        assert _ties(w16, w) >= N * K // 8, "the tie data must hold ties that half-to-even rounds down"


def test_quantize_and_ort_agree_on_an_all_zero_block_but_its_scale():
    w16 = np.zeros((2, 64), np.float16)
    w16[0, 32:] = np.arange(32) - 16  # block 1 of row 0 is not zero
    for symmetric in (True, False):
        packed, scales, zero_points = ort_quantize16(w16, 32, symmetric)
        w = ig.quantize(w16, 32, symmetric)
        assert np.array_equal(w.packed, packed)
        assert np.all(scales[w.scales != scales] == 0) and np.all(w.scales[w.scales != scales] == 1)
        assert not symmetric or np.all(w.dequantize()[1] == 0)
