"""The inline-PTX helpers the M = 1 paths use, against numpy semantics written out here.

The same kernel runs on the simulator (the stand-ins) and on a GPU (the PTX), so agreement with
these expectations in both places is what makes a stand-in faithful."""

import numpy as np
import pytest
from numba import config, cuda

from int4gemv.kernels import bf16
from int4gemv.kernels.half2 import (NO_ZP_HIGH, NO_ZP_LOW, dequant8, offset_pairs8, pair_words,
                                    zero_point_constants)
from int4gemv.kernels.intrinsics import (and_or, bf16_bits, float_as_int, int_as_float, pack_half2,
                                        prefetch_l2)
from int4gemv.kernels.vector_loads import (load4, load8, load16, load16_volatile, load_acquire, load_volatile,
                                           prefetch_l1)

LANES = 32


@cuda.jit
def _kernel(words, zps, raw, out):
    i = cuda.grid(1)
    if i < words.shape[0] // 4:
        w0, w1, w2, w3 = words[4 * i], words[4 * i + 1], words[4 * i + 2], words[4 * i + 3]
        out[i, 0] = and_or(w0, np.uint32(0x000F000F), np.uint32(0x64006400))
        p = pair_words(w0, w1, w2, w3)
        for k in range(4):
            out[i, 1 + k] = p[k]
        low, high = zero_point_constants(np.uint32(zps[i]))
        d = dequant8(w1, low, high)
        for k in range(4):
            out[i, 5 + k] = d[k]
        x = load16(raw, 16 * i)
        y = load8(raw, 16 * i + 8)
        z = load4(raw, 16 * i + 4)
        out[i, 9], out[i, 10], out[i, 11], out[i, 12] = x
        out[i, 13], out[i, 14] = y
        out[i, 15] = z[0]


def _halves(word):
    return np.array([word], np.uint32).view(np.float16).astype(np.float64)


def test_and_or_pairs_dequant_and_wide_loads_match_their_definitions(rng):
    n = LANES
    words = rng.integers(0, 2**32, 4 * n, dtype=np.uint64).astype(np.uint32)
    zps = rng.integers(0, 16, n).astype(np.uint8)
    zp = zps.astype(int)
    raw = rng.integers(0, 256, 16 * n, dtype=np.uint8)
    out = cuda.to_device(np.zeros((n, 16), np.uint32))
    _kernel[1, LANES](cuda.to_device(words), cuda.to_device(zps), cuda.to_device(raw), out)
    got = out.copy_to_host()
    h = words.view(np.uint16).reshape(n, 4, 2)             # h[i, k] = the two 16-bit halves of word k
    for i in range(n):
        assert got[i, 0] == (words[4 * i] & 0x000F000F) | 0x64006400
        a = [int(v) for v in h[i].reshape(-1)]             # a0 .. a7
        expect = [a[0] | a[4] << 16, a[1] | a[5] << 16, a[2] | a[6] << 16, a[3] | a[7] << 16]
        assert list(got[i, 1:5]) == [np.uint32(e) for e in expect]
        w = int(words[4 * i + 1])
        q = [(w >> (4 * e)) & 15 for e in range(8)]
        for k in range(4):                                 # pair k = (q_k - zp, q_{k+4} - zp), exact
            assert list(_halves(got[i, 5 + k])) == [q[k] - zp[i], q[k + 4] - zp[i]]
        r = raw[16 * i:16 * i + 16].view(np.uint32)
        assert list(got[i, 9:13]) == list(r) and list(got[i, 13:15]) == list(r[2:4]) and got[i, 15] == r[1]


@cuda.jit
def _offsets_and_bits(words, values, pairs, bits, back):
    i = cuda.grid(1)
    if i < words.shape[0]:
        p = offset_pairs8(words[i])
        for k in range(4):
            pairs[i, k] = p[k]
        bits[i] = float_as_int(values[i])
        back[i] = int_as_float(bits[i])


def test_offset_pairs_and_float_bits_match_their_definitions(rng):
    # offset_pairs8: (1024 + q_k, 1024 + q_{k+4}) for k = 0, 2 and (64 + q_k, 64 + q_{k+4}) for
    # k = 1, 3, exact; float_as_int / int_as_float: the IEEE bits both ways (signs, NaN, tiny).
    n = LANES
    words = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    words[0], words[1] = 0, 0xFFFFFFFF
    values = rng.standard_normal(n).astype(np.float32) * np.float32(1e3)
    values[:4] = [-0.0, np.float32(1e-45), -np.float32(3.4e38), np.nan]
    pairs = cuda.to_device(np.zeros((n, 4), np.uint32))
    bits = cuda.to_device(np.zeros(n, np.int32))
    back = cuda.to_device(np.zeros(n, np.float32))
    _offsets_and_bits[1, LANES](cuda.to_device(words), cuda.to_device(values), pairs, bits, back)
    got = pairs.copy_to_host()
    for i in range(n):
        q = [(int(words[i]) >> (4 * e)) & 15 for e in range(8)]
        for k in range(4):
            base = 1024 if k % 2 == 0 else 64
            assert list(_halves(got[i, k])) == [base + q[k], base + q[k + 4]], (i, k)
    assert np.array_equal(bits.copy_to_host(), values.view(np.int32))
    assert np.array_equal(back.copy_to_host().view(np.int32), values.view(np.int32))


