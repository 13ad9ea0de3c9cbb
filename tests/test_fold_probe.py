"""``bench.target_probes``'s fold variants (``--configs c4u2b4x0`` / ``x2``): timing-only kernels
whose arithmetic differs from the product, so they are checked against what they do compute."""

from dataclasses import replace

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from bench.target_probes import fold_variant_kernel, parse_config
from int4gemv.kernels.default import choose_config, geometry


def test_fold_suffixes_parse_or_are_refused():
    assert parse_config("c4u2b4x0")["fold"] == 0 and parse_config("c1u2b8px2")["fold"] == 2
    assert "fold" not in parse_config("c4u2b4")
    assert parse_config("c2u2b4n") == {"cols": 2, "unroll": 2, "blocks_per_sm": 4, "pipeline": False,
                                       "mma": False, "fold": 1, "stage": "never"}
    assert parse_config("c4u2b4s")["stage"] == "always"
    assert parse_config("c4u2b4x2n")["fold"] == 2
    for bad in ("c2l4u2b4mx0", "c4u2b4x1", "c4u2b4x", "c2l4u2b4mn", "c4u2b4nx0", "c4u2b4ns"):
        with pytest.raises(ValueError):
            parse_config(bad)


@pytest.mark.parametrize("zp, bs, cols", [(True, 32, 2), (False, 16, 1)])
def test_fold_twice_adds_the_product_of_the_flipped_nibbles(rng, zp, bs, cols):
    """x2 folds each step twice, the second time on the words XOR 0x11111111: its output is
    ``a · W(q) + a · W(q ^ 1)`` (bit 0 of every nibble flipped), every element."""
    N, K = 37, 200
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), bs, symmetric=not zp)
    a = rng.standard_normal(K).astype(np.float16)
    config = replace(choose_config(1, N, K, bs, "float16", zp, cols=cols, multiprocessors=2),
                     blocks_per_sm=1)
    out = cuda.to_device(np.full(N, np.nan, np.float16))
    args = (cuda.to_device(a.view(np.uint16)), cuda.to_device(w.packed.reshape(-1)),
            cuda.to_device(w.scales.reshape(-1)),
            cuda.to_device(w.zero_points.reshape(-1) if zp else np.zeros(1, np.uint8)),
            cuda.to_device(np.zeros(1, np.float16)), False, out, K, N)
    grid, block = geometry(config, N, 2)
    fold_variant_kernel(config, 2)[grid, block](*args)
    y = out.copy_to_host().astype(np.float64)
    k_block = np.arange(K) // bs
    scales = w.scales.astype(np.float64)[:, k_block]
    zero = w.zero_point_values().astype(np.float64)[:, k_block]
    q = w.unpacked().astype(np.float64)
    first, flipped = (q - zero) * scales, ((q.astype(np.int64) ^ 1) - zero) * scales
    ref = (first + flipped) @ a.astype(np.float64)
    size = (np.abs(first) + np.abs(flipped)) @ np.abs(a.astype(np.float64))
    assert np.all(np.isfinite(y))
    assert np.max(np.abs(y - ref) / size) <= 2e-3


@pytest.mark.parametrize("dtype, stage", [("float16", "never"), ("bfloat16", "never"),
                                          ("bfloat16", "always")])
def test_stage_overrides_keep_the_product(rng, monkeypatch, stage, dtype):
    """``n`` / ``s`` probes: the real fold with the row stage never / always taken, checked
    against float64; on the simulator the stage fill's calls are counted (taken exactly where
    asked: one warp with 2 column groups, under the bf16 rule's 4)."""
    import ml_dtypes

    from int4gemv.device import simulated
    from int4gemv.kernels import default as default_module

    N, K = 8, 200
    npdt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    w = ig.quantize(rng.standard_normal((N, K)).astype(np.float32), 32, symmetric=True)
    a = rng.standard_normal(K).astype(npdt)
    fills = []
    if simulated():   # count the fills the kernel runs (every thread of the block: 32)
        real = default_module.stage_activations

        def counted(cfg, load_act):
            fill = real(cfg, load_act)
            return lambda *args: fills.append(1) or fill(*args)
        monkeypatch.setattr(default_module, "stage_activations", counted)
    config = replace(choose_config(1, N, K, 32, dtype, False, cols=4, multiprocessors=1),
                     warps=1, blocks_per_sm=1)
    # the kernel takes fp16 as float16 values and bf16 as uint16 bits
    bits = (lambda x: x) if dtype == "float16" else (lambda x: x.view(np.uint16))  # noqa: E731
    out = cuda.to_device(bits(np.full(N, np.nan, npdt)))
    args = (cuda.to_device(a.view(np.uint16)), cuda.to_device(w.packed.reshape(-1)),
            cuda.to_device(bits(w.scales.astype(npdt).reshape(-1))), cuda.to_device(np.zeros(1, np.uint8)),
            cuda.to_device(bits(np.zeros(1, npdt))), False, out, K, N)
    kernel = fold_variant_kernel(config, 1, stage)
    kernel[1, 32](*args)
    y = out.copy_to_host().view(npdt).astype(np.float64)
    deq = (w.unpacked().astype(np.float64) - 8) * np.repeat(w.scales.astype(npdt).astype(np.float64), 32, 1)[:, :K]
    ref = deq @ a.astype(np.float64)
    size = np.abs(deq) @ np.abs(a.astype(np.float64))
    assert np.max(np.abs(y - ref) / size) <= 4e-3
    if simulated():
        assert len(fills) == (32 if stage == "always" else 0)


def test_fp16_has_no_stage_to_force():
    config = choose_config(1, 64, 256, 32, "float16", False, cols=4, multiprocessors=1)
    with pytest.raises(ValueError, match="no stage"):
        fold_variant_kernel(config, 1, "always")
