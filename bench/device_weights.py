"""Random INT4 weights made on the device, torch views of them, and a float64 reference.

A benchmark at real shapes needs about 1 GB of weights per decode step and hundreds of rotated
copies per shape; quantizing them on the host would take minutes. :func:`device_only_weight`
builds a :class:`~int4gemv.QuantizedWeight` whose host arrays are lazy zero placeholders (never
touched: ``numpy.zeros`` maps the zero page) and uploads them once; :func:`random_device_weight`
then overwrites the device bytes with random nibbles and scales drawn by torch on the GPU.

Warning:
    The host arrays of such a weight are placeholders: ``dequantize()``, ``unpacked()`` and
    :func:`int4gemv.reference_gemv` see zeros. Use :func:`torch_reference` (it reads the device
    bytes) to check results.

Only the documented ``device_arrays()`` entries ``words`` (uint32 ``[N, W]``) and ``scales`` (fp16
``[N, ceil(K/bs)]``) are written; the kernels' flat views share their memory. Weights are
symmetric (zero point 8, no zero points stored), like ``quantize(..., symmetric=True)``.
torch is imported on first use, never at import time.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ROTATE_BYTES",
    "device_only_weight",
    "random_device_weight",
    "relative_error",
    "rotated_weights",
    "rotation_copies",
    "torch_dequantize",
    "torch_reference",
    "torch_views",
]

#: Bytes of distinct weights a timed graph cycles through: several times the H200's 60 MB L2, so
#: a launch never finds its weight in L2 from an earlier launch.
ROTATE_BYTES = 256 * 2**20


def device_only_weight(N: int, K: int, block_size: int = 32):
    """A symmetric QuantizedWeight with zero host placeholders, uploaded (all nibbles 0, scales 1)."""
    import int4gemv

    n_blocks = -(-K // block_size)
    packed = np.zeros((N, n_blocks, block_size // 2), np.uint8)   # lazily mapped, never written
    scales = np.ones((N, n_blocks), np.float16)
    return int4gemv.QuantizedWeight(packed, scales, K=K, N=N, block_size=block_size).to_device()


def random_device_weight(N: int, K: int, block_size: int = 32, *, generator=None,
                         scale_range=(0.001, 0.011)):
    """A device-only weight with uniformly random bytes and scales uniform in ``scale_range``.

    ``generator``: an optional CUDA ``torch.Generator``. Returns a synchronized weight.
    """
    import torch
    from numba import cuda

    w = device_only_weight(N, K, block_size)
    d = w.device_arrays()
    words, scales = d["words"], d["scales"]
    nbytes = words.shape[1] * 4
    rand_bytes = torch.randint(0, 256, (N, nbytes), dtype=torch.uint8, device="cuda", generator=generator)
    lo, hi = scale_range
    rand_scales = (torch.rand(tuple(scales.shape), device="cuda", generator=generator) * (hi - lo) + lo).half()
    torch.cuda.current_stream().synchronize()
    words.copy_to_device(cuda.as_cuda_array(rand_bytes).view(np.uint32))
    scales.copy_to_device(cuda.as_cuda_array(rand_scales))
    cuda.synchronize()
    return w


def rotation_copies(nbytes: int, rotate_bytes: int = ROTATE_BYTES) -> int:
    """How many copies of an ``nbytes`` weight add up to ``rotate_bytes`` (at least 2)."""
    return max(2, -(-int(rotate_bytes) // int(nbytes)))


def rotated_weights(N: int, K: int, block_size: int = 32, *, rotate_bytes: int = ROTATE_BYTES,
                    seed: int = 0) -> list:
    """Random device weights of one shape, :func:`rotation_copies` of them."""
    import torch

    from .workloads import weight_bytes

    generator = torch.Generator(device="cuda").manual_seed(seed)
    copies = rotation_copies(weight_bytes(N, K, block_size), rotate_bytes)
    return [random_device_weight(N, K, block_size, generator=generator) for _ in range(copies)]


def torch_views(w):
    """``(packed, scales)`` torch CUDA views of a symmetric device weight's memory: uint8
    ``[N, W*4]`` (MatMulNBits bytes, ``K/2`` per column when ``K`` is a multiple of the block size)
    and fp16 ``[N, ceil(K/bs)]``. The views share memory with ``w`` (keep ``w`` alive)."""
    import torch

    if w.zero_points is not None:
        raise ValueError("torch_views supports symmetric weights only (no zero points)")
    d = w.device_arrays()
    packed = torch.as_tensor(d["words"].view(np.uint8), device="cuda")
    scales = torch.as_tensor(d["scales"], device="cuda")
    return packed, scales


def torch_dequantize(packed, scales, K: int, block_size: int, dtype):
    """``(q - 8) * scale`` as a ``[N, K]`` torch tensor of ``dtype`` from :func:`torch_views`."""
    import torch

    N = packed.shape[0]
    q = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(N, -1)
    n_blocks = scales.shape[1]
    w = (q.to(dtype) - 8).reshape(N, n_blocks, block_size) * scales.to(dtype).unsqueeze(-1)
    return w.reshape(N, -1)[:, :K]


def torch_reference(w, a) -> np.ndarray:
    """``a · dequant(w)ᵀ`` in float64 on the GPU from the device bytes; ``a`` is a host ``[K]``."""
    import torch

    packed, scales = torch_views(w)
    W = torch_dequantize(packed, scales, w.K, w.block_size, torch.float64)
    x = torch.from_numpy(np.asarray(a, np.float64)).to("cuda")
    y = (W @ x).cpu().numpy()
    del W
    return y


def relative_error(y, ref) -> float:
    """``‖y − ref‖ / ‖ref‖`` in float64 (``inf`` when ``y`` has non-finite entries)."""
    y = np.asarray(y, np.float64)
    ref = np.asarray(ref, np.float64)
    if not np.all(np.isfinite(y)):
        return float("inf")
    return float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), np.finfo(np.float64).tiny))
