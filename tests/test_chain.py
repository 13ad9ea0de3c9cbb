"""The decode chain (``int4gemv.decode``) on the simulator, and its float64 model on the host.

The chain runs at a tiny shape (2 layers, hidden 32, MLP 32, k/v 8, vocab 16; 32 is the least K
the single-warp kernel takes): Numba's simulator costs about 0.05 s per output column of a GEMV,
so a step here takes about 10 s on a 2-core machine, and the issue's hidden 64 / MLP 128 / vocab
96 would take about two minutes. The single-warp kernel runs with 16 columns per warp here (four
times fewer simulated threads than its default 4). Full-size runs: ``tests/test_chain_gpu.py``.
"""

import math

from dataclasses import replace

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv.decode.chain import TUNINGS, DecodeChain, launch_options
from int4gemv.decode.streams import SimulatedStreams
from int4gemv.decode.model import (ChainShape, LayerWeights, exact_gemv, random_chain,
                                  reference_logits, relative_error, tolerance)
from int4gemv.decode.silu_mul import check_silu_mul, silu_mul_geometry, silu_mul_kernel
from int4gemv.decode.timeline import kernel_spans
from int4gemv.device import device_facts
from int4gemv.kernels.intrinsics import SIMULATED

TINY = ChainShape(layers=2, hidden=32, intermediate=32, q_dim=32, kv_dim=8, vocab=16)


@pytest.fixture(scope="module")
def tiny_chain():
    return random_chain(TINY, seed=11)


@pytest.fixture
def wide_columns(monkeypatch):
    """16 columns per warp for the single-warp kernel: a quarter of the simulated threads."""
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP_COLS", "16")
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP_UNROLL", "1")


def _poison(chain):
    """NaN in every buffer the step writes, so a launch that writes nothing is caught."""
    for buf in (chain.qkv, chain.h, chain.gu, chain.m, chain.logits):
        buf.copy_to_device(np.full(buf.shape, np.nan, np.float16))


# -- the float64 model (host only) ---------------------------------------------------------------

@pytest.mark.parametrize("block_size, K, symmetric", [(16, 72, False), (32, 96, True),
                                                      (64, 200, False), (128, 136, True)])
def test_exact_gemv_is_reference_gemv(rng, block_size, K, symmetric):
    w = ig.quantize(rng.standard_normal((20, K)).astype(np.float32), block_size, symmetric=symmetric)
    x, bias = rng.standard_normal(K), rng.standard_normal(20)
    want = ig.reference_gemv(x, w, bias)
    np.testing.assert_allclose(exact_gemv(x, w, bias, rows=7), want, rtol=1e-12, atol=1e-12)


def test_random_chain_keeps_activations_order_one(rng):
    shape = ChainShape(layers=28, hidden=256, intermediate=512, q_dim=256, kv_dim=128, vocab=300)
    layers, lm_head = random_chain(shape, seed=3)
    logits = reference_logits(layers, lm_head, rng.standard_normal(256).astype(np.float16))
    assert 0.3 < np.sqrt(np.mean(logits ** 2)) < 3


def _float64_chain_without_residual(layers, lm_head, x):
    """The chain with ``h = W_o·q`` (the residual add dropped): what a wiring bug computes."""
    for layer in layers:
        h = exact_gemv(exact_gemv(x, layer.q), layer.o)
        g, u = exact_gemv(h, layer.gate), exact_gemv(h, layer.up)
        x = exact_gemv(g / (1 + np.exp(-g)) * u, layer.down, h)
    return exact_gemv(x, lm_head)


@pytest.mark.parametrize("layers", [2, 28])
def test_tolerance_admits_fp16_rounding_and_rejects_a_missing_residual(rng, layers):
    shape = ChainShape(layers=layers, hidden=128, intermediate=256, q_dim=128, kv_dim=64, vocab=200)
    weights = random_chain(shape, seed=layers)
    for _ in range(3):
        x = rng.standard_normal(128).astype(np.float16)
        ref = reference_logits(*weights, x)
        ideal = reference_logits(*weights, x, store=np.float16)  # every intermediate rounded
        assert relative_error(ideal, ref) < tolerance(layers) / 2
        assert relative_error(_float64_chain_without_residual(*weights, x), ref) > 10 * tolerance(layers)
    assert math.isinf(relative_error(np.full(3, np.nan), np.ones(3)))


