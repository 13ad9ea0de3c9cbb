"""Every kernel configuration the GPU can choose also runs on the simulator, forced through
``Tuning`` at tiny shapes (issue 22, item 6).

On the simulator (one multiprocessor) ``choose_config`` halves the default tiling's columns per
lane down to 1 for any small N, so what the H200 runs on the decode shapes (``cols = 4`` on
lm_head, 2 on gate/up, lanes 32, unroll 2 or 1, blocks per SM 8/4/2, M compiled in) would
otherwise never run in CI. Here:

* the default tiling: each distinct ``(cols, lanes, unroll, blocks_per_sm, dtype, mma)`` that
  ``choose_config`` picks for the decode workload's shapes on a 132-SM GPU at M = 1 (larger
  batches run on tensor cores: the tensor-core kernel, ``tests/test_tensor_core.py``, or the
  default tiling's fold, whose every chosen configuration runs in
  ``tests/test_default_mma_batch.py``), derived at collection time so
  a change of ``choose_config`` changes what runs, forced through ``gemv(..., tuning=Tuning(
  "default", cols=, unroll=))`` at a K that gives the same lanes and chunks per lane, N = two
  column groups + 1 (a partial group) — the mma fold (``default_config.MMA_CHOSEN``) chosen,
  not forced: ``cols`` left open and N large enough for the device's grid; plus every ``Tuning``
  ``cols`` x ``unroll`` the default tiling accepts;
* the single-warp kernel: every compiled ``(cols, unroll)`` in both activation modes, and with
  ``pdl``/``prefetch``.

Each run: fresh random data, zero points on some, a random bias (a wrong bias index for any
column moves that output by a whole bias), output poisoned with NaN, every element checked
against float64 relative to the size of its terms (``tests/test_kernels.py``'s measure).
"""

import json
from importlib import resources

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv.descriptors import tensor_core
from int4gemv.device import device_facts
from int4gemv.kernels import default_config as dc
from int4gemv.kernels import mma_tiling as mt
from int4gemv.kernels import single_warp
from int4gemv.kernels.default import COLS, UNROLLS, choose_config

U = 2.0 ** -11
TOL = {"float16": U + 2.0 ** -13, "bfloat16": 2.0 ** -8 + 2.0 ** -13}  # one output rounding
GPU_MULTIPROCESSORS = 132  # the H200's, which choose_config sizes its grid for


def _bf16():
    import ml_dtypes
    return ml_dtypes.bfloat16


def _decode_choices():
    """``{(cols, lanes, unroll, blocks_per_sm, dtype, mma): [M values]}`` over the decode shapes at
    M < ``tensor_core.MIN_M`` (larger batches: see the module docstring)."""
    doc = json.loads(resources.files("int4gemv.workloads").joinpath("qwen3_vl_2b_decode.json").read_text())
    found = {}
    for p in doc["projections"]:
        for M in range(1, tensor_core.MIN_M):
            for dtype in ("float16", "bfloat16"):
                c = choose_config(M, p["N"], p["K"], doc["block_size"], dtype, False,
                                  multiprocessors=GPU_MULTIPROCESSORS)
                found.setdefault((c.cols, c.lanes, c.unroll, c.blocks_per_sm, dtype, c.mma),
                                 set()).add(M)
    return found


DECODE = _decode_choices()
DECODE_CASES = sorted((*key, min(ms)) for key, ms in DECODE.items())


def _k_for(lanes, per_lane):
    """The smallest K (a multiple of 8 ending inside a chunk of 32, so the last chunk and group
    are partial) that gives ``lanes`` lanes per column and ``per_lane`` chunks per lane."""
    if lanes == 32:
        chunks = 32 * (per_lane - 1) + 1 if per_lane > 1 else 17
    elif per_lane > 1:            # the mma fold's fixed 4 lanes (``choose_config`` would take more)
        chunks = lanes * (per_lane - 1) + 1
    else:
        chunks = lanes // 2 + 1
    return 32 * (chunks - 1) + 8


def _run(rng, M, N, K, dtype, tuning, zp, bs=32):
    np_dtype = np.float16 if dtype == "float16" else _bf16()
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), bs, symmetric=not zp, dtype=dtype)
    a = rng.standard_normal((M, K)).astype(np_dtype)
    bias = (rng.standard_normal(N) * 4).astype(np_dtype)  # a misplaced bias moves an output far
    plan = ig.explain(a, w, bias=bias, tuning=tuning)
    out = np.full((M, N), np.nan, np_dtype)
    y = ig.gemv(a, w, bias=bias, out=out, tuning=tuning).astype(np.float64)
    assert np.all(np.isfinite(y)), f"outputs not written: {np.argwhere(~np.isfinite(y))[:5]}"
    ref = ig.reference_gemv(a, w, bias)
    terms = np.abs(a.astype(np.float64)) @ np.abs(w.dequantize(np.float64)).T + np.abs(
        bias.astype(np.float64))
    return plan, float(np.max(np.abs(y - ref) / terms))


