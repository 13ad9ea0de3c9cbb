"""The decode chain's L2 lookahead (``int4gemv.decode.lookahead``): which weights each side-branch
prefetch covers, that no prefetch leaves its array, and that a chain with it computes the same
logits. On the simulator a prefetch is a bounds-checked no-op; the GPU race check is in
``tests/test_chain_gpu.py``."""

import numpy as np
import pytest
from numba import cuda

import int4gemv as ig
from int4gemv.decode.lookahead import (CHUNK_BYTES, THREADS, LookaheadPlan, lookahead_kernel,
                                       prefetch_launches)
from int4gemv.kernels.intrinsics import SIMULATED, prefetch_l2


def _weight(rng, n, k, zp):
    return ig.quantize(rng.standard_normal((n, k)).astype(np.float32), 32, symmetric=not zp)


def _covered(launch):
    """``(array, elements prefetched)`` of one prefetch launch: its threads' ranges, checked to
    tile ``0 .. count`` exactly once."""
    array, count, chunk = launch.args
    threads = launch.grid[0] * launch.block[0]
    assert launch.block[0] == THREADS and chunk * array.dtype.itemsize == CHUNK_BYTES
    ranges = [(t * chunk, min(chunk, count - t * chunk)) for t in range(threads) if t * chunk < count]
    assert sum(n for _, n in ranges) == count and ranges[-1][0] + ranges[-1][1] == count
    assert threads - len(ranges) < THREADS  # no block of idle threads
    return array, int(count)


@pytest.mark.parametrize("zp", [False, True])
def test_prefetch_covers_each_array_of_a_weight_up_to_the_limit(rng, zp):
    w = _weight(rng, 96, 4096, zp)
    d = w.device_arrays()
    names = ["words_flat", "scales_flat"] + (["zero_points_flat"] if zp else [])
    whole = [_covered(op) for op in prefetch_launches(w)]
    assert [a is d[n] for (a, _), n in zip(whole, names)] == [True] * len(names)
    assert [c for _, c in whole] == [d[n].size for n in names]
    limit = w.nbytes // 3   # a third of the weight: the same leading third of every array
    part = [_covered(op) for op in prefetch_launches(w, limit)]
    for (a, c), n in zip(part, names):
        assert c == -(-d[n].size * limit // w.nbytes) and c < d[n].size
    assert sum(a.dtype.itemsize * c for a, c in part) <= limit + 3 * 8


def test_the_plan_prefetches_each_gemv_distance_gemvs_ahead(rng):
    ws = [_weight(rng, 8, 64, False) for _ in range(4)]
    ops = [ws[0], None, ws[1], ws[2], None, ws[3]]   # None: an operation without weights (silu·mul)
    plan = LookaheadPlan(ops, 2)

    def targets(launches):
        return [next(i for i, w in enumerate(ws) if w.device_arrays()["words_flat"] is op.args[0])
                for op in launches if op.args[0].dtype == np.uint32]

    assert targets(plan.first) == [0, 1]
    assert {i: targets(v) for i, v in plan.after.items()} == {0: [2], 2: [3]}
    assert len(plan) == 2 * 4
    one = LookaheadPlan(ops, 1)
    assert targets(one.first) == [0] and {i: targets(v) for i, v in one.after.items()} == {0: [1], 2: [2], 3: [3]}
    far = LookaheadPlan(ops, 9)
    assert targets(far.first) == [0, 1, 2, 3] and far.after == {}
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="distance"):
            LookaheadPlan(ops, bad)
    with pytest.raises(ValueError, match="limit_bytes"):
        LookaheadPlan(ops, 1, 0)


def test_prefetch_kernel_stays_inside_its_array_at_every_tail():
    """Run on the simulator, whose prefetch stand-in refuses a range past the array: a kernel
    that forgot the ``min`` at the last chunk, or let a thread past ``count`` start, fails here."""
    kernel = lookahead_kernel()
    for size, count, chunk in ((100, 100, 7), (100, 64, 16), (33, 33, 33), (5, 1, 4)):
        a = cuda.to_device(np.arange(size, dtype=np.uint32))
        threads = -(-count // chunk)
        kernel[-(-threads // 8), 8](a, np.int64(count), np.int64(chunk))
        cuda.synchronize()


@pytest.mark.skipif(not SIMULATED, reason="the stand-in's bounds check (the GPU ignores the hint)")
def test_the_simulated_prefetch_refuses_a_range_outside_its_array():
    a = np.zeros(10, np.uint32)
    prefetch_l2(a, 0, 10)
    prefetch_l2(a, 9, 1)
    for first, count in ((0, 11), (10, 1), (-1, 2), (3, 0)):
        with pytest.raises(IndexError, match="outside"):
            prefetch_l2(a, first, count)


def test_bad_lookahead_arguments_are_named(rng):
    from int4gemv.decode import ChainShape, DecodeChain, random_chain

    tiny = random_chain(ChainShape(layers=1, hidden=32, intermediate=32, q_dim=32, kv_dim=8, vocab=16), seed=2)
    for bad in (-1, True, 2.0, "2"):
        with pytest.raises(ValueError, match="lookahead must"):
            DecodeChain(*tiny, lookahead=bad)
    with pytest.raises(ValueError, match="lookahead_bytes"):
        DecodeChain(*tiny, lookahead=1, lookahead_bytes=0)
    chain = DecodeChain(*tiny, lookahead=2, lookahead_bytes=1 << 10)
    assert chain.lookahead_plan.distance == 2 and chain.lookahead_plan.limit_bytes == 1 << 10
    assert DecodeChain(*tiny).lookahead_plan is None


def test_bench_configuration_names_the_lookahead():
    from bench.decode_configs import chain_options, parse_config

    opts = chain_options(parse_config("merged:single_warp+pdl:look=2:lookmb=24"))
    assert (opts["lookahead"], opts["lookahead_bytes"]) == (2, 24 << 20)
    assert chain_options(parse_config("merged:auto"))["lookahead"] == 0
    for bad in ("merged:auto:look=0", "merged:auto:lookmb=8", "merged:auto:look=x"):
        with pytest.raises(ValueError, match="configuration"):
            parse_config(bad)