def test_layer_weights_check_their_shapes(rng, tiny_chain):
    layer = tiny_chain[0][0]
    parts = {name: getattr(layer, name) for name in ("q", "k", "v", "o", "gate", "up", "down")}
    with pytest.raises(ValueError, match="down has N=8, K=32"):
        LayerWeights(**dict(parts, down=parts["k"]))
    with pytest.raises(TypeError, match="gate must be an int4gemv.QuantizedWeight"):
        LayerWeights(**dict(parts, gate=np.zeros(3)))
    merged = layer.qkv
    assert merged.N == 32 + 2 * 8
    np.testing.assert_array_equal(merged.dequantize()[32:40], layer.k.dequantize())


def test_launch_options_is_the_one_kernel_choice():
    assert launch_options("auto+pdl") == {"variant": "auto", "pdl": True, "prefetch": False}
    assert launch_options("default") == {"variant": "default", "pdl": False, "prefetch": False}
    assert launch_options("single_warp+pdl+l2") == {"variant": "single_warp", "pdl": True, "prefetch": True}
    assert set(TUNINGS) == {v + p for v in ("default", "single_warp", "auto") for p in ("", "+pdl")} | {
        "single_warp+pdl+l2", "auto+pdl+l2"}
    with pytest.raises(ValueError, match="tuning must be one of"):
        launch_options("auto+l2")


# -- bad input, refused before any launch ----------------------------------------------------------

def test_bad_chain_input_is_refused(tiny_chain):
    layers, lm_head = tiny_chain
    with pytest.raises(TypeError, match="layers must be"):
        DecodeChain([], lm_head)
    with pytest.raises(TypeError, match="lm_head must be"):
        DecodeChain(layers, None)
    with pytest.raises(TypeError, match="merged must be a bool"):
        DecodeChain(layers, lm_head, merged=1)
    with pytest.raises(ValueError, match="tuning must be one of"):
        DecodeChain(layers, lm_head, tuning="fast")
    with pytest.raises(ValueError, match="blocks_per_sm must be None or a positive int"):
        DecodeChain(layers, lm_head, blocks_per_sm=0)
    with pytest.raises(TypeError, match="timeline must be a bool"):
        DecodeChain(layers, lm_head, timeline=1)
    with pytest.raises(TypeError, match="silu_pdl must be None or a bool"):
        DecodeChain(layers, lm_head, silu_pdl="yes")
    with pytest.raises(ValueError, match="kind_tunings has an unknown kind 'mlp'"):
        DecodeChain(layers, lm_head, kind_tunings={"mlp": ig.Tuning("single_warp")})
    with pytest.raises(TypeError, match=r"kind_tunings\['down'\] must be an int4gemv.Tuning"):
        DecodeChain(layers, lm_head, kind_tunings={"down": "single_warp"})
    with pytest.raises(ValueError, match=r"kind_tunings names \['qkv'\], which the separate layout"):
        DecodeChain(layers, lm_head, merged=False, kind_tunings={"qkv": ig.Tuning("single_warp")})
    with pytest.raises(ValueError, match="lm_head has K=48"):
        DecodeChain(layers, random_chain(ChainShape(1, 48, 64, 32, 16, 8), seed=0)[1])
    other = random_chain(ChainShape(1, 32, 96, 32, 16, 48), seed=0)[0]
    with pytest.raises(ValueError, match=r"layers\[1\] has"):
        DecodeChain((layers[0], other[0]), lm_head)
    chain = DecodeChain(layers, lm_head, tuning="default")
    with pytest.raises(ValueError, match=r"x must have shape \(32,\)"):
        chain.run(np.zeros(31, np.float16))
    with pytest.raises(TypeError, match="x must be a numpy float array"):
        chain.run(np.zeros(32, np.int32))


