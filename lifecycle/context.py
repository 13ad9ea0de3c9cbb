"""Making a provider's primary context current in the calling thread, and putting the caller's back.

Every provider operation runs inside :meth:`ContextBinding.current`: the provider's context is made
current (skipped when it already is), its device is checked, and the caller's previous context is
restored afterwards, so a thread working on device 0 can use a provider of device 1.
"""

from __future__ import annotations

import contextlib

from .driver import Driver
from .errors import DeviceMismatchError, attach_cleanup_errors

__all__ = ["ContextBinding"]


class ContextBinding:
    """The primary context ``ctx`` of ``device``, bound per call to the calling thread."""

    def __init__(self, driver: Driver, ctx: int, device: int):
        self._driver, self.ctx, self.device = driver, ctx, device

    def enter(self) -> int:
        """Make the context current and check its device; returns the caller's context."""
        prev = self._driver.ctx_get_current()
        if prev != self.ctx:
            self._driver.ctx_set_current(self.ctx)
        try:
            device = self._driver.ctx_get_device()
            if device != self.device:
                raise DeviceMismatchError(f"the provider's context runs on device {device}, "
                                          f"not device {self.device}")
        except BaseException as exc:
            self.restore(prev, exc)
            raise
        return prev

    def make_current(self) -> None:
        """Make the context current again without remembering the caller's (ending or discarding
        a capture whose body may have switched contexts; the capture restores the caller's)."""
        if self._driver.ctx_get_current() != self.ctx:
            self._driver.ctx_set_current(self.ctx)

    def restore(self, prev: int, error: BaseException | None) -> None:
        """Make ``prev`` current again. A failure is raised, or attached to ``error`` if given."""
        if prev == self.ctx:
            return
        try:
            self._driver.ctx_set_current(prev)
        except Exception as exc:
            if error is None:
                raise
            attach_cleanup_errors(error, [exc])

    @contextlib.contextmanager
    def current(self):
        prev = self.enter()
        try:
            yield
        except BaseException as exc:
            self.restore(prev, exc)
            raise
        self.restore(prev, None)
