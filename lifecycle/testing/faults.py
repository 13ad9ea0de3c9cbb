"""Fault injection and resource accounting around any :class:`~lifecycle.driver.Driver`.

``FaultInjectingDriver(inner, fail={"stream_end_capture": 2})`` forwards every call to ``inner``
except the 2nd ``stream_end_capture``, which raises an injected
:class:`~lifecycle.errors.DriverError` *without* calling ``inner`` (as if the driver had refused).
It also counts calls (:attr:`calls`, :attr:`log`) and tracks the resources created through it
(:meth:`live_resources`), so one leak check works on the simulated and the real driver alike.
"""

from __future__ import annotations

import collections
import threading
import weakref

from cuda.bindings.driver import CUresult

from ..driver import CALLS, Driver
from ..errors import DriverError

__all__ = ["FaultInjectingDriver"]

# Driver method -> the kind of resource it creates or destroys.
_CREATES = {"stream_create": "streams", "stream_end_capture": "graphs", "graph_instantiate": "execs",
            "event_create": "events", "mem_host_alloc": "pinned", "primary_ctx_retain": "ctx_retains"}
_DESTROYS = {"stream_destroy": "streams", "graph_destroy": "graphs", "graph_exec_destroy": "execs",
             "event_destroy": "events", "mem_free_host": "pinned", "primary_ctx_release": "ctx_retains"}


class FaultInjectingDriver:
    """Wraps ``inner``; fails the Nth call of chosen driver methods (1-based, counted per method).

    Args:
        inner: the driver to forward to.
        fail: ``{method name: n}``; the n-th call of that method raises (once). See also
            :meth:`rotate` (a fault at every method in turn) and :meth:`stop`.
        code: the ``CUresult`` the injected errors carry.
    """

    def __init__(self, inner: Driver, fail: dict[str, int] | None = None, *,
                 code: int = int(CUresult.CUDA_ERROR_UNKNOWN)):
        self.inner = inner
        self.code = int(code)
        self._lock = threading.Lock()
        self._fail = {}
        self.calls: collections.Counter[str] = collections.Counter()
        #: ``(method, n)`` for every call, in order.
        self.log: list[tuple[str, int]] = []
        #: every error this wrapper injected, in order.
        self.injected: list[DriverError] = []
        self._live: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self._host_funcs: "weakref.WeakSet" = weakref.WeakSet()
        self._rotation: list[str] | None = None
        self._turn = self._waited = self._gap = 0
        self._patience = 50
        for name, n in (fail or {}).items():
            self.fail(name, n)

    def fail(self, name: str, n: int = 1) -> None:
        """Make the ``n``-th call (counting from now on, 1-based) of method ``name`` fail."""
        if name not in CALLS:
            raise ValueError(f"unknown driver method {name!r}; choose from {sorted(CALLS)}")
        with self._lock:
            self._fail[name] = self.calls[name] + int(n)

    def rotate(self, names=None, *, gap: int = 0, patience: int = 50) -> None:
        """Inject faults at every driver method in turn, until :meth:`stop`: after ``gap`` calls,
        the next call of ``names[0]`` fails, after ``gap`` more the next call of ``names[1]``, and
        so on, cycling. A method not called within ``patience`` calls (of any method) after its
        turn began is passed over (it comes round again). ``names`` defaults to every method but
        ``init``."""
        names = [n for n in CALLS if n != "init"] if names is None else list(names)
        unknown = [n for n in names if n not in CALLS]
        if unknown or not names:
            raise ValueError(f"rotate needs driver method names from {sorted(CALLS)}; got {names!r}")
        with self._lock:
            self._rotation, self._turn, self._waited = names, 0, 0
            self._gap, self._patience = int(gap), int(patience)

    def stop(self) -> None:
        """Stop injecting (scheduled single failures and the rotation)."""
        with self._lock:
            self._fail.clear()
            self._rotation = None

    def _rotating(self, name: str) -> bool:
        """Under the lock: whether this call of ``name`` is the rotation's turn to fail."""
        rotation = self._rotation
        if not rotation:
            return False
        if self._waited < 0:  # still in the gap after the last fault
            self._waited += 1
            return False
        if rotation[self._turn] == name:
            self._turn = (self._turn + 1) % len(rotation)
            self._waited = -self._gap
            return True
        self._waited += 1
        if self._waited > self._patience:
            self._turn = (self._turn + 1) % len(rotation)
            self._waited = 0
        return False

    def live_resources(self) -> dict[str, int]:
        """Resources created through this wrapper and not yet destroyed (zeros omitted)."""
        with self._lock:
            counts = {kind: sum(c.values()) for kind, c in self._live.items()}
        counts["host_funcs"] = len(self._host_funcs)
        return {k: v for k, v in counts.items() if v}

    def __getattr__(self, name):
        if name not in CALLS:
            return getattr(self.inner, name)
        target = getattr(self.inner, name)

        def call(*args):
            with self._lock:
                self.calls[name] += 1
                n = self.calls[name]
                self.log.append((name, n))
                inject = self._fail.get(name) == n or self._rotating(name)
            if inject:
                err = DriverError(CALLS[name], self.code, CUresult(self.code).name, injected=True)
                with self._lock:
                    self.injected.append(err)
                raise err
            result = target(*args)
            self._account(name, args, result)
            return result

        call.__name__ = name
        return call

    def _account(self, name, args, result):
        with self._lock:
            if name in _CREATES:
                key = _key(args[0] if name == "primary_ctx_retain" else result)
                self._live[_CREATES[name]][key] += 1
            elif name in _DESTROYS:
                counter = self._live[_DESTROYS[name]]
                key = _key(args[0])
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]
            elif name == "launch_host_func":
                self._host_funcs.add(result)


def _key(handle):
    try:
        return ("int", int(handle))
    except TypeError:
        return ("obj", id(handle))
