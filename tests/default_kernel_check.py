"""Running the default tiling's kernel directly on a config, and checking it against float64.

:func:`run` launches the kernel of a :class:`~int4gemv.kernels.default.DefaultConfig` (default:
the chooser's) on fresh arrays, its output poisoned with NaN first, and checks that every element
was written; :func:`check` compares with :func:`reference`.

Error measure: the error of each output relative to ``sum_k |a_k| |w_nk|`` (the size of the
terms it sums, so a cancelling output does not inflate it), max over outputs. fp16: partial sums
of 8 products in fp16 (roundings of 2**-11 of terms up to 15 |a| |s|), then float32: bound 2e-3.
bf16: float32 arithmetic, bf16 output rounding (2**-9 of |y| <= the term sum): bound 4e-3.
A wrong nibble, group, scale or zero point moves some output by a whole term (>= 1/K of the
term sum, K <= 2056 here: >= 5e-4 for K = 2056, far more for the short K) — :func:`check` also
checks the norm-wise error, where such a mistake is orders of magnitude above the bound.
"""

import ml_dtypes
import numpy as np
from numba import cuda

import int4gemv as ig
from int4gemv.device import simulated
from int4gemv.kernels.default import DefaultConfig, choose_config, default_kernel, geometry

__all__ = ["BF16", "SIMULATED", "DTYPES", "TOL", "NORM_TOL", "make", "bits", "run", "reference",
           "check", "mma_config"]

BF16 = ml_dtypes.bfloat16
SIMULATED = simulated()
DTYPES = {"float16": np.float16, "bfloat16": BF16}
TOL = {"float16": 2e-3, "bfloat16": 4e-3}
NORM_TOL = {"float16": 1e-3, "bfloat16": 3e-3}


def make(rng, N, K, bs, zp, M, dtype):
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), bs, symmetric=not zp)
    a = rng.standard_normal((M, K)).astype(DTYPES[dtype])
    bias = rng.standard_normal(N).astype(DTYPES[dtype])
    return a, w, bias


def bits(x):
    return np.ascontiguousarray(x).view(np.uint16)


def run(a, w, bias, dtype, config=None, multiprocessors=2, **overrides):
    """Launch the kernel of ``config`` (default: ``choose_config``); returns float64 [M, N]."""
    M, K = a.shape
    N = w.N
    zp = w.zero_points is not None
    if config is None:
        config = choose_config(M, N, K, w.block_size, dtype, zp, multiprocessors=multiprocessors,
                               **overrides)
    scales = w.scales if dtype == "float16" else bits(w.scales.astype(BF16))
    d_scales = cuda.to_device(scales.reshape(-1))
    d_packed = cuda.to_device(w.packed.reshape(-1))
    d_zp = cuda.to_device(w.zero_points.reshape(-1) if zp else np.zeros(1, np.uint8))
    d_act = cuda.to_device(bits(a).reshape(-1))
    out_dtype = np.float16 if dtype == "float16" else np.uint16
    poison = np.full(M * N, np.nan, np.float16).view(np.uint16)
    poison = poison if out_dtype is np.uint16 else poison.view(np.float16)
    d_out = cuda.to_device(poison)
    has_bias = bias is not None
    if has_bias:
        d_bias = cuda.to_device(bias if dtype == "float16" else bits(bias))
    else:
        d_bias = cuda.to_device(np.zeros(1, out_dtype))
    grid, block = geometry(config, N, multiprocessors)
    default_kernel(config)[grid, block](d_act, d_packed, d_scales, d_zp, d_bias, has_bias, d_out,
                                        K, N)
    y = d_out.copy_to_host()
    y = (y.view(BF16) if dtype == "bfloat16" else y).astype(np.float64).reshape(M, N)
    assert np.all(np.isfinite(y)), f"outputs not written: {np.argwhere(~np.isfinite(y))[:5]}"
    return y, config


def reference(a, w, bias, dtype):
    scales = w.scales.astype(DTYPES[dtype]).astype(np.float64)
    q = w.unpacked().astype(np.float64)
    k_block = np.arange(w.K) // w.block_size
    deq = (q - w.zero_point_values().astype(np.float64)[:, k_block]) * scales[:, k_block]
    a64 = a.astype(np.float64)
    y = a64 @ deq.T
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y, np.abs(a64) @ np.abs(deq).T


def check(y, a, w, bias, dtype):
    ref, size = reference(a, w, bias, dtype)
    if bias is not None:
        size = size + np.abs(bias.astype(np.float64))
    termwise = np.max(np.abs(y - ref) / size)
    normwise = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    assert termwise <= TOL[dtype], f"term-wise error {termwise:.2e}"
    assert normwise <= NORM_TOL[dtype], f"norm-wise error {normwise:.2e}"


def mma_config(dtype, M, K, bs, zp, *, cols=2, unroll=1, warps=1, **fields):
    """The mma fold's tiling (4 lanes per column) on ``warps`` warps of one block per SM, with
    16-byte weight loads where the packed rows allow them; ``fields``: more DefaultConfig
    fields (``pipeline``, ``pdl``)."""
    rows16 = -(-K // bs) * bs // 2 % 16 == 0
    return DefaultConfig(dtype, M, bs, zp, cols=cols, lanes=4, unroll=unroll, warps=warps,
                         blocks_per_sm=1, mma=True, weight_vector=rows16, **fields)
