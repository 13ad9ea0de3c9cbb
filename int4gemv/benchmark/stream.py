"""The ``stream`` peer: the floor of a weight format, timed in the same run as the GEMV.

The floor of a row is the time a plain Numba kernel takes to read exactly the row's weight bytes
(packed nibbles + scales + zero points, the weight's own device arrays) and nothing else
(:func:`int4gemv.kernels.stream.stream_kernel`). It pays the same launch, ramp and tail as a
GEMV, so ``% of floor`` = floor / time is the fraction of the achievable read rate a kernel
reaches. It is the ceiling the package quotes (``% of copy`` is kept beside it).

* **Choosing the kernel.** :func:`choose` times every :data:`CANDIDATES` configuration (load
  width 4, 8 or 16 bytes per lane, loads in flight, blocks per SM) once on the weights it is
  given and keeps the fastest, cached per device and size class (:func:`size_class`: sizes
  within a factor of 4 share a choice). The choice is remembered; times never are.
* **Timing.** :meth:`StreamPeer.time` times the chosen kernel over the same rotated weight copies
  the GEMV uses, through the caller's graph timer (:class:`~.timing.Timing`), in every run.
* **Checking.** Every launch folds every word it reads into an XOR checksum; :meth:`StreamPeer.check`
  compares it with numpy's. On Numba's simulator (tiny shapes) that check is all that runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CANDIDATES", "SIM_CONFIG", "StreamConfig", "StreamPeer", "choose", "clear_choices",
           "operands", "size_class", "sweeps"]


@dataclass(frozen=True)
class StreamConfig:
    """One compiled streaming kernel: ``width`` bytes per load (4, 8, 16), ``unroll`` loads in
    flight per lane, ``threads`` per block and launch bounds of ``blocks_per_sm``."""

    width: int
    unroll: int
    threads: int = 256
    blocks_per_sm: int = 8

    def grid(self, nbytes: int, multiprocessors: int) -> int:
        """Blocks for ``nbytes`` (all arrays): one round of loads per lane at most, and at most
        ``blocks_per_sm`` per SM (the rest is grid-stride)."""
        rounds = -(-max(1, nbytes) // (self.width * self.unroll * self.threads))
        return max(1, min(rounds, self.blocks_per_sm * multiprocessors))

    def __str__(self) -> str:
        return f"{self.width}B x{self.unroll} {self.threads}t {self.blocks_per_sm}/SM"


#: The short sweep: each width with the in-flight depths that give a lane 16-64 bytes in flight,
#: at 4 and 8 blocks of 256 threads per SM (64 warps/SM at most on the H200).
CANDIDATES = tuple(StreamConfig(w, u, 256, b) for w, unrolls in ((4, (4, 8)), (8, (2, 4)), (16, (1, 2, 4)))
                   for u in unrolls for b in (4, 8))

#: On the simulator: one configuration with a whole round, a remainder and a byte tail at tiny sizes.
SIM_CONFIG = StreamConfig(16, 2, threads=32, blocks_per_sm=1)

_CHOICES: dict = {}
_SWEEPS: dict = {}


def size_class(nbytes: int) -> int:
    """``floor(log4(nbytes))``: sizes in one power-of-4 range share a cached choice."""
    return (int(nbytes).bit_length() - 1) // 2


def clear_choices() -> None:
    """Forget every cached choice (the next :func:`choose` sweeps again)."""
    _CHOICES.clear()
    _SWEEPS.clear()


def sweeps() -> list:
    """The sweeps run so far: ``[{"device", "size_class", "bytes", "times": {config: us}}]``."""
    return [dict(device=str(key[0]), size_class=key[1], bytes=nbytes, times=times)
            for key, (nbytes, times) in _SWEEPS.items()]


def operands(w) -> tuple:
    """``(packed, n, scales, n, zero_points, n)``: uint8 views of weight ``w``'s device arrays
    and the bytes to read from each (0 for absent zero points: the placeholder is not read)."""
    d = w.device_arrays()
    packed = d["packed"].reshape(-1)
    scales = d["scales_flat"].view(np.uint8)
    zps = d["zero_points_flat"].view(np.uint8)
    nz = zps.shape[0] if w.has_zero_points else 0
    return packed, packed.shape[0], scales, scales.shape[0], zps, nz


def choose(weights, timer, *, device_key, multiprocessors, replays: int = 10) -> StreamConfig:
    """The fastest of :data:`CANDIDATES` on ``weights`` (cached per ``device_key`` and size
    class). ``timer(issue, launches, replays)`` times ``issue(i, stream)`` in a graph."""
    key = (device_key, size_class(weights[0].nbytes))
    if key not in _CHOICES:
        timed = []
        for config in CANDIDATES:
            peer = StreamPeer(weights, config, multiprocessors)
            timed.append((peer.time(timer, replays=replays).us, config))
        _CHOICES[key] = min(timed, key=lambda t: t[0])[1]
        _SWEEPS[key] = (weights[0].nbytes, {str(c): us for us, c in timed})
    return _CHOICES[key]


class StreamPeer:
    """The streaming kernel of ``config`` bound to each of ``weights`` (rotated copies of one
    weight; each launch ``i`` reads copy ``i % len(weights)``)."""

    name = "stream"
    description = "Numba read-only stream of the weight's own bytes (the floor)"

    def __init__(self, weights, config: StreamConfig, multiprocessors: int):
        from numba import cuda

        from ..kernels.stream import stream_kernel, warps_in_grid
        from ..launcher import bind

        self.weights, self.config = list(weights), config
        self.nbytes = self.weights[0].nbytes
        ops = operands(self.weights[0])
        grid = config.grid(ops[1] + ops[3] + ops[5], multiprocessors)
        self.out = cuda.device_array(warps_in_grid(grid, config.threads), np.uint32)
        kernel = stream_kernel(config.width, config.unroll, config.threads, config.blocks_per_sm)
        self.grid = grid
        self._launches = [bind(kernel, operands(w) + (self.out,), (grid, 1, 1), (config.threads, 1, 1))
                          for w in self.weights]

    def issue(self, i: int, stream=0) -> None:
        """Launch the read of copy ``i % copies`` on ``stream`` (a handle or stream object)."""
        from ..device import stream_handle

        self._launches[i % len(self._launches)].launch(stream_handle(stream))

    def checksum(self) -> int:
        """XOR of the last launch's per-warp checksums (synchronizes)."""
        return int(np.bitwise_xor.reduce(self.out.copy_to_host()))

    def check(self, i: int = 0) -> bool:
        """Launch on copy ``i`` and compare the checksum with numpy's XOR of the host bytes."""
        from ..kernels.stream import expected_checksum

        self.out.copy_to_device(np.full(self.out.shape[0], 0xA5A5A5A5, np.uint32))
        self.issue(i)
        w = self.weights[i % len(self.weights)]
        host = [a.copy_to_host() for a, n in zip(operands(w)[0::2], operands(w)[1::2]) if n]
        return self.checksum() == expected_checksum(*host)

    def time(self, timer, *, replays: int):
        """:class:`~.timing.Timing` of one launch per copy (at least ``MIN_LAUNCHES``) in a graph."""
        from .timing import MIN_LAUNCHES

        return timer(self.issue, max(len(self.weights), MIN_LAUNCHES), replays)
