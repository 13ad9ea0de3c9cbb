"""The decode chain at full size on a GPU: Qwen3-VL-2B shapes (28 layers, vocab 151936), random
weights. Every configuration (tuning x merged/separate) against float64, eager against its owned
graph's replays (bit for bit), counters after release; and a race check: an owned graph of each
programmatic (PDL) configuration replayed 1000 times with fresh inputs, every run compared with
the eager run of the same input. About 2-3 minutes on an H200 (kernel compilation included)."""

import json
from pathlib import Path

import numpy as np
import pytest

import int4gemv as ig

from int4gemv.decode.chain import TUNINGS, DecodeChain
from int4gemv.decode.split_k import SplitK
from int4gemv.decode.model import ChainShape, random_chain, reference_logits, relative_error, tolerance

pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("full_chain")]  # one worker builds the 1 GB chain

WORKLOAD = Path(__file__).resolve().parents[1] / "int4gemv" / "workloads" / "qwen3_vl_2b_decode.json"
RACE_RUNS = 1000


@pytest.fixture(scope="module")
def full_chain():
    shape = ChainShape.from_workload(json.loads(WORKLOAD.read_text()))
    layers, lm_head = random_chain(shape, seed=0)
    x = np.random.default_rng(1).standard_normal(shape.hidden).astype(np.float16)
    return shape, layers, lm_head, x, reference_logits(layers, lm_head, x)


@pytest.fixture(scope="module")
def provider():
    import lifecycle

    with lifecycle.numba_provider(0) as p:
        yield p


def _poison(chain):
    for buf in (chain.qkv, chain.h, chain.gu, chain.m, chain.logits):
        buf.copy_to_device(np.full(buf.shape, np.nan, np.float16))


def _replay_mismatches(graph, expected, hidden, rng):
    """Which of :data:`RACE_RUNS` replays of ``graph`` with fresh inputs give other logits than
    ``expected(x)`` (every buffer still holds the previous run's values for another input)."""
    mismatched = []
    for i in range(RACE_RUNS):
        xi = rng.standard_normal(hidden).astype(np.float16)
        if not np.array_equal(graph(xi), expected(xi)):
            mismatched.append(i)
    return mismatched


def _released(provider):
    c = provider.counters
    return (c.graphs_alive, c.pinned_buffers, c.pinned_bytes, c.pending_cleanup) == (0, 0, 0, 0)


@pytest.mark.parametrize("tuning", TUNINGS)
@pytest.mark.parametrize("merged", [True, False], ids=["merged", "separate"])
def test_full_chain_eager_and_owned_graph_match_float64(full_chain, provider, rng, merged, tuning):
    shape, layers, lm_head, x, ref = full_chain
    chain = DecodeChain(layers, lm_head, merged=merged, tuning=tuning)
    assert chain.launches == shape.layers * (5 if merged else 8) + 1
    _poison(chain)
    eager = chain.run(x)
    assert relative_error(eager, ref) < tolerance(shape.layers)
    graph = chain.capture(provider, 1, x)
    assert provider.counters.pinned_bytes == x.nbytes
    _poison(chain)
    np.testing.assert_array_equal(graph(x), eager)
    x2 = rng.standard_normal(shape.hidden).astype(np.float16)
    np.testing.assert_array_equal(graph(x2), chain.run(x2))  # the new input reached every launch
    graph.release()
    assert _released(provider)


#: One-group-per-warp projections with streamed activations (bench/NOTES.md, issue 21).
#: The merged layout's kinds only: a kind the layout does not run is refused (``DecodeChain``).
STREAMED = {k: ig.Tuning("single_warp", cols=4, unroll=4, activations="streaming", pdl=True)
            for k in ("qkv", "o", "gate_up")}


@pytest.mark.xdist_group("full_chain_races")  # a second worker (its own chain) runs the race checks
@pytest.mark.parametrize("merged, tuning, kinds, split", [(True, "auto+pdl", None, None),
                                                          (False, "auto+pdl", None, None),
                                                          (True, "single_warp+pdl", None, None),
                                                          (False, "single_warp+pdl", None, None),
                                                          (True, "single_warp+pdl", STREAMED, None),
                                                          (True, "single_warp+pdl", STREAMED, SplitK(4, 4, 4))])
