"""A streaming copy kernel: the device-to-device copy rate that "% of copy" is quoted against.

:func:`copy_words` copies a 1-D array of 8-byte words, grid-stride, with four loads in flight per
thread before its four stores. On an H200 it read 3.65 TB/s (read + write) where the driver's
memcpy read 2.8-3.5 and torch's copy kernel 4.2 (bench/NOTES.md); ``int4gemv.benchmark.copy_bandwidth``
takes the fastest of the three.
"""

from __future__ import annotations

from numba import cuda

__all__ = ["copy_words"]


@cuda.jit
def copy_words(dst, src):
    """``dst[i] = src[i]`` for every ``i < src.shape[0]`` (``dst`` at least as long); any grid."""
    i, step, n = cuda.grid(1), cuda.gridsize(1), src.shape[0]
    while i + 3 * step < n:
        a, b, c, d = src[i], src[i + step], src[i + 2 * step], src[i + 3 * step]
        dst[i], dst[i + step], dst[i + 2 * step], dst[i + 3 * step] = a, b, c, d
        i += 4 * step
    while i < n:
        dst[i] = src[i]
        i += step
