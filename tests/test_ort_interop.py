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
