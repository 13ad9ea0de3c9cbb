"""Numba specifics: hold deferred deallocations during capture, launch on the capture stream.

Numba frees device memory lazily; a flush (``cuMemFree``, a potentially unsafe call) in the
capturing thread would invalidate the capture, so :func:`hold_deallocations` is held for the whole
capture (``numba_provider`` wires it in). Kernels must be compiled and loaded before capture
(``GraphProvider.record(..., warmup=True)``), and only device arrays may be passed inside a
capture: a host array would be copied (allocation plus a synchronous copy).

Numba is imported on first use, never at import time.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hold_deallocations", "external_stream", "check_device_args", "launch", "numba_provider"]


def hold_deallocations():
    """``numba.cuda.defer_cleanup()`` for the current context (a no-op in the simulator).

    Use as ``GraphProvider(capture_guard=hold_deallocations)``; the provider enters it after making
    its context current, so Numba binds it to the provider's device.
    """
    from numba import cuda
    return cuda.defer_cleanup()


def external_stream(stream):
    """A Numba stream for a raw ``CUstream`` handle (e.g. ``capture.stream``)."""
    from numba import cuda
    handle = getattr(stream, "stream", stream)
    return cuda.external_stream(int(handle))


def check_device_args(args) -> None:
    """Raise ``TypeError`` for any numpy array in ``args`` (only device arrays inside a capture)."""
    for i, arg in enumerate(args):
        if isinstance(arg, np.ndarray) and arg.ndim > 0:
            raise TypeError(f"argument {i} is a host numpy array; inside a capture pass device arrays "
                            "only (a host array is copied with an allocation and a synchronizing copy)")


def launch(kernel, griddim, blockdim, stream, *args) -> None:
    """``kernel[griddim, blockdim, stream](*args)`` after :func:`check_device_args`.

    ``stream`` is a raw handle, a :class:`~lifecycle.capture.Capture`, or a Numba stream.
    """
    check_device_args(args)
    if not hasattr(stream, "synchronize"):  # not already a Numba stream
        stream = external_stream(stream)
    kernel[griddim, blockdim, stream](*args)


def numba_provider(device: int = 0, **kwargs):
    """A :class:`~lifecycle.provider.GraphProvider` on the real driver for Numba work on ``device``.

    Holds Numba's deferred deallocations during every capture; other keyword arguments go to
    ``GraphProvider``.
    """
    from .provider import GraphProvider
    from .real_driver import RealDriver
    kwargs.setdefault("capture_guard", hold_deallocations)
    return GraphProvider(kwargs.pop("driver", None) or RealDriver(), device=device, **kwargs)