@pytest.mark.parametrize("merged", [True, False], ids=["merged", "separate"])
def test_weight_bytes_counts_every_projection_and_the_lm_head(tiny_chain, merged):
    """``weight_bytes``: the INT4 weights, scales and zero points a step reads, lm_head
    included: every layer projection's ``nbytes`` plus the lm_head's, in either layout, the
    sum over the chain's launches. Built only: nothing runs."""
    layers, lm_head = tiny_chain
    chain = DecodeChain(layers, lm_head, merged=merged, tuning="default")
    projections = sum(getattr(layer, p).nbytes for layer in layers
                      for p in ("q", "k", "v", "o", "gate", "up", "down"))
    assert lm_head.nbytes > 0 and chain.weight_bytes == lm_head.nbytes + projections
    assert chain.weight_bytes == sum(nbytes for _, _, nbytes in chain.kernels)


def test_silu_mul_arguments_are_checked():
    gu, m = cuda.device_array(10, np.float16), cuda.device_array(5, np.float16)
    assert check_silu_mul(gu, m) == 5
    with pytest.raises(ValueError, match=r"gu must have shape \(8,\)"):
        check_silu_mul(gu, cuda.device_array(4, np.float16))
    with pytest.raises(TypeError, match="m must be a 1-D float16"):
        check_silu_mul(gu, cuda.device_array(5, np.float32))
    with pytest.raises(TypeError, match="gu must be a Numba device array"):
        check_silu_mul(np.zeros(10, np.float16), m)


# -- kernels and the chain on the simulator ---------------------------------------------------------

def test_prepared_launches_of_one_kernel_keep_their_own_geometry(rng):
    """The chain binds many launches of one kernel; each must keep its own grid (the default
    tiling is not persistent: a grid sized for a smaller N leaves columns unwritten)."""
    a = cuda.to_device(rng.standard_normal(32).astype(np.float16))
    big, small = (ig.quantize(rng.standard_normal((n, 32)).astype(np.float32), 32) for n in (24, 8))
    outs = [cuda.to_device(np.full(n, np.nan, np.float16)) for n in (24, 8)]
    first = ig.prepare(a, big, out=outs[0], variant="default")
    ig.prepare(a, small, out=outs[1], variant="default")
    first()
    y = outs[0].copy_to_host()
    assert relative_error(y, ig.reference_gemv(a.copy_to_host(), big)) < 2e-3


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # 60000 · u is inf in fp16
@pytest.mark.parametrize("pdl", [False, True])
def test_silu_mul_kernel_is_float64_silu_times_u(rng, pdl):
    n = 300  # two blocks, the second partly empty
    gu_h = (rng.standard_normal(2 * n) * 4).astype(np.float16)
    gu_h[:4] = [60000, -60000, -30, 0]  # exp(-|g|) never overflows
    gu, m = cuda.to_device(gu_h), cuda.to_device(np.full(n + 8, np.nan, np.float16))
    grid, block = silu_mul_geometry(n)
    silu_mul_kernel(pdl)[grid, block](gu, m[:n])
    got, g, u = m.copy_to_host(), gu_h[:n].astype(np.float64), gu_h[n:].astype(np.float64)
    with np.errstate(over="ignore"):
        want = g / (1 + np.exp(-g)) * u
    finite = np.abs(want) < 65504
    np.testing.assert_allclose(got[:n][finite], want[finite], rtol=2 ** -10, atol=1e-7)
    assert np.all(np.isinf(got[:n][~finite])) and np.all(np.isnan(got[n:]))


def test_eager_separate_chain_matches_float64(rng, tiny_chain, wide_columns):
    """The separate layout: the plain chain, 8 launches a layer. (The merged layout's eager step
    is checked the same way by the captured-chain test below, which runs it anyway.)"""
    chain = DecodeChain(*tiny_chain, merged=False)
    assert chain.launches == 17 and all(p.kernel == "single_warp" for p in chain.plans())
    x = rng.standard_normal(TINY.hidden).astype(np.float16)
    _poison(chain)
    logits = chain.run(x)
    assert relative_error(logits, reference_logits(*tiny_chain, x)) < tolerance(TINY.layers)