def _columns(cols, lanes):
    """N for one full column group of a warp and a partial one (a single column)."""
    return cols * (32 // lanes) + 1


def _mma_columns(multiprocessors):
    """The smallest N (one column past whole groups of 16) for which ``choose_config`` takes the
    mma fold on ``multiprocessors`` SMs (the simulator's 1 here: 1025 columns)."""
    stride = mt.MMA_WARPS * mt.MMA_BLOCKS * multiprocessors
    return 16 * dc.STAGE_MIN_GROUPS * stride + 1


@pytest.mark.parametrize("cols, lanes, unroll, blocks, dtype, mma, M, per_lane",
                         [c + (2,) for c in DECODE_CASES])
def test_every_default_tiling_choice_on_the_decode_shapes(rng, cols, lanes, unroll, blocks, dtype,
                                                          mma, M, per_lane):
    K = _k_for(lanes, per_lane)  # 2 chunks per lane as at K = 2048: a full step and a tail step
    if mma:   # chosen, not forced: ``cols`` left open, N large enough for this device's grid
        N = _mma_columns(device_facts()[1])
        tuning = ig.Tuning("default", unroll=unroll)
    else:
        N = _columns(cols, lanes)
        tuning = ig.Tuning("default", cols=cols, unroll=unroll)
    # The host path runs on the default stream; the device path is the same kernel and binding.
    plan, err = _run(rng, M, N, K, dtype, tuning, zp=bool(M % 2))
    c = plan.config
    assert (plan.kernel, c.cols, c.lanes, c.unroll, c.blocks_per_sm, c.M, c.dtype, c.mma) == \
        ("default", cols, lanes, unroll, blocks, M, dtype, mma)
    assert err <= TOL[dtype], f"error {err:.2e} of the terms' magnitude"


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("unroll", UNROLLS)
@pytest.mark.parametrize("lanes", [2, 32])
def test_every_default_tiling_tuning(rng, cols, unroll, lanes):
    """Every ``Tuning(cols=, unroll=)`` the default tiling accepts, with several columns per
    warp (lanes 2) and one (lanes 32, chunks per lane > unroll: a full and a tail step)."""
    K = _k_for(lanes, unroll + 1) if lanes == 32 else 40
    N = _columns(cols, lanes)
    plan, err = _run(rng, 1, N, K, "float16", ig.Tuning("default", cols=cols, unroll=unroll),
                     zp=cols % 2 == 0)
    assert (plan.config.cols, plan.config.lanes, plan.config.unroll) == (cols, lanes, unroll)
    assert err <= TOL["float16"], f"error {err:.2e} of the terms' magnitude"


SINGLE_WARP_TOL = 9 * U  # tests/test_kernels.py: 8 fp16 roundings per half2 sum, one output


@pytest.mark.parametrize("cols, unroll", single_warp.TUNINGS)
@pytest.mark.parametrize("mode", single_warp.MODES)
def test_every_single_warp_tuning_in_both_modes(rng, cols, unroll, mode):
    K, N = 160, cols + 1  # 10 words: part of one K chunk; a full and a partial column group
    tuning = ig.Tuning("single_warp", cols=cols, unroll=unroll, activations=mode)
    zp = (cols + unroll) % 2 == 0
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32, symmetric=not zp)
    a = rng.standard_normal(K).astype(np.float16)
    bias = (rng.standard_normal(N) * 4).astype(np.float16)
    plan = ig.explain(a, w, bias=bias, tuning=tuning)
    assert (plan.kernel, plan.cols, plan.unroll, plan.activations) == ("single_warp", cols, unroll, mode)
    out = cuda.to_device(np.full(N, np.nan, np.float16))
    ig.gemv(cuda.to_device(a), w, bias=cuda.to_device(bias), out=out, tuning=tuning)
    y = out.copy_to_host().astype(np.float64)
    assert np.all(np.isfinite(y)), "outputs not written"
    ref = ig.reference_gemv(a, w, bias)
    terms = np.abs(a.astype(np.float64)) @ np.abs(w.dequantize(np.float64)).T + np.abs(
        bias.astype(np.float64))
    err = float(np.max(np.abs(y - ref) / terms))
    assert err <= SINGLE_WARP_TOL + K / 16 * 2.0 ** -24, f"error {err:.2e}"