def test_owned_graph_is_race_free_over_fresh_inputs(full_chain, provider, rng, merged, tuning, kinds, split):
    """``split``: the split-K down kernel with silu·mul fused (its programmatic early loads)."""
    shape, layers, lm_head, x, ref = full_chain
    chain = DecodeChain(layers, lm_head, merged=merged, tuning=tuning, kind_tunings=kinds, down_split=split,
                        fuse_silu=split is not None)
    graph = chain.capture(provider, 2, x)
    mismatched = _replay_mismatches(graph, chain.run, shape.hidden, rng)
    graph.release()
    assert mismatched == [], f"{len(mismatched)} of {RACE_RUNS} replays differ from eager, first {mismatched[:5]}"
    xi = rng.standard_normal(shape.hidden).astype(np.float16)
    assert relative_error(chain.run(xi), reference_logits(layers, lm_head, xi)) < tolerance(shape.layers)
    assert _released(provider)


@pytest.mark.xdist_group("full_chain_races")
@pytest.mark.parametrize("merged", [True, False], ids=["merged", "separate"])
def test_words_handoff_is_the_grid_chain_bit_for_bit_and_race_free(full_chain, provider, rng, merged):
    """``handoff="words"``: every GEMV polls its activations for sentinels instead of waiting for
    the previous grid; the logits equal the waiting chain's bit for bit, eagerly and over
    :data:`RACE_RUNS` replays of its owned graph with fresh inputs (each replay's fill resets
    the vectors the previous one wrote)."""
    shape, layers, lm_head, x, ref = full_chain
    options = dict(merged=merged, tuning="default+pdl", down_split=SplitK(4, 4, 4), fuse_silu=True)
    words = DecodeChain(layers, lm_head, handoff="words", **options)
    grid = DecodeChain(layers, lm_head, **options)
    eager = words.run(x)
    np.testing.assert_array_equal(eager, grid.run(x))
    assert relative_error(eager, ref) < tolerance(shape.layers)
    graph = words.capture(provider, 4, x)
    mismatched = _replay_mismatches(graph, grid.run, shape.hidden, rng)
    graph.release()
    assert mismatched == [], f"{len(mismatched)} of {RACE_RUNS} replays differ from the grid chain"
    assert _released(provider)


@pytest.mark.xdist_group("full_chain_persistent")
def test_persistent_chain_experiment_is_correct_and_race_free(full_chain, provider, rng):
    """The experimental persistent kernel: float64, owned graph vs eager, 1000 fresh inputs."""
    from int4gemv.decode.persistent import PersistentChain

    shape, layers, lm_head, x, ref = full_chain
    chain = PersistentChain(layers, lm_head)
    eager = chain.run(x)
    assert relative_error(eager, ref) < tolerance(shape.layers)
    np.testing.assert_array_equal(chain.completed(), np.full(len(chain.phases), chain.blocks, np.int32))
    graph = chain.capture(provider, 3, x)
    mismatched = _replay_mismatches(graph, chain.run, shape.hidden, rng)
    graph.release()
    assert mismatched == [], f"{len(mismatched)} of {RACE_RUNS} replays differ from eager"
    assert _released(provider)


@pytest.mark.xdist_group("full_chain_persistent")
def test_persistent_chain_stamps_change_nothing_and_every_block_stamps_in_order(full_chain):
    """The stamped persistent kernel (``timeline=True``): the same logits bit for bit, and every
    block's phase stamps written, each phase's start ≤ staged ≤ arrived."""
    from int4gemv.decode.persistent import PersistentChain
    from int4gemv.decode.timeline import phase_spans

    shape, layers, lm_head, x, ref = full_chain
    plain = PersistentChain(layers, lm_head)
    timed = PersistentChain(layers, lm_head, timeline=True)
    np.testing.assert_array_equal(timed.run(x), plain.run(x))
    stamps = timed.stamps.copy_to_host().astype(np.int64)
    assert stamps.shape == (len(timed.phases), timed.blocks, 3) and (stamps > 0).all()
    assert (np.diff(stamps, axis=2) >= 0).all()
    spans = phase_spans(stamps, timed.kernels, 3e12)
    assert [r["name"] for r in spans[:4]] == ["qkv", "o", "gate_up", "down"] and spans[-1]["name"] == "lm_head"
    assert all(r["adds"] > 0 for r in spans)
