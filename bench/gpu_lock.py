"""One GPU shared by several benchmark processes that compile in parallel: ``--gpu-lock FILE``.

Numba compiles each tensor-core specialization in 5-10 s of one CPU core, so a probe run with
many configurations is bound by compilation. Several ``bench.targets`` processes (disjoint
rows, each its own ``--out``) may run at once with the same lock file: each holds the lock
(``fcntl.flock``, exclusive) for all its GPU work — weight generation, floors, correctness
launches, timed graph replays — and releases it only while compiling (:func:`compiling`), so the
compilations overlap and no two processes' GPU work does. Without a lock file every call is a
no-op. The lock is released when the process exits.
"""

from __future__ import annotations

import contextlib
import fcntl

__all__ = ["acquire", "compiling", "configure"]

_state = {"file": None, "held": False}


def configure(path) -> None:
    """Use the lock file ``path`` (``None``: no lock); a lock held before is released, the new
    one is not taken yet."""
    if _state["file"] is not None:
        _state["file"].close()          # closing the file releases its lock
    _state["file"] = open(path, "a") if path else None   # noqa: SIM115 - held for the process
    _state["held"] = False


def acquire() -> None:
    """Take the lock (blocking) if a lock file is configured and it is not held."""
    if _state["file"] is not None and not _state["held"]:
        fcntl.flock(_state["file"], fcntl.LOCK_EX)
        _state["held"] = True


@contextlib.contextmanager
def compiling():
    """Release the lock (if held) for the body: CPU-only work such as a kernel compilation."""
    held = _state["held"]
    if held:
        fcntl.flock(_state["file"], fcntl.LOCK_UN)
        _state["held"] = False
    try:
        yield
    finally:
        if held:
            acquire()