@cuda.jit
def _constants_of(zp, out):
    out[0], out[1] = zero_point_constants(np.uint32(zp))


def test_no_zero_point_constants_are_those_of_eight():
    # Through a kernel: on a GPU a device function cannot be called from the host.
    out = cuda.to_device(np.zeros(2, np.uint32))
    _constants_of[1, 1](8, out)
    assert tuple(out.copy_to_host()) == (NO_ZP_LOW, NO_ZP_HIGH)


@cuda.jit
def _prefetch_kernel(data, index, out):
    """Prefetch element ``index`` of ``data`` into L1, then read it: the value is unchanged."""
    prefetch_l1(data, np.uint64(index))
    out[0] = data[index]


def test_prefetch_l1_is_a_hint_and_its_stand_in_checks_the_index(rng):
    data = cuda.to_device(rng.integers(0, 2**16, 300).astype(np.uint16))
    out = cuda.to_device(np.zeros(1, np.uint16))
    _prefetch_kernel[1, 1](data, 299, out)
    assert out.copy_to_host()[0] == data.copy_to_host()[299]
    if config.ENABLE_CUDASIM:   # the stand-in reads the element: a missing kernel guard fails here
        with pytest.raises(IndexError):
            _prefetch_kernel[1, 1](data, 300, out)


@cuda.jit
def _prefetch_l2_kernel(data, first, count, out):
    """Bulk-prefetch elements ``first .. first + count`` into L2, then read ``data[first]``."""
    prefetch_l2(data, np.uint64(first), np.uint64(count))
    out[0] = data[first]


def test_prefetch_l2_is_a_hint_and_its_stand_in_checks_the_range(rng):
    """On the GPU a bulk prefetch past the allocation may touch unmapped memory, so the
    simulator's stand-in refuses any range outside the array (a kernel's off-by-one fails in CI)."""
    data = cuda.to_device(rng.integers(0, 2**31, 300).astype(np.uint32))
    out = cuda.to_device(np.zeros(1, np.uint32))
    for first, count in ((0, 300), (299, 1), (17, 64)):
        _prefetch_l2_kernel[1, 1](data, first, count, out)
        assert out.copy_to_host()[0] == data.copy_to_host()[first]
    if config.ENABLE_CUDASIM:
        for first, count in ((0, 301), (299, 2), (10, 0)):
            with pytest.raises(IndexError, match="outside"):
                _prefetch_l2_kernel[1, 1](data, first, count, out)

@cuda.jit
def _bf16_kernel(x, lo, hi, scales, out, factors):
    i = cuda.grid(1)
    if i < x.shape[0] // 4:
        out[i, 0] = bf16.magnitude_top(x[4 * i])
        out[i, 1] = pack_half2(lo[i], hi[i])
        p = bf16.half_pairs(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3], scales[i])
        for k in range(4):
            out[i, 2 + k] = p[k]
        ok, scale, unscale = bf16.row_scales(x[4 * i] & np.uint32(0x7FFF))
        out[i, 6] = 1 if ok else 0
        factors[i, 0] = scale
        factors[i, 1] = unscale


