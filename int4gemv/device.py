"""The CUDA device as the pipeline sees it: simulator or GPU, its facts, and stream handles.

One function each: :func:`simulated` (is Numba's CUDA simulator in use), :func:`device_facts`
(name, multiprocessors, compute capability of the current device, read once per device) and
:func:`stream_handle` (any supported stream object to a raw ``CUstream`` int). Nothing here
touches the GPU at import time.
"""

from __future__ import annotations

import numpy as np

from .backend import ASSUMED_DEVICE, gpu_present, no_gpu_reason

__all__ = ["simulated", "device_facts", "current_device_id", "stream_handle", "supports_pdl",
           "SIMULATOR_FACTS", "assumed_device", "device_note"]

#: What :func:`device_facts` reports on the simulator: one multiprocessor, no compute capability.
SIMULATOR_FACTS = ("simulator", 1, (0, 0))

_facts = {}  # device id -> (name, multiprocessors, compute capability)


_SIMULATED = []  # [answer] once asked: Numba fixes it when it is first imported


def simulated() -> bool:
    """True when Numba runs CUDA kernels on its CPU simulator (``NUMBA_ENABLE_CUDASIM=1``, read
    by Numba when it is first imported, so the answer is kept: an import per call costs about a
    microsecond on the eager path)."""
    if _SIMULATED:
        return _SIMULATED[0]
    from numba import config

    _SIMULATED.append(bool(config.ENABLE_CUDASIM))
    return _SIMULATED[0]


def current_device_id() -> int:
    """The id of the current CUDA device (0 on the simulator)."""
    if simulated():
        return 0
    from numba import cuda

    return cuda.get_current_device().id


def device_facts() -> tuple:
    """``(name, multiprocessors, compute_capability)`` of the current device; on the simulator
    :data:`SIMULATOR_FACTS`; with no usable GPU (and no simulator) the device a plan assumes,
    :data:`~int4gemv.backend.ASSUMED_DEVICE` (see :func:`assumed_device`)."""
    if simulated():
        return SIMULATOR_FACTS
    if assumed_device():
        return ASSUMED_DEVICE
    from numba import cuda

    dev = cuda.get_current_device()
    facts = _facts.get(dev.id)
    if facts is None:
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        facts = _facts[dev.id] = (name, dev.MULTIPROCESSOR_COUNT, tuple(dev.compute_capability))
    return facts


def assumed_device() -> bool:
    """True when there is neither the simulator nor a usable GPU: plans are then made for
    :data:`~int4gemv.backend.ASSUMED_DEVICE` (launches refuse with ``NoGPUError``)."""
    return not simulated() and not gpu_present()


def device_note() -> str:
    """The device a plan was made for, one line: the current GPU, the simulator, or the assumed
    model and why it was assumed."""
    name, multiprocessors, cc = device_facts()
    if simulated():
        return "Numba CUDA simulator (1 multiprocessor assumed for the grid)"
    line = f"{name}, {multiprocessors} SMs, compute capability {cc[0]}.{cc[1]}"
    if assumed_device():
        line += f" (assumed: {no_gpu_reason()}; the grid is sized for this model)"
    return line


def supports_pdl() -> bool:
    """Programmatic dependent launch needs compute capability 9.0 (Hopper) or newer; the
    simulator runs every launch in order, so it accepts it."""
    return simulated() or device_facts()[2] >= (9, 0)


def stream_handle(stream) -> int:
    """The raw ``CUstream`` handle (0: the legacy default stream) of a supported stream.

    Accepted: ``None``; a non-negative int (a raw handle); an object with ``.cuda_stream``
    (``torch.cuda.Stream``, CuPy streams); an object with ``__cuda_stream__()`` (Numba and
    cuda.core streams); a stream of Numba's simulator (0). Anything else is a ``TypeError`` naming ``stream``.
    """
    if stream is None:
        return 0
    if isinstance(stream, (bool, np.bool_)):
        raise TypeError("stream must be None, a stream object or a raw CUstream int; got bool")
    if isinstance(stream, (int, np.integer)):
        if stream < 0:
            raise ValueError(f"stream handle must be non-negative; got {stream}")
        return int(stream)
    if type(stream).__module__.startswith("numba.cuda.simulator"):
        return 0  # the simulator's streams run every launch in order
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream, cupy.cuda.Stream
    if handle is None and hasattr(stream, "__cuda_stream__"):  # Numba and cuda.core streams
        try:
            handle = stream.__cuda_stream__()[1]
        except Exception as exc:
            raise TypeError(f"stream.__cuda_stream__() failed: {exc}") from None
    if isinstance(handle, (int, np.integer)) and not isinstance(handle, (bool, np.bool_)) \
            and handle >= 0:
        return int(handle)
    raise TypeError(f"stream must be None, a Numba/cuda.core stream, a torch/CuPy stream or a raw "
                    f"CUstream int; got {type(stream).__name__}")
