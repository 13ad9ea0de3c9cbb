"""The ``stream`` peer (the floor): its kernel reads every byte exactly once, for every load width,
in-flight depth, array length class (whole rounds, a remainder, a byte tail) and weight format;
the peer picks, caches and times a configuration only on a GPU.

On the simulator each case launches one or two tiny blocks (each thread is a Python thread)."""

import numpy as np
import pytest
from numba import cuda

from int4gemv.benchmark import GemvBench, random_weight
from int4gemv.benchmark.stream import (CANDIDATES, StreamConfig, StreamPeer, choose, clear_choices, operands,
                                      size_class)
from int4gemv.kernels.stream import WIDTHS, expected_checksum, stream_kernel, warps_in_grid

from int4gemv.device import simulated

SIMULATED = simulated()


def launch(arrays, width, unroll, threads=32, grid=2):
    """XOR of the kernel's per-warp checksums over ``arrays`` (host uint8, up to three)."""
    arrays = list(arrays) + [np.zeros(1, np.uint8)] * (3 - len(arrays))
    lengths = [a.size for a in arrays]
    args = []
    for a, n in zip(arrays, lengths):
        args += [cuda.to_device(a), n]
    out = cuda.to_device(np.full(warps_in_grid(grid, threads), 0xDEADBEEF, np.uint32))
    stream_kernel(width, unroll, threads, 1)[grid, threads](*args, out)
    return int(np.bitwise_xor.reduce(out.copy_to_host()))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("unroll", [1, 2])
@pytest.mark.parametrize("length", [3, 16 * 64 * 2, 16 * 64 * 3 + 5, 16 * 64 + 48])
def test_the_stream_kernel_reads_every_byte_once(rng, width, unroll, length):
    # 64 threads: whole rounds of U loads, a remainder of fewer units, and a tail under W bytes.
    a = rng.integers(0, 256, length, dtype=np.uint8)
    b = rng.integers(0, 256, 37, dtype=np.uint8)
    assert launch([a, b], width, unroll) == expected_checksum(a, b)


def test_the_checksum_sees_a_skipped_or_doubled_word(rng):
    a = rng.integers(0, 256, 96, dtype=np.uint8)
    full = expected_checksum(a)
    assert expected_checksum(a[:-4]) != full                       # a word never read
    assert expected_checksum(a, a[:4]) != full                     # a word read twice
    assert launch([a], 16, 2) == full


def test_absent_arrays_are_not_read(rng):
    a = rng.integers(0, 256, 64, dtype=np.uint8)
    poison = np.full(8, 0xFF, np.uint8)
    args = [cuda.to_device(a), a.size, cuda.to_device(poison), 0, cuda.to_device(poison), 0]
    out = cuda.to_device(np.zeros(warps_in_grid(1, 32), np.uint32))
    stream_kernel(8, 1, 32, 1)[1, 32](*args, out)
    assert int(np.bitwise_xor.reduce(out.copy_to_host())) == expected_checksum(a)


@pytest.mark.parametrize(("bs", "zp", "dtype"), [(32, False, "float16"), (16, True, "float16"),
                                                 (128, True, "bfloat16")])
def test_the_peer_streams_each_weight_format(bs, zp, dtype):
    w = random_weight(6, 72, bs, zero_points=zp, rng=3)
    if dtype == "bfloat16":
        import ml_dtypes
        import int4gemv as ig

        w = ig.QuantizedWeight(w.packed, w.scales.astype(ml_dtypes.bfloat16), w.zero_points,
                               K=w.K, N=w.N, block_size=bs)
    peer = StreamPeer([w.to_device()], StreamConfig(4, 2, threads=32, blocks_per_sm=1), 1)
    assert sum(operands(w)[1::2]) == w.nbytes == peer.nbytes   # exactly the format's bytes
    assert peer.check()


def test_the_bench_floor_checks_on_the_simulator_and_times_on_a_gpu():
    with GemvBench(random_weight(8, 64, 32, zero_points=True, rng=1)) as bench:
        floor = bench.floor(replays=20)
        assert floor.ok and floor.error is None and floor.method == "stream"
        assert bench.floor() is floor                              # measured once per bench
        assert (floor.us is None) == SIMULATED
        if not SIMULATED:
            row = bench.time("default", replays=20)
            assert row.floor_us == floor.us and row.pct_floor == pytest.approx(100 * floor.us / row.us)


def test_the_choice_is_the_fastest_candidate_and_is_cached_per_size_class():
    clear_choices()
    w = random_weight(4, 64, 32, rng=2).to_device()
    calls = []

    def fake_timer(issue, launches, replays):       # a timer that prefers 8-byte loads, 2 in flight
        config = issue.__self__.config
        calls.append(config)

        class T:
            us = 1.0 if (config.width, config.unroll, config.blocks_per_sm) == (8, 2, 8) else 2.0
        return T()

    try:
        first = choose([w], fake_timer, device_key="fake", multiprocessors=1)
        assert first == StreamConfig(8, 2, 256, 8) and calls == list(CANDIDATES)
        assert choose([w], fake_timer, device_key="fake", multiprocessors=1) == first
        assert len(calls) == len(CANDIDATES)                       # cached: no second sweep
        assert size_class(1 << 20) == size_class((1 << 22) - 1) != size_class(1 << 22)
    finally:
        clear_choices()


def test_the_choice_is_cached_per_device_too():
    """The cached choice is keyed on the device as well as the size class: the same weight on a
    second device key is swept again (and may choose differently)."""
    clear_choices()
    w = random_weight(4, 64, 32, rng=2).to_device()
    calls = []
    fastest = {}

    def fake_timer(issue, launches, replays):
        config = issue.__self__.config
        calls.append(config)

        class T:
            us = 1.0 if (config.width, config.unroll, config.blocks_per_sm) == fastest.get("now") else 2.0
        return T()

    try:
        fastest["now"] = (8, 2, 8)
        first = choose([w], fake_timer, device_key=(0, "gpu A"), multiprocessors=1)
        fastest["now"] = (CANDIDATES[0].width, CANDIDATES[0].unroll, CANDIDATES[0].blocks_per_sm)
        second = choose([w], fake_timer, device_key=(1, "gpu B"), multiprocessors=1)
        assert len(calls) == 2 * len(CANDIDATES)                    # a second sweep
        assert first == StreamConfig(8, 2, 256, 8) and second == CANDIDATES[0] != first
        assert choose([w], fake_timer, device_key=(0, "gpu A"), multiprocessors=1) == first
        assert len(calls) == 2 * len(CANDIDATES)
    finally:
        clear_choices()
