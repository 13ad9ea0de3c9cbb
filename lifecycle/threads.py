"""Which thread is calling: an identity that no later thread can share.

``threading.get_ident()`` values are reused: once a thread exits, the next thread may get its
number (on Linux the pthread id of the next thread is often the same). Remembering the thread that
began a capture, holds a stream claim or owns a per-thread default stream by that number would
then take a later, unrelated thread for it, and let it end, close or wait on what it never began
(CUDA itself refuses: its per-thread state does not carry over to a new thread).

:func:`current` returns the calling thread's :class:`ThreadId`, made on its first call in that
thread and kept in thread-local storage, which no other thread ever sees: two threads, even with
the same ident, never get the same object. It prints as the ident, so messages read as before.
"""

from __future__ import annotations

import threading
import weakref

__all__ = ["ThreadId", "current"]

_local = threading.local()


class ThreadId:
    """One thread's identity for its whole life: compared by identity, hashable, printed as its
    ``ident``. ``name`` is the thread's name when the id was made; :meth:`alive` says whether the
    thread is still running (a thread that has exited can never be ``current()`` again)."""

    __slots__ = ("ident", "name", "_thread", "__weakref__")

    def __init__(self) -> None:
        thread = threading.current_thread()
        self.ident, self.name = threading.get_ident(), thread.name
        self._thread = weakref.ref(thread)

    def alive(self) -> bool:
        thread = self._thread()
        return thread is not None and thread.is_alive()

    def __repr__(self) -> str:
        return str(self.ident)


def current() -> ThreadId:
    """The calling thread's :class:`ThreadId` (the same object on every call in this thread)."""
    me = getattr(_local, "id", None)
    if me is None:
        me = _local.id = ThreadId()
    return me