@pytest.fixture
def sim_provider():
    import lifecycle

    sim = lifecycle.SimDriver(timeout=900.0)  # a simulated step takes tens of seconds
    prev = sim.ctx_get_current()
    sim.ctx_set_current(sim.primary_ctx_retain(0))
    provider = lifecycle.GraphProvider(sim, device=0)
    try:
        yield sim, provider
    finally:
        provider.close()
        sim.ctx_set_current(prev)
        sim.primary_ctx_release(0)
        sim.close()


def test_captured_chain_replays_like_eager_and_releases_everything(rng, tiny_chain, wide_columns,
                                                                   sim_provider):
    """The merged layout, every launch programmatic (silu·mul too), each grid capped at one
    block (one simulated SM: a single warp walks every column group), the down projections on
    their own tuning, stamped: its eager step against float64 and its timeline, then the same
    chain captured into an owned graph, replayed with a new input and released."""
    sim, provider = sim_provider
    down = ig.Tuning("single_warp", cols=16, unroll=1, activations="streaming", pdl=True)
    chain = DecodeChain(*tiny_chain, merged=True, tuning="single_warp+pdl", blocks_per_sm=1,
                        timeline=True, kind_tunings={"down": down})
    assert chain.launches == 11 and all(p.kernel == "single_warp" for p in chain.plans())
    # the down projections run their own tuning (K = 32 would keep registers)
    assert [p.config.activations for p in chain.plans()] == ["registers"] * 3 + ["streaming"] + \
        ["registers"] * 3 + ["streaming", "registers"]
    x0, x1 = (rng.standard_normal(TINY.hidden).astype(np.float16) for _ in range(2))
    _poison(chain)
    eager = chain.run(x1)
    assert relative_error(eager, reference_logits(*tiny_chain, x1)) < tolerance(TINY.layers)
    sms = device_facts()[1]  # 1 on the simulator: every grid capped at one block
    assert chain.silu_pdl and max(chain.grids()) <= sms and (sms > 1 or set(chain.grids()) == {1})
    spans = kernel_spans(chain.stamps.copy_to_host(), chain.kernels, 4e12)
    assert [r["name"] for r in spans[:5]] == ["qkv", "o", "gate_up", "silu_mul", "down"]
    assert [r["blocks"] for r in spans] == chain.grids() and all(r["start"] <= r["end"] for r in spans)
    if SIMULATED:  # the simulator runs launches one after another; a GPU overlaps them
        assert all(r["overlap"] <= 0 for r in spans)
        assert sum(r["adds"] for r in spans) == pytest.approx(spans[-1]["end"])
    graph = chain.capture(provider, 5, x0, streams=SimulatedStreams(sim))
    c = provider.counters
    assert (c.graphs_alive, c.pinned_buffers, c.pinned_bytes) == (1, 1, x0.nbytes)
    _poison(chain)
    chain.x.copy_to_device(np.zeros(TINY.hidden, np.float16))  # the replay must copy its own input
    replayed = graph(x1)  # x1 written into the retained pinned buffer, then one replay
    np.testing.assert_array_equal(replayed, eager)
    graph.release()
    c = provider.counters
    assert (c.graphs_alive, c.pinned_buffers, c.pinned_bytes, c.pending_cleanup, c.host_funcs) == (0,) * 5
    assert sim.violations == []


# -- the experimental persistent chain kernel ------------------------------------------------------

#: Widths for the persistent kernel: every K (64, 96) several chunks, N not a multiple of a group.
PERSISTENT = ChainShape(layers=2, hidden=64, intermediate=96, q_dim=64, kv_dim=24, vocab=40)


@pytest.fixture(scope="module")
def persistent_chain():
    return random_chain(PERSISTENT, seed=5)


