"""The chain's self-validating words (``DecodeChain(handoff="words")``, :mod:`int4gemv.kernels.handoff`):
the sentinel test of each half, a poll that gives up instead of hanging, and the chain that polls
its activations computing the same logits, bit for bit, as the one that waits for each grid."""

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv.decode import DecodeChain, SplitK
from int4gemv.decode.model import ChainShape, random_chain, reference_logits, relative_error, tolerance
from int4gemv.kernels.default_config import DefaultConfig
from int4gemv.kernels.handoff import SENTINEL, await_words, has_sentinel

TWO_LAYERS = ChainShape(layers=2, hidden=32, intermediate=64, q_dim=32, kv_dim=16, vocab=48)


@cuda.jit
def _sentinel_flags(words, flags):
    i = cuda.grid(1)
    if i < flags.shape[0]:
        v = (words[4 * i], words[4 * i + 1], words[4 * i + 2], words[4 * i + 3])
        flags[i] = 1 if has_sentinel(v) else 0


@cuda.jit
def _await_then_copy(a, out):
    await_words(a, a.shape[0] // 8, 8)
    for i in range(cuda.threadIdx.x, a.shape[0], cuda.blockDim.x):
        out[i] = a[i]


def test_every_half_of_a_16_byte_word_is_tested_for_the_sentinel():
    halves = np.full((10, 8), 0x3C00, np.uint16)       # 1.0 everywhere
    for k in range(8):
        halves[k, k] = SENTINEL                        # row k: the sentinel in half k only
    halves[9, 3] = 0x7FFF                              # the GPU's canonical NaN is not the sentinel
    flags = cuda.to_device(np.zeros(10, np.int32))
    _sentinel_flags[1, 32](cuda.to_device(halves.reshape(-1).view(np.uint32)), flags)
    np.testing.assert_array_equal(flags.copy_to_host(), [1] * 8 + [0, 0])


def test_a_complete_vector_is_read_at_once_and_a_missing_one_gives_up_rather_than_hang():
    a = np.arange(64, dtype=np.float16).view(np.uint16)
    out = cuda.to_device(np.zeros(64, np.uint16))
    _await_then_copy[1, 32](cuda.to_device(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), a)
    a[37] = SENTINEL                                   # never written: the poll gives up, the copy reads it
    _await_then_copy[1, 32](cuda.to_device(a), out)
    assert out.copy_to_host()[37] == SENTINEL


def test_only_a_programmatic_m1_default_kernel_with_aligned_activations_polls():
    DefaultConfig("float16", 1, 32, False, pdl=True, words=True)
    for bad in (dict(pdl=False), dict(M=2), dict(act_vector=False)):
        fields = dict(dtype="float16", M=1, block_size=32, zero_points=False, pdl=True, words=True)
        with pytest.raises(ValueError, match="DefaultConfig.words must be False unless pdl"):
            DefaultConfig(**{**fields, **bad})


@pytest.fixture(scope="module")
def two_layers():
    return random_chain(TWO_LAYERS, seed=3)


@pytest.mark.parametrize("merged", [True, False], ids=["merged", "separate"])
def test_words_chain_computes_the_grid_chains_logits_bit_for_bit(rng, two_layers, merged):
    layers, lm_head = two_layers
    options = dict(merged=merged, tuning="default+pdl", down_split=SplitK(4, 1, 1), fuse_silu=True)
    words = DecodeChain(layers, lm_head, handoff="words", **options)
    grid = DecodeChain(layers, lm_head, **options)
    assert words.launches == grid.launches + 1 and words.kernels[0][0] == "fill"
    assert all(p.config.words for p in words.plans()) and not any(p.config.words for p in grid.plans())
    # after the fill, the step's first GEMV is an ordinary launch; the rest as planned
    assert [op.programmatic for op in words._ops[1:3]] == [False, True]
    assert all(op.programmatic for op in grid._ops[:-1] if hasattr(op, "programmatic"))
    for x in (rng.standard_normal(TWO_LAYERS.hidden).astype(np.float16) for _ in range(2)):
        logits = words.run(x)
        np.testing.assert_array_equal(logits, grid.run(x))
        assert relative_error(logits, reference_logits(layers, lm_head, x)) < tolerance(TWO_LAYERS.layers)
        arena = words.arena.copy_to_host().view(np.uint16)
        used = np.concatenate([v.copy_to_host().view(np.uint16) for layer in words._vectors for v in layer[1:]])
        assert used.size and not (used == SENTINEL).any()   # every vector written, by its own launch
        assert (arena == SENTINEL).sum() == arena.size - used.size   # only the padding keeps it


@pytest.mark.parametrize("merged", [True, False], ids=["merged", "separate"])
def test_words_chain_orders_only_the_steps_first_gemv(two_layers, merged):
    """With the words handoff only the step's first GEMV (layer 0's qkv or q, right after the
    fill) is an ordinary launch; every later GEMV of every layer, lm_head included, is
    programmatic and polls its activations. Built only: nothing runs."""
    layers, lm_head = two_layers
    chain = DecodeChain(layers, lm_head, merged=merged, tuning="default+pdl",
                        down_split=SplitK(4, 1, 1), fuse_silu=True, handoff="words")
    gemvs = [((name, layer), op.programmatic) for (name, layer, _), op in zip(chain.kernels, chain._ops)
             if name not in ("fill", "down")]     # the GEMV launches (down: the split-K kernel)
    assert chain.kernels[0][0] == "fill" and gemvs[0] == (("qkv" if merged else "q", 0), False)
    assert {layer for (_, layer), _ in gemvs} == {0, 1, -1}      # both layers and lm_head
    assert len(gemvs) == 2 * (3 if merged else 6) + 1
    assert all(programmatic for _, programmatic in gemvs[1:]), gemvs


def test_the_fill_resets_every_vector_of_the_arena(two_layers):
    layers, lm_head = two_layers
    chain = DecodeChain(layers, lm_head, tuning="default+pdl", down_split=SplitK(4, 1, 1), fuse_silu=True,
                        handoff="words")
    chain.arena.copy_to_device(np.zeros(chain.arena.shape, np.float16))
    chain._ops[0](None)
    assert (chain.arena.copy_to_host().view(np.uint16) == SENTINEL).all()


def test_words_handoff_refuses_what_cannot_poll(two_layers):
    layers, lm_head = two_layers
    split = dict(down_split=SplitK(4, 1, 1), fuse_silu=True)
    with pytest.raises(ValueError, match="handoff must be one of"):
        DecodeChain(layers, lm_head, tuning="default+pdl", handoff="flags", **split)
    with pytest.raises(ValueError, match="handoff='words' needs a \\+pdl tuning"):
        DecodeChain(layers, lm_head, tuning="default", handoff="words", **split)
    with pytest.raises(ValueError, match="handoff='words' needs"):
        DecodeChain(layers, lm_head, tuning="default+pdl", handoff="words")
    with pytest.raises(ValueError, match="handoff='words' needs"):
        DecodeChain(layers, lm_head, tuning="default+pdl", handoff="words",
                    kind_tunings={"qkv": ig.Tuning("single_warp", pdl=True)}, **split)
    with pytest.raises(ValueError, match="words needs a pdl plan of the default kernel"):
        DecodeChain(layers, lm_head, tuning="single_warp+pdl", handoff="words", **split)


def test_bench_configuration_names_the_words_handoff():
    from bench.decode_configs import chain_options, parse_config

    cfg = parse_config("merged:default+pdl:down=4x4k4:silu=fused:handoff=words")
    assert chain_options(cfg)["handoff"] == "words" and cfg["label"].endswith("handoff=words")
    assert chain_options(parse_config("merged:default+pdl"))["handoff"] == "grid"
    with pytest.raises(ValueError, match="unknown option 'handoff=flags'"):
        parse_config("merged:default+pdl:handoff=flags")
