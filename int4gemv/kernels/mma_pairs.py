"""INT4 nibbles to scaled ``mma`` operand pairs ``((q[2b] - zp) s, (q[2b+1] - zp) s)`` in natural
order, fp16 and bf16, with ``lop3.b32`` and ``fma.rn.bf16x2`` (:mod:`.intrinsics`, with their
simulator stand-ins).

Both dtypes take the same steps. One ``prmt.b32`` takes byte ``b`` of the word ``w`` into the
low half and byte ``b`` of ``w >> 4`` into the high half, so both nibbles land in bits 0..3 of
their half; one ``lop3`` (``(x & 0x000F000F) | magic``: written as two LLVM operations, ptxas
emitted two LOP3 with immediates on the H200, bench/NOTES.md) gives ``(M + q[2b], M + q[2b+1])``
exactly, with ``M = 1024`` in fp16 (a unit step between 1024 and 2048) and ``M = 128`` in bf16
(a unit step between 128 and 256); one FMA with ``(1, 1)`` and ``-(M + zp)`` (an add: ptxas
needs no constant register for the 1) gives ``(q[2b] - zp, q[2b+1] - zp)``, exact (integers of
magnitude <= 15); one FMA with the group scale and ``-0`` rounds the product once. Per 8
elements: 1 shift, 4 PRMT, 4 LOP3, 8 FMA. (The fp16 form of :mod:`.nibble_pairs` saves the
shift with a ``(1, 1/16)`` multiplier, but that constant occupied a register, rematerialized
before each FMA at the kernel's 80-register bound.) bf16 has a unit step between 128 and 256, so
``0x4300 | q`` is ``128 + q`` exactly. Its mantissa has 7 bits, so the high nibble of a byte
cannot stay where it is (bits 4..7 would reach the exponent); instead one ``prmt.b32`` takes byte
``b`` of the word ``w`` into the low half and byte ``b`` of ``w >> 4`` into the high half, so both
nibbles land in bits 0..3 of their half. One LOP3 (``& 0x000F000F | 0x43004300``) gives
``(128 + q[2b], 128 + q[2b+1])`` and one ``fma.rn.bf16x2`` with ``(1, 1)`` and
``(-(128 + zp), -(128 + zp))`` gives ``(q[2b] - zp, q[2b+1] - zp)``, exact (integers of magnitude
<= 15). Per 8 elements: 1 shift, 4 PRMT, 4 LOP3, 4 FMA; then the scale as for fp16.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import and_or, bf16x2_fma, half2_fma
from .nibble_pairs import byte_perm

__all__ = ["scaled_pair_f16", "scaled_pair_bf16", "zero_point_offset_bf16",
           "zero_point_offset_f16", "NO_ZP_OFFSET_F16", "NO_ZP_OFFSET_BF16", "ONE_BF16X2", "NEG_ZERO_BF16X2"]

_MAGIC16 = np.uint32(0x64006400)        # half2 (1024, 1024)
_ONE16 = np.uint32(0x3C003C00)          # half2 (1, 1)
#: ``zero_point_offset_f16(8)``: the offsets of a weight without zero points.
NO_ZP_OFFSET_F16 = np.uint32(0xE408E408)

_MASK = np.uint32(0x000F000F)
_MAGIC = np.uint32(0x43004300)          # bf16x2 (128, 128)
#: bf16x2 (1, 1).
ONE_BF16X2 = np.uint32(0x3F803F80)
#: x2 (-0, -0), the same bits in fp16 and bf16: the addend of a plain product through ``fma``
#: (``x * s + -0 == x * s``).
NEG_ZERO_BF16X2 = np.uint32(0x80008000)
#: ``zero_point_offset_bf16(8)``: the offsets of a weight without zero points.
NO_ZP_OFFSET_BF16 = np.uint32(0xC308C308)
_PAIR = np.uint32(0x00010001)

@cuda.jit(device=True, inline=True)
def zero_point_offset_bf16(zp):
    """bf16x2 ``(-(128 + zp), -(128 + zp))`` for nibble zero point ``zp`` (uint32)."""
    return (np.uint32(0xC300) + zp) * _PAIR


@cuda.jit(device=True, inline=True)
def zero_point_offset_f16(zp):
    """half2 ``(-(1024 + zp), -(1024 + zp))`` for nibble zero point ``zp`` (uint32)."""
    return (np.uint32(0xE400) + zp) * _PAIR


@cuda.jit(device=True, inline=True)
def scaled_pair_f16(w, w_shifted, b, offset, s2):
    """half2 ``((q[2b] - zp) s, (q[2b+1] - zp) s)`` of byte ``b`` (a constant 0..3) of uint32 ``w``;
    ``w_shifted`` is ``w >> 4``, ``offset``: :func:`zero_point_offset_f16`; ``s2``: half2
    ``(s, s)``."""
    v = and_or(byte_perm(w, w_shifted, np.uint32(0x4400 + 0x1111 * b)), _MASK, _MAGIC16)
    return half2_fma(half2_fma(v, _ONE16, offset), s2, NEG_ZERO_BF16X2)


@cuda.jit(device=True, inline=True)
def scaled_pair_bf16(w, w_shifted, b, offset, s2):
    """bf16x2 ``((q[2b] - zp) s, (q[2b+1] - zp) s)`` of byte ``b`` (a constant 0..3) of uint32 ``w``;
    ``w_shifted`` is ``w >> 4`` (computed once per word), ``offset``:
    :func:`zero_point_offset_bf16`, ``s2``: bf16x2 ``(s, s)``."""
    v = and_or(byte_perm(w, w_shifted, np.uint32(0x4400 + 0x1111 * b)), _MASK, _MAGIC)
    return bf16x2_fma(bf16x2_fma(v, ONE_BF16X2, offset), s2, NEG_ZERO_BF16X2)
