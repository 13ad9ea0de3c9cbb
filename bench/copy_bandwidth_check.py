"""Why did Numba's copy probe read low? One process, alternating probes (needs a GPU and torch).

    python bench/copy_bandwidth_check.py

Prints the device-to-device copy bandwidth (read + write, 1 GiB, median of 20 event-timed copies)
from: the old probe (the driver's memcpy after 3 warm-up copies), :func:`int4gemv.benchmark.copy_bandwidth`
(at commit 227b99b the faster of memcpy and a Numba copy kernel; since, the fastest of those and
torch's ``copy_``), torch ``copy_``, and again, so a clock ramp would show up as an order effect.
"""

import time

import numpy as np
import torch
from numba import cuda

from int4gemv.benchmark import copy_bandwidth

N = 1 << 30


def numba_three_warmups():
    src = cuda.to_device(np.frombuffer(np.random.default_rng(0).bytes(N), np.uint8))
    dst = cuda.device_array_like(src)
    stream = cuda.stream()
    for _ in range(3):
        dst.copy_to_device(src, stream=stream)
    start, end, samples = cuda.event(timing=True), cuda.event(timing=True), []
    for _ in range(20):
        start.record(stream)
        dst.copy_to_device(src, stream=stream)
        end.record(stream)
        end.synchronize()
        samples.append(cuda.event_elapsed_time(start, end) * 1e-3)
    return 2 * N / float(np.median(samples))


def torch_copy():
    src = torch.empty(N, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end, samples = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(20):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3)
    return 2 * N / float(np.median(samples))


if __name__ == "__main__":
    time.sleep(2)   # an idle GPU first
    for name, probe in [("numba, 3 warm-up copies (old)", numba_three_warmups),
                        ("copy_bandwidth (fastest of three)", lambda: copy_bandwidth(remeasure=True)),
                        ("torch copy_", torch_copy), ("numba, 3 warm-up copies (old)", numba_three_warmups),
                        ("copy_bandwidth (fastest of three)", lambda: copy_bandwidth(remeasure=True))]:
        print(f"{name:34s} {probe() / 1e9:7.0f} GB/s", flush=True)