@pytest.mark.parametrize("block_size", [32, 64])
def test_persistent_chain_matches_float64_in_one_launch(rng, persistent_chain, block_size):
    from int4gemv.decode.persistent import PersistentChain

    # one lane per column, one chunk a step: every K takes 2-4 steps, and the grid barrier runs
    # between every two phases (one block: the simulator runs blocks one after another); at
    # block size 64 two chunks share a scale
    shape = PERSISTENT if block_size == 32 else replace(PERSISTENT, intermediate=128, block_size=block_size)
    weights = persistent_chain if block_size == 32 else random_chain(shape, seed=6)
    chain = PersistentChain(*weights, lanes=1, unroll=1)
    assert chain.launches == 2 and chain.blocks == 1
    x = rng.standard_normal(shape.hidden).astype(np.float16)
    chain.logits.copy_to_device(np.full(shape.vocab, np.nan, np.float16))
    logits = chain.run(x)
    np.testing.assert_array_equal(chain.completed(), np.ones(len(chain.phases), np.int32))
    assert relative_error(logits, reference_logits(*weights, x)) < tolerance(shape.layers)


@pytest.mark.parametrize("lanes, cols, unroll", [(2, 1, 1), (4, 2, 1), (1, 2, 2), (1, 4, 1), (1, 1, 4)])
def test_persistent_chain_spread_over_blocks_is_the_one_launch(rng, persistent_chain, lanes, cols, unroll):
    from int4gemv.decode.persistent import PersistentChain

    x = rng.standard_normal(PERSISTENT.hidden).astype(np.float16)
    one = PersistentChain(*persistent_chain, lanes=lanes, cols=cols, unroll=unroll).run(x)
    spread = PersistentChain(*persistent_chain, lanes=lanes, cols=cols, unroll=unroll, blocks=3,
                             split_phases=True)
    assert spread.launches == 1 + len(spread.phases)
    spread.logits.copy_to_device(np.full(PERSISTENT.vocab, np.nan, np.float16))
    np.testing.assert_array_equal(spread.run(x), one)   # the same sums in the same order
    np.testing.assert_array_equal(spread.completed(), np.full(len(spread.phases), 3, np.int32))
    assert relative_error(one, reference_logits(*persistent_chain, x)) < tolerance(PERSISTENT.layers)


def test_persistent_chain_with_stamps_or_more_warps_is_the_same_chain(rng, persistent_chain):
    from int4gemv.decode.persistent import PersistentChain
    from int4gemv.decode.timeline import phase_spans

    x = rng.standard_normal(PERSISTENT.hidden).astype(np.float16)
    plain = PersistentChain(*persistent_chain, lanes=2, unroll=1).run(x)
    timed = PersistentChain(*persistent_chain, lanes=2, unroll=1, timeline=True)
    np.testing.assert_array_equal(timed.run(x), plain)
    stamps = timed.stamps.copy_to_host()
    assert stamps.shape == (len(timed.phases), 1, 3) and (stamps > 0).all()
    assert (np.diff(stamps.reshape(-1).astype(np.int64)) >= 0).all()   # start, staged, arrived, next...
    spans = phase_spans(stamps, timed.kernels, 1e12)
    assert [r["name"] for r in spans] == ["qkv", "o", "gate_up", "down"] * PERSISTENT.layers + ["lm_head"]
    assert spans[-1]["bytes"] == persistent_chain[1].nbytes and spans[4]["layer"] == 1
    # 2 warps a block: other warps take other column groups; every column sums in the same order
    wide = PersistentChain(*persistent_chain, lanes=2, unroll=1, warps=2)
    np.testing.assert_array_equal(wide.run(x), plain)
    assert wide.completed().tolist() == [1] * len(wide.phases)


def test_persistent_chain_stages_rows_longer_than_one_pass(rng):
    from int4gemv.decode.persistent import PersistentChain
    from int4gemv.decode.persistent_layout import STAGE_PASS

    # one warp a block: down's row (K = 1600, silu) is 200 pieces of 8 for 32 threads, so a
    # thread stages STAGE_PASS (6) pieces a pass, i, i + 32, ..., and some a second pass of one
    shape = ChainShape(layers=1, hidden=64, intermediate=1600, q_dim=64, kv_dim=24, vocab=40)
    assert STAGE_PASS * 32 < shape.intermediate // 8 < 2 * STAGE_PASS * 32
    weights = random_chain(shape, seed=8)
    chain = PersistentChain(*weights, warps=1, lanes=8)
    x = rng.standard_normal(shape.hidden).astype(np.float16)
    chain.logits.copy_to_device(np.full(shape.vocab, np.nan, np.float16))
    assert relative_error(chain.run(x), reference_logits(*weights, x)) < tolerance(shape.layers)


