"""INT4 nibbles to fp16 pairs, and a 16-element dot product in half2 arithmetic.

A uint32 word holds elements ``e0..e7`` (``e0`` in bits 0..3). ``(w & 0x000F000F) | 0x64006400``
is the half2 ``(1024 + q0, 1024 + q4)`` exactly (fp16 has a unit step between 1024 and 2048);
``w & 0x00F000F0`` gives ``(1024 + 16 q1, 1024 + 16 q5)``, and ``w >> 8`` the same for
``e2, e6`` and ``e3, e7``. One ``fma.rn.f16x2`` per pair turns those into ``q - zp`` exactly
(``h * 1 - (1024 + zp)`` or ``h / 16 - (64 + zp)``, all exact in fp16), and one more multiplies by
the activation pair and accumulates: about 13 instructions per 8 elements (1 shift, 4 LOP3,
8 HFMA2), against about 2.9 per element for a float32 nibble path. The activations are
paired the same way, ``(a0, a4), (a1, a5), (a2, a6), (a3, a7)``, once per word they are loaded.
For a fold that sums in float32 (the tensor cores), :func:`offset_pairs8` keeps the offsets:
with ``0x54005400`` (64, a step of 1/16) as the high nibbles' magic their pairs are
``(64 + q1, 64 + q5)`` exactly, so a word costs 1 shift and 4 LOP3, and no FMA.

Precision: each half of the half2 accumulator sums 8 products ``a * (q - zp)`` (exact
operands: fp16 activations, |q - zp| <= 15) in fp16 with one rounding each, so a word's partial
sum is off by at most ``8u`` times the sum of its terms' magnitudes (u = 2**-11); words are then
scaled and summed in float32 and the output rounded to fp16. Per output:
``|y - ref| <= (9u + K/16 * 2**-24) * sum_k |a_k| |W_nk|`` (about 4.4e-3 of the terms' magnitude;
measured on random data at most 3.2e-4). An output that nearly cancels can therefore carry a
large error relative to itself; tests/test_kernels.py judges it against its terms.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import and_or, half2_fma
from .nibble_pairs import byte_perm

__all__ = ["pair_activations", "pair_activations_wide", "pair_words", "zero_point_constants", "dequant8",
           "offset_pairs8", "dot8", "dot16", "NO_ZP_LOW", "NO_ZP_HIGH"]

_LOW, _HIGH = np.uint32(0x000F000F), np.uint32(0x00F000F0)
_MAGIC = np.uint32(0x64006400)          # half2 (1024, 1024)
_MAGIC_HIGH = np.uint32(0x54005400)     # half2 (64, 64): a step of 1/16, so bits 4..7 count 1 each
_ONE2 = np.uint32(0x3C003C00)           # half2 (1, 1)
_SIXTEENTH2 = np.uint32(0x2C002C00)     # half2 (1/16, 1/16)
_PAIR = np.uint32(0x00010001)
_ZERO32 = np.uint32(0)

#: ``zero_point_constants(8)``: the offsets of a weight without zero points (zp = 8).
NO_ZP_LOW = np.uint32(0xE408E408)
NO_ZP_HIGH = np.uint32(0xD480D480)


@cuda.jit(device=True, inline=True)
def zero_point_constants(zp):
    """``(-(1024 + zp), -(64 + zp))`` as half2 bits, for a nibble zero point ``zp`` (uint32)."""
    low = (np.uint32(0xE400) + zp) * _PAIR
    high = (np.uint32(0xD400) + (zp << np.uint32(4))) * _PAIR
    return low, high


@cuda.jit(device=True, inline=True)
def pair_activations(a16, first, p, row):
    """Write the 8 activation pairs of the 16 elements from ``a16[first]`` (uint16 bits) to
    ``p[row, 0..7]``: ``(a0,a4), (a1,a5), (a2,a6), (a3,a7)``, then the same for ``a8..a15``."""
    for h in range(2):
        b = first + np.uint64(8 * h)
        for i in range(4):
            p[row, 4 * h + i] = np.uint32(a16[b + np.uint64(i)]) | (
                np.uint32(a16[b + np.uint64(i + 4)]) << np.uint32(16))


@cuda.jit(device=True, inline=True)
def pair_activations_wide(a64, word, p, row):
    """:func:`pair_activations` of uint64 word ``word`` (16 elements) from the activations' uint64
    view ``a64`` (8-byte aligned): 4 loads and 8 byte permutes instead of 16 loads."""
    for h in range(2):
        x = a64[np.uint64(4) * word + np.uint64(2 * h)]      # a0..a3 of this half
        y = a64[np.uint64(4) * word + np.uint64(2 * h + 1)]  # a4..a7
        for k in range(2):  # the uint32 holding (a0, a1), then (a2, a3)
            xk = np.uint32((x >> np.uint64(32 * k)) & np.uint64(0xFFFFFFFF))
            yk = np.uint32((y >> np.uint64(32 * k)) & np.uint64(0xFFFFFFFF))
            p[row, 4 * h + 2 * k] = (xk & np.uint32(0xFFFF)) | (yk << np.uint32(16))
            p[row, 4 * h + 2 * k + 1] = (xk >> np.uint32(16)) | (yk & np.uint32(0xFFFF0000))


@cuda.jit(device=True, inline=True)
def pair_words(x0, x1, x2, x3):
    """The re-paired activations ``(a0,a4), (a1,a5), (a2,a6), (a3,a7)`` of 8 consecutive 16-bit
    activations held as 4 uint32 in memory order (``x0 = (a0, a1)`` ...): 4 byte permutes."""
    return (byte_perm(x0, x2, np.uint32(0x5410)), byte_perm(x0, x2, np.uint32(0x7632)),
            byte_perm(x1, x3, np.uint32(0x5410)), byte_perm(x1, x3, np.uint32(0x7632)))


@cuda.jit(device=True, inline=True)
def dequant8(w, low, high):
    """The exact fp16 pairs ``(q0-zp, q4-zp), (q1-zp, q5-zp), (q2-zp, q6-zp), (q3-zp, q7-zp)`` of
    uint32 ``w``: 1 shift, 4 LOP3, 4 HFMA2 (``low, high`` from :func:`zero_point_constants`)."""
    t = w >> np.uint32(8)
    return (half2_fma(and_or(w, _LOW, _MAGIC), _ONE2, low), half2_fma(and_or(w, _HIGH, _MAGIC), _SIXTEENTH2, high),
            half2_fma(and_or(t, _LOW, _MAGIC), _ONE2, low), half2_fma(and_or(t, _HIGH, _MAGIC), _SIXTEENTH2, high))


@cuda.jit(device=True, inline=True)
def offset_pairs8(w):
    """The pairs of :func:`dequant8` with an offset instead of the zero point, exact fp16:
    ``(1024 + q0, 1024 + q4), (64 + q1, 64 + q5), (1024 + q2, 1024 + q6), (64 + q3, 64 + q7)``
    of uint32 ``w``: 1 shift, 4 LOP3 and no arithmetic (a high nibble stays in bits 4..7, the
    mantissa bits that count 1 between 64 and 128). For a product summed in float32 (the tensor
    cores) that subtracts ``(1024 + zp)`` times the low nibbles' activations and ``(64 + zp)``
    times the high nibbles' afterwards."""
    t = w >> np.uint32(8)
    return (and_or(w, _LOW, _MAGIC), and_or(w, _HIGH, _MAGIC_HIGH),
            and_or(t, _LOW, _MAGIC), and_or(t, _HIGH, _MAGIC_HIGH))


@cuda.jit(device=True, inline=True)
def dot8(w, p0, p1, p2, p3, low, high, acc):
    """``acc + sum a_i (q_i - zp)`` over the 8 nibbles of ``w`` in half2 (each half adds 4
    products); ``p0..p3`` from :func:`pair_words`."""
    d = dequant8(w, low, high)
    acc = half2_fma(d[0], p0, acc)
    acc = half2_fma(d[1], p1, acc)
    acc = half2_fma(d[2], p2, acc)
    return half2_fma(d[3], p3, acc)



@cuda.jit(device=True, inline=True)
def dot16(word, p, row, low, high):
    """``sum(a_i * (q_i - zp))`` over the 16 nibbles of uint64 ``word`` as half2 bits (each half
    sums 8 products); ``p[row]`` holds the activation pairs, ``low, high`` the zero-point
    constants of :func:`zero_point_constants`."""
    lo = np.uint32(word & np.uint64(0xFFFFFFFF))
    hi = np.uint32(word >> np.uint64(32))
    acc = dot8(lo, p[row, 0], p[row, 1], p[row, 2], p[row, 3], low, high, _ZERO32)
    return dot8(hi, p[row, 4], p[row, 5], p[row, 6], p[row, 7], low, high, acc)
