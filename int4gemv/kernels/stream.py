"""A read-only streaming kernel: the floor a GEMV of the same bytes is judged against.

:func:`stream_kernel` reads up to three byte arrays (a weight's packed nibbles, scales and zero
points) exactly once each and does nothing else with them but fold every word into an XOR
checksum, so its time is what reading those bytes costs on this device, with the same launch,
ramp and tail as a kernel that computes with them. The checksum proves every byte was read once
(a byte read twice or never changes it) and keeps the compiler from dropping the loads.

Mapping (``T`` threads in the grid, ``W`` bytes per load, ``U`` loads in flight per lane). The
three arrays' whole ``W``-byte units form one index space, so a lane's loads from the packed
nibbles, the scales and the zero points are all in flight together (one DRAM round trip, as in
a GEMV step, not one per array)::

    unit index  : | a: 0 .. ua-1 | b: ua .. ua+ub-1 | c: ... |   then each array's tail (< W bytes)
    thread t    :   units t, t + T, t + 2T, ...   (U of them issued before any is folded)
    tail byte i :   of array x read by thread i (i < its tail)
    warp w      :   XOR of its lanes' words (shuffles) -> out[w]

Loads are ``ld.global.nc`` of 4, 8 or 16 bytes (:mod:`.vector_loads`); an array's first byte
must be aligned to ``W`` (device allocations are). The XOR of ``out`` equals the XOR of the
arrays' bytes read as little-endian uint32 words, each array zero-padded to a whole word
(:func:`expected_checksum`). One compiled kernel per ``(W, U, T-per-block, blocks-per-SM)``.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from .intrinsics import SIMULATED, shfl_xor
from .vector_loads import load4, load8, load16

__all__ = ["WIDTHS", "stream_kernel", "expected_checksum", "warps_in_grid"]

#: Bytes per lane and load the kernel can use.
WIDTHS = (4, 8, 16)
_WARP = 32


def expected_checksum(*arrays) -> int:
    """XOR of the bytes of host ``arrays`` as little-endian uint32 words (each zero-padded to 4
    bytes): what the XOR of a stream kernel's ``out`` must equal."""
    total = np.uint32(0)
    for a in arrays:
        b = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
        padded = np.zeros(-(-b.size // 4) * 4, np.uint8)
        padded[:b.size] = b
        if padded.size:
            total ^= np.bitwise_xor.reduce(padded.view("<u4"))
    return int(total)


def warps_in_grid(grid: int, threads: int) -> int:
    """Length ``out`` needs for a launch of ``grid`` blocks of ``threads`` threads."""
    return grid * threads // _WARP


@functools.lru_cache(maxsize=None)
def stream_kernel(width: int, unroll: int, threads: int, blocks_per_sm: int):
    """The compiled streaming kernel for ``width``-byte loads, ``unroll`` loads in flight per
    lane, ``threads`` per block (a multiple of 32) and launch bounds of ``blocks_per_sm`` blocks
    per SM (ignored on the simulator). Arguments: ``(a, na, b, nb, c, nc, out)``: three uint8
    arrays and how many bytes of each to read (0: not read), ``out`` uint32 with
    :func:`warps_in_grid` entries."""
    if width not in WIDTHS:
        raise ValueError(f"width must be one of {WIDTHS}; got {width!r}")
    if unroll not in (1, 2, 4, 8):
        raise ValueError(f"unroll must be 1, 2, 4 or 8; got {unroll!r}")
    if threads % _WARP or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {threads!r}")
    W, U = width, unroll
    WORDS = W // 4                 # uint32 words per load
    IN_FLIGHT = U * WORDS          # words a lane holds between issuing and folding a round
    load = {4: load4, 8: load8, 16: load16}[W]
    Z = np.uint32(0)

    @cuda.jit(device=True, inline=True)
    def load_unit(a, ua, b, ub, c, k):
        """Unit ``k`` of the joint index space (a's units, then b's, then c's)."""
        if k < ua:
            return load(a, k * W)
        if k < ua + ub:
            return load(b, (k - ua) * W)
        return load(c, (k - ua - ub) * W)

    @cuda.jit(device=True, inline=True)
    def tail_byte(a, n, t):
        """Thread ``t``'s byte of the last ``n % W`` bytes of ``a[:n]`` (0 if none), in its word lane."""
        tail = n // W * W
        if t < n - tail:
            b = tail + t
            return np.uint32(a[b]) << np.uint32(8 * (b % 4))
        return Z

    bounds = {} if SIMULATED else {"launch_bounds": (threads, blocks_per_sm)}

    @cuda.jit(**bounds)
    def kernel(a, na, b, nb, c, nc, out):
        t = cuda.grid(1)
        T = cuda.gridsize(1)
        ua, ub = na // W, nb // W
        units = ua + ub + nc // W
        acc = tail_byte(a, na, t) ^ tail_byte(b, nb, t) ^ tail_byte(c, nc, t)
        i = t
        # Whole rounds: U loads issued, then folded (no guards).
        while i + (U - 1) * T < units:
            xs = cuda.local.array(IN_FLIGHT, np.uint32)
            for u in range(U):
                x = load_unit(a, ua, b, ub, c, i + u * T)
                for k in range(WORDS):
                    xs[u * WORDS + k] = x[k]
            for k in range(IN_FLIGHT):
                acc ^= xs[k]
            i += U * T
        while i < units:            # fewer than U units left for this thread
            x = load_unit(a, ua, b, ub, c, i)
            for k in range(WORDS):
                acc ^= x[k]
            i += T
        for r in range(5):          # shuffles move int32: the bits are carried unchanged
            acc ^= np.uint32(shfl_xor(np.int32(acc), np.uint32(16 >> r)))
        if cuda.threadIdx.x % _WARP == 0:
            out[t // _WARP] = acc

    return kernel
