"""Pinned host staging buffers: page-locked memory with a numpy view, tagged with a graph id.

A graph's captured host-to-device copy reads its pinned source *at every replay*, so the buffer
must live exactly as long as the graph: the provider retains it and frees it in
``release(graph_id)`` after the graph's stream is idle. Nothing here frees memory implicitly.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .driver import CaptureMode, Driver
from .errors import LifecycleError, attach_cleanup_errors

__all__ = ["PinnedBuffer", "relaxed_capture_mode"]


@contextlib.contextmanager
def relaxed_capture_mode(driver: Driver):
    """Put the calling thread in ``CU_STREAM_CAPTURE_MODE_RELAXED`` for the block.

    ``cuMemHostAlloc``/``cuMemFreeHost`` are *potentially unsafe* calls: made from a thread that
    is capturing in thread-local mode they fail and invalidate the capture. They touch no stream,
    so relaxing the thread around them is safe. The previous mode is restored.
    """
    previous = driver.exchange_capture_mode(CaptureMode.RELAXED)
    try:
        yield
    except BaseException as exc:
        try:
            _restore_mode(driver, previous)
        except Exception as cleanup:
            attach_cleanup_errors(exc, [cleanup])
        raise
    _restore_mode(driver, previous)


def _restore_mode(driver, previous):
    """Restore the thread's mode; on failure retry once (so the thread is not left relaxed) and
    raise the first error either way."""
    try:
        driver.exchange_capture_mode(previous)
    except Exception as first:
        try:
            driver.exchange_capture_mode(previous)
        except Exception as second:
            attach_cleanup_errors(first, [second])
        raise first


class _HostMemory:
    """What a view's ``.base`` points at: keeps the :class:`PinnedBuffer` referenced."""
    __slots__ = ("owner", "__array_interface__")

    def __init__(self, owner, ptr, shape, dtype):
        self.owner = owner
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (ptr, False),
                                    "strides": None, "version": 3}


class PinnedBuffer:
    """Page-locked host memory of ``shape``/``dtype``, owned by a provider for ``graph_id``.

    ``array`` returns a numpy view (each call a new view whose ``base`` keeps this object alive).

    Warning:
        The memory is freed when the graph is released, whether or not views still exist; a view
        used after ``release(graph_id)`` reads freed memory. Keep views short-lived and write into
        the buffer between replays only after the previous replay finished
        (``provider.synchronize(graph_id)``).
    """

    __slots__ = ("_driver", "_ptr", "nbytes", "shape", "dtype", "graph_id", "owner", "__weakref__")

    def __init__(self, driver: Driver, graph_id: int, shape, dtype, *, owner: object = None):
        """Describe the buffer; :meth:`allocate` then allocates it (so an owner can register the
        buffer first and never lose an allocation whose surrounding steps fail).

        ``owner`` is the token of the provider that owns the buffer: only it may read the buffer
        in its captures and free it. A buffer made outside any provider has no owner (``None``)
        and is freed with a plain ``free()``.
        """
        try:
            self.dtype = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"dtype must be a numpy dtype; got {dtype!r}") from exc
        if self.dtype.hasobject or self.dtype.itemsize == 0:
            raise TypeError(f"dtype must be a fixed-size dtype without Python objects; got {self.dtype}")
        try:
            dims = np.atleast_1d(np.asarray(shape))
            if dims.ndim != 1 or dims.dtype.kind not in "iu":
                raise TypeError
        except (TypeError, ValueError):
            raise TypeError(f"shape must be an int or a sequence of ints; got {shape!r}") from None
        self.shape = tuple(int(n) for n in dims)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        if min(self.shape) <= 0:
            raise ValueError(f"shape must be positive in every dimension; got {self.shape}")
        self.graph_id = graph_id
        self.owner = owner
        self._driver = driver
        self._ptr = 0

    def allocate(self, *, relaxed: bool) -> "PinnedBuffer":
        """Allocate the page-locked memory; ``relaxed`` when the calling thread may be capturing."""
        if self._ptr:
            raise LifecycleError("pinned buffer is already allocated")
        if relaxed:
            with relaxed_capture_mode(self._driver):
                self._ptr = self._driver.mem_host_alloc(self.nbytes)
        else:
            self._ptr = self._driver.mem_host_alloc(self.nbytes)
        return self

    @property
    def ptr(self) -> int:
        """The host address (0 once freed)."""
        return self._ptr

    @property
    def freed(self) -> bool:
        """``True`` once freed (or if never allocated): the buffer holds no memory."""
        return self._ptr == 0

    @property
    def array(self) -> np.ndarray:
        """A numpy view of the pinned memory. Raises once the buffer was freed."""
        if self._ptr == 0:
            raise LifecycleError(f"pinned buffer of graph {self.graph_id} was freed when the graph was released "
                                 "(or never allocated)")
        return np.asarray(_HostMemory(self, self._ptr, self.shape, self.dtype))

    def free(self, owner: object = None) -> None:
        """Free the memory now (the provider calls this after the graph's stream is idle).

        ``owner`` must be the token of the owning provider: a buffer is never freed by another
        provider (:class:`~lifecycle.errors.LifecycleError`, nothing freed). Idempotent; on
        failure the buffer stays allocated and a later call retries.
        """
        if owner is not self.owner:
            raise LifecycleError(f"pinned buffer of graph {self.graph_id} belongs to another provider; "
                                 "only its own provider frees it")
        if self._ptr == 0:
            return
        self._driver.mem_free_host(self._ptr)
        self._ptr = 0

    def __repr__(self) -> str:
        state = "freed" if self._ptr == 0 else f"at {self._ptr:#x}"
        return f"PinnedBuffer(graph {self.graph_id}, {self.shape} {self.dtype}, {state})"