def test_persistent_chain_fails_rather_than_hangs_when_its_grid_is_not_resident(rng, persistent_chain):
    from int4gemv.decode.persistent import PersistentChain

    # the simulator runs block 0 to its end before block 1 starts: every barrier block 0 meets
    # gives up after grid_barrier.SPIN_LIMIT polls and is counted; run() refuses the logits
    chain = PersistentChain(*persistent_chain, blocks=2)
    with pytest.raises(RuntimeError, match="timed out"):
        chain.run(rng.standard_normal(PERSISTENT.hidden).astype(np.float16))
    assert chain.done.copy_to_host()[-1] == len(chain.phases) - 1


def test_persistent_phase_tiling_gives_the_busiest_warp_the_fewest_columns():
    from int4gemv.decode.persistent import phase_tiling

    warps = 16 * 132   # the H100/H200 grid: 16 warps per SM
    # qkv, o, gate_up (2 columns: 3 rounds of 2 = 6 columns, where 4 would give 2 rounds of 4),
    # down (6 chunks a lane: steps of 4), lm_head (72 columns any way: the largest items)
    assert [phase_tiling(N, K, 32, warps) for N, K in ((4096, 2048), (2048, 2048), (12288, 2048),
                                                          (2048, 6144), (151936, 2048))] == \
        [(2, 2), (1, 2), (2, 2), (1, 4), (4, 1)]
    assert phase_tiling(64, 96, 1, 4) == (1, 4) and phase_tiling(16, 64, 4, 8) == (1, 1)
    assert phase_tiling(10000, 6144, 32, 8) == (2, 2)   # 1250 columns each way but 4 (1252)
    assert phase_tiling(10000, 96, 32, 8) == (2, 1)     # one chunk a lane


def test_persistent_blocks_fit_static_shared_memory_and_the_sm():
    from int4gemv.decode.persistent_layout import SHARED_PER_BLOCK, WARP_CHOICES, blocks_per_sm, shared_bytes

    # the stage (6144 / 32 chunks of 20 words), then 4 ring slots of 512 weight words and 128
    # scale words a warp, in bytes
    assert shared_bytes(16) == 4 * (192 * 20 + 16 * 4 * (512 + 128)) == 179200
    assert all(shared_bytes(w) <= SHARED_PER_BLOCK for w in WARP_CHOICES)    # a block's most
    # 16 warps an SM where the shared memory (228 KB, 1 KB reserved a block) holds them
    assert [blocks_per_sm(w) for w in WARP_CHOICES] == [8, 6, 4, 2, 1]


def test_persistent_chain_refuses_what_its_kernel_cannot_run(persistent_chain):
    from int4gemv.decode.persistent import PersistentChain

    layers, lm_head = persistent_chain
    for kwargs, match in ((dict(lanes=3), "lanes"), (dict(lanes=True), "lanes"), (dict(cols=5), "cols"),
                          (dict(unroll=3), "unroll"), (dict(cols=2, unroll=4), "unroll"),
                          (dict(unroll=0), "unroll"), (dict(blocks=True), "blocks"), (dict(warps=5), "warps"),
                          (dict(warps=32), "warps"), (dict(warps=True), "warps")):
        with pytest.raises(ValueError, match=match):
            PersistentChain(layers, lm_head, **kwargs)
    with pytest.raises(TypeError, match="split_phases"):
        PersistentChain(layers, lm_head, split_phases=1)
    with pytest.raises(TypeError, match="timeline"):
        PersistentChain(layers, lm_head, timeline="yes")
    odd = random_chain(ChainShape(layers=1, hidden=64, intermediate=96, q_dim=64, kv_dim=24, vocab=40,
                                  block_size=16), seed=1)
    with pytest.raises(ValueError, match="block size 32, 64 or 128"):
        PersistentChain(*odd)