def _bf16_values(bits16):
    return (np.asarray(bits16, np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow encountered in scalar multiply:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in scalar multiply:RuntimeWarning")
def test_bf16_row_scale_pack_half2_and_half_pairs_match_their_definitions(rng):
    # The scaled fp16 fold of the bf16 M = 1 loop (bf16.py): the largest magnitude of a word, the
    # row scale 2**s that puts it in [128, 256) (|s| <= MAX_SHIFT, else not ok: each edge of that
    # range, zero, subnormals, infinities, NaN), and the scaled conversion; plus random bits.
    lo_edge, hi_edge = (127 + 7 - bf16.MAX_SHIFT) << 7, (127 + 7 + bf16.MAX_SHIFT) << 7
    edges = [0x0000, 0x8000, 0x3880, 0xB880, 0x387F, 0x0001, 0x437F, 0xC37F, 0x4380, 0xC380,
             0x7F80, 0xFF80, 0x7FC0, 0x3F80, lo_edge, lo_edge - 1, hi_edge | 0x7F, hi_edge + 0x80]
    n = LANES
    h = rng.integers(0, 2**16, 8 * n, dtype=np.uint64).astype(np.uint16)
    h[:len(edges)] = edges
    h[len(edges):2 * len(edges)] = edges[::-1]
    h[48::16] = rng.integers(lo_edge, hi_edge + 0x80, len(h[48::16]))   # more lanes in range
    x = h.view(np.uint32)                                    # 4 * n words, 2 bf16 each
    lo = rng.standard_normal(n).astype(np.float32) * np.float32(3e4)
    hi = (rng.integers(-2**11, 2**11, n) + 0.5).astype(np.float32)   # ties: nearest even
    lo[0], hi[0] = 7e4, 2.0 ** -25                           # overflow to inf, tie to zero
    shifts = rng.integers(-bf16.MAX_SHIFT, bf16.MAX_SHIFT + 1, n)
    shifts[:3] = (0, -bf16.MAX_SHIFT, bf16.MAX_SHIFT)
    scales = np.ldexp(np.float32(1), shifts).astype(np.float32)
    out = cuda.to_device(np.zeros((n, 7), np.uint32))
    factors = cuda.to_device(np.zeros((n, 2), np.float32))
    _bf16_kernel[1, LANES](cuda.to_device(x), cuda.to_device(lo), cuda.to_device(hi),
                           cuda.to_device(scales), out, factors)
    got, fac = out.copy_to_host(), factors.copy_to_host().astype(np.float64)
    v = _bf16_values(h).reshape(n, 4, 2)                     # v[i, k] = the two values of word k
    for i in range(n):
        w0 = int(x[4 * i])
        assert got[i, 0] == max(w0 & 0x7FFF, (w0 >> 16) & 0x7FFF)
        a = abs(v[i, 0, 0])                                  # the row_scales input: the low bf16
        e = (w0 & 0x7FFF) >> 7
        ok = a == 0 or abs(e - 134) <= bf16.MAX_SHIFT         # NaN and infinities: e = 255
        assert got[i, 6] == ok, (i, a, e)
        if ok and a > 0:
            assert 128 <= a * fac[i, 0] < 256 and fac[i, 0] * fac[i, 1] == 1, (i, a, fac[i])
        else:
            assert list(fac[i]) == [1.0, 1.0], (i, a, fac[i])
        assert list(_halves(got[i, 1])) == [float(np.float16(np.float64(lo[i]))),
                                           float(np.float16(np.float64(hi[i])))]
        e = v[i].reshape(-1) * np.float64(scales[i])         # a0 .. a7, scaled (exact)
        pairs = [(e[0], e[4]), (e[1], e[5]), (e[2], e[6]), (e[3], e[7])]
        for k, (p, q) in enumerate(pairs):
            expect = np.array([p, q]).astype(np.float16).view(np.uint32)[0]
            assert got[i, 2 + k] == expect or np.isnan(_halves(got[i, 2 + k])).any()


@cuda.jit
def _bf16_bits_kernel(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = bf16_bits(x[i])


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
def test_bf16_bits_rounds_to_nearest_even_as_ml_dtypes_does(rng):
    # cvt.rn.bf16.f32, how every bf16 output is written: ties both ways, the largest finite
    # bf16 and the float32 past it (overflow to infinity), subnormals of both types, zeros,
    # infinities, NaN (the hardware's canonical NaN; any NaN is accepted), then random bits.
    import ml_dtypes

    edges = np.array([0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0xBF808000, 0x7F7F7FFF,
                      0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000, 0x00008000, 0x00018000, 0x00000001,
                      0x80008000, 0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000,
                      0xFFC00001, 0x7F800001], np.uint32)
    bits = rng.integers(0, 2**32, 4 * LANES, dtype=np.uint64).astype(np.uint32)
    bits[:len(edges)] = edges
    x = bits.view(np.float32)
    out = cuda.to_device(np.zeros(x.shape[0], np.uint16))
    _bf16_bits_kernel[4, LANES](cuda.to_device(x), out)
    got = out.copy_to_host()
    want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = np.isnan(x)
    assert np.all(np.isnan(got[nan].view(ml_dtypes.bfloat16).astype(np.float32)))
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert got[0] == 0x3F80 and got[1] == 0x3F82 and got[6] == 0x7F80   # ties to even, overflow


@cuda.jit
def _volatile_kernel(flags, out):
    i = cuda.grid(1)
    if i < flags.shape[0]:
        out[0, i] = load_volatile(flags, i)[0]
        out[1, i] = load_acquire(flags, i)[0]


def test_flag_reads_return_each_element_as_uint32(rng):
    # the grid barrier's poll of a counter (volatile) and its acquiring read: element i, its 4
    # bytes as uint32 (negative int32 too)
    flags = rng.integers(-2**31, 2**31, LANES, dtype=np.int64).astype(np.int32)
    out = cuda.to_device(np.zeros((2, LANES), np.uint32))
    _volatile_kernel[1, LANES](cuda.to_device(flags), out)
    np.testing.assert_array_equal(out.copy_to_host(), np.stack([flags.view(np.uint32)] * 2))


@cuda.jit
def _volatile16_kernel(halves, out):
    i = cuda.grid(1)
    if 8 * i < halves.shape[0]:
        v = load16_volatile(halves, 8 * i)
        for e in range(4):
            out[4 * i + e] = v[e]


def test_a_volatile_16_byte_read_returns_the_eight_halves_it_starts_at(rng):
    # the chain's sentinel poll (kernels.handoff): halves 8i .. 8i + 7 as four little-endian uint32
    halves = rng.integers(0, 2**16, 8 * LANES, dtype=np.int64).astype(np.uint16)
    out = cuda.to_device(np.zeros(4 * LANES, np.uint32))
    _volatile16_kernel[1, LANES](cuda.to_device(halves), out)
    np.testing.assert_array_equal(out.copy_to_host(), halves.view(np.uint32))
