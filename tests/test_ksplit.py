"""The default tiling with its K split over a block's warps (``DefaultConfig.ksplit``).

A block's warps share one column group, warp ``w``'s lane stripe ``s`` taking chunk stripe
``w * lanes + s`` of ``lanes * warps``, and add their sums through shared memory, one half of it
per group parity. Run on the simulator at tiny shapes through :mod:`default_kernel_check` (fresh
data, poisoned outputs, every element against float64): both folds (the tensor-core fold and the
CUDA-core one), fp16 and bf16, every block size, zero points, K tails where the warps have
different chunk counts, and grids whose blocks walk several groups (both halves, each reused).
"""

import numpy as np
import pytest
from default_kernel_check import SIMULATED, check, make, run

from int4gemv.kernels.default import DefaultConfig, geometry
from int4gemv.kernels.default_config import STAGE_MAX_K, stages_row


def _config(dtype, K, bs, zp, *, mma=True, cols=2, lanes=4, warps=4, unroll=1, blocks=2, pdl=False):
    rows16 = -(-K // bs) * bs // 2 % 16 == 0
    return DefaultConfig(dtype, 1, bs, zp, cols=cols, lanes=lanes, unroll=unroll, warps=warps,
                         blocks_per_sm=blocks, mma=mma, ksplit=True, pdl=pdl,
                         weight_vector=rows16)


def _count_mma_calls(monkeypatch):
    """A list that gets one entry per ``mma_f16`` call of the fold (simulator only)."""
    from int4gemv.kernels import default_mma
    calls = []
    if SIMULATED:
        real = default_mma.mma_f16
        monkeypatch.setattr(default_mma, "mma_f16", lambda *args: calls.append(1) or real(*args))
    return calls


# N = 69: 5 groups of 16 columns (the mma tiling), the last partial; on one SM at 2 blocks per SM
# the 2 blocks walk 3 and 2 groups, so both halves of the warps' shared sums are written twice.
@pytest.mark.parametrize("dtype, bs, zp, K, unroll, warps, pdl", [
    ("float16", 32, False, 520, 1, 4, False),   # 17 chunks, 16 stripes: warp 0's lane 0 has 2
    ("float16", 16, True, 520, 2, 4, True),     # step 2: one chunk of 32 stripe slots valid
    ("bfloat16", 32, False, 264, 1, 2, False),  # 9 chunks over 8 stripes, one word in the last
    ("bfloat16", 16, True, 136, 2, 2, False),
    ("float16", 64, True, 1032, 4, 4, False),   # 33 chunks: 64 stripe slots a step, one step
    ("bfloat16", 128, False, 1032, 2, 8, False),  # 32 stripes
])
def test_mma_fold_with_the_k_split(rng, monkeypatch, dtype, bs, zp, K, unroll, warps, pdl):
    calls = _count_mma_calls(monkeypatch)
    a, w, bias = make(rng, 69, K, bs, zp, 1, dtype)
    config = _config(dtype, K, bs, zp, unroll=unroll, warps=warps, pdl=pdl)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)
    assert calls or not SIMULATED     # staged with one group per block: the mma fold ran


@pytest.mark.parametrize("dtype, bs, zp, cols, lanes, K", [
    ("float16", 64, True, 4, 4, 136),    # fp16 on CUDA cores: each lane loads its activations
    ("float16", 16, False, 1, 8, 72),    # 8 stripes of 8 lanes per column: most lanes get no chunk
    ("bfloat16", 32, False, 2, 2, 264),  # bf16: the staged row in fp16 arithmetic
    ("bfloat16", 16, True, 2, 4, 520),
])
def test_cuda_core_fold_with_the_k_split(rng, dtype, bs, zp, cols, lanes, K):
    a, w, bias = make(rng, 45, K, bs, zp, 1, dtype)
    config = _config(dtype, K, bs, zp, mma=False, cols=cols, lanes=lanes, warps=2)
    y, _ = run(a, w, bias, dtype, config=config, multiprocessors=1)
    check(y, a, w, bias, dtype)


def test_k_split_with_k_past_the_stage_folds_on_cuda_cores(rng, monkeypatch):
    # K > STAGE_MAX_K: the mma configuration takes the CUDA-core fold, still split over the warps.
    calls = _count_mma_calls(monkeypatch)
    K = STAGE_MAX_K + 40
    a, w, bias = make(rng, 20, K, 32, False, 1, "float16")
    y, _ = run(a, w, None, "float16", config=_config("float16", K, 32, False), multiprocessors=1)
    check(y, a, w, None, "float16")
    assert not calls


def test_k_split_rules_and_geometry():
    c = _config("float16", 2048, 32, False, unroll=4, blocks=4)
    assert (c.stripes, c.columns_per_warp) == (16, 16)
    assert DefaultConfig("float16", 1, 32, False, lanes=4, warps=8).stripes == 4   # no ksplit
    # one column group per block: gate/up 6144 x 2048 on 132 SMs is 384 blocks, lm_head capped
    assert geometry(c, 6144, 132) == ((384, 1, 1), (128, 1, 1))
    assert geometry(c, 151936, 132) == ((4 * 132, 1, 1), (128, 1, 1))
    # the row is staged with a single group per block (its loads fly while it is filled)
    assert stages_row(c, 16, 2048, 132) and stages_row(c, 6144, 2048, 132)
    assert not stages_row(c, 6144, STAGE_MAX_K + 8, 132)
    for bad in (dict(M=2, mma=False), dict(pipeline=True)):
        fields = {**c.__dict__, **bad}
        with pytest.raises(ValueError, match="ksplit"):
            DefaultConfig(**fields)
    with pytest.raises(TypeError, match="ksplit"):
        DefaultConfig("float16", 1, 32, False, ksplit=1)


def test_k_split_sums_every_warp_in_a_fixed_order(rng):
    # Two launches of the same data agree bit for bit (warp 0 adds the warps' sums in order).
    a, w, bias = make(rng, 40, 264, 32, False, 1, "float16")
    config = _config("float16", 264, 32, False, warps=2)
    y1, _ = run(a, w, bias, "float16", config=config, multiprocessors=1)
    y2, _ = run(a, w, bias, "float16", config=config, multiprocessors=1)
    assert np.array_equal(y1, y2)
