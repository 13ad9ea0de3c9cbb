"""``cp.async`` intrinsics (:mod:`int4gemv.kernels.async_copy`), as the persistent chain's ring
uses them: on the simulator (the stand-ins: a copy lands only when a ``wait_group`` retires its
group) and on a GPU (the PTX), with the same expectations in both places."""

import numpy as np
import pytest
from numba import cuda

from int4gemv.kernels.async_copy import ASYNC_WAITS, async_commit, cp_async4, cp_async16, load16_shared
from int4gemv.kernels.intrinsics import SIMULATED

# Kernels call one wait each (a tuple of intrinsics cannot be indexed in a GPU kernel).
_WAIT0, _WAIT1, _WAIT2 = ASYNC_WAITS[:3]


@cuda.jit
def _copies(src, out):
    """One thread: three groups into a 16-word shared buffer, read at each wait."""
    ring = cuda.shared.array(16, np.uint32)
    if cuda.threadIdx.x == 0:
        for i in range(16):
            ring[i] = np.uint32(0xDEADBEEF)
        cp_async16(ring, 0, src, 16, True)          # group 0: bytes 16..31
        async_commit()
        cp_async4(ring, 4, src, 8, True)            # group 1: bytes 8..11, then a zero word
        cp_async4(ring, 5, src, 40, False)
        async_commit()
        cp_async16(ring, 8, src, 0, False)          # group 2: zero-filled
        async_commit()
        _WAIT2()                            # group 0 landed
        x = load16_shared(ring, 0)
        for i in range(4):
            out[i] = x[i]
        _WAIT0()                            # all landed
        for k in range(3):
            x = load16_shared(ring, 4 * k + 4)
            for i in range(4):
                out[4 + 4 * k + i] = x[i]


def test_cp_async_copies_zero_fills_and_waits():
    src = np.arange(48, dtype=np.uint8) + 1
    out = cuda.to_device(np.zeros(16, np.uint32))
    _copies[1, 1](cuda.to_device(src), out)
    got = out.copy_to_host()
    w = src.view(np.uint32)
    assert list(got[:4]) == list(w[4:8])
    assert list(got[4:8]) == [w[2], 0, 0xDEADBEEF, 0xDEADBEEF]
    assert list(got[8:12]) == [0, 0, 0, 0]
    assert list(got[12:16]) == [0xDEADBEEF] * 4      # never written


@cuda.jit
def _ring(src, out, rounds):
    """Each thread streams ``rounds`` 16-byte pieces through its own 3 slots, 2 in flight."""
    ring = cuda.shared.array(3 * 4 * 32, np.uint32)
    t = cuda.threadIdx.x
    for i in range(2):
        cp_async16(ring, (i % 3) * 128 + 4 * t, src, 16 * (i * 32 + t), True)
        async_commit()
    for i in range(rounds):
        ahead = i + 2
        cp_async16(ring, (ahead % 3) * 128 + 4 * t, src, 16 * ((ahead % rounds) * 32 + t), ahead < rounds)
        async_commit()
        _WAIT2()
        x = load16_shared(ring, (i % 3) * 128 + 4 * t)
        for e in range(4):
            out[(i * 32 + t) * 4 + e] = x[e]


def test_a_ring_of_three_slots_delivers_every_piece_in_order():
    rounds = 7
    src = np.random.default_rng(0).integers(0, 256, rounds * 32 * 16, dtype=np.uint8)
    out = cuda.to_device(np.zeros(rounds * 32 * 4, np.uint32))
    _ring[1, 32](cuda.to_device(src), out, rounds)
    np.testing.assert_array_equal(out.copy_to_host(), src.view(np.uint32))


@cuda.jit
def _early(src, out):
    ring = cuda.shared.array(4, np.uint32)
    ring[0] = np.uint32(7)
    cp_async16(ring, 0, src, 0, True)
    async_commit()
    cp_async16(ring, 0, src, 16, True)   # not committed: never lands
    _WAIT1()                     # one group may stay pending: nothing need land
    out[0] = ring[0]
    _WAIT0()
    out[1] = ring[0]


@pytest.mark.skipif(not SIMULATED, reason="the stand-in's order (hardware may land copies earlier)")
def test_simulated_copies_land_only_when_waited_for():
    # The stand-in defers every copy to the wait that retires it (the latest the hardware may):
    # a slot read before its wait reads stale data, so the ring's kernel tests catch it.
    src = np.arange(32, dtype=np.uint8)
    out = cuda.to_device(np.zeros(2, np.uint32))
    _early[1, 1](cuda.to_device(src), out)
    assert list(out.copy_to_host()) == [7, src[:4].view(np.uint32)[0]]


@cuda.jit
def _shared_word(src):
    ring = cuda.shared.array(4, np.uint32)
    cp_async4(ring, 0, src, 0, True)     # every thread into word 0
    async_commit()
    _WAIT0()


@pytest.mark.skipif(not SIMULATED, reason="a check of the stand-in")
def test_simulated_copies_refuse_two_threads_in_one_word():
    with pytest.raises(RuntimeError, match="two threads"):
        _shared_word[1, 2](cuda.to_device(np.arange(8, dtype=np.uint8)))


@pytest.mark.skipif(not SIMULATED, reason="a check of the stand-in")
def test_simulated_copies_refuse_misaligned_and_out_of_range_addresses():
    @cuda.jit
    def misaligned(src):
        ring = cuda.shared.array(4, np.uint32)
        cp_async16(ring, 0, src, 4, True)

    @cuda.jit
    def past_the_end(src):
        ring = cuda.shared.array(4, np.uint32)
        cp_async4(ring, 0, src, 8, False)    # not valid, yet the address must lie in the array

    src = cuda.to_device(np.arange(32, dtype=np.uint8)[:10])
    with pytest.raises(ValueError, match="misaligned"):
        misaligned[1, 1](src)
    with pytest.raises(IndexError):
        past_the_end[1, 1](src)
