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

from .driver import CALLS, Driver
from .errors import DriverError

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
        fail: ``{method name: n}``; the n-th call of that method raises (once).
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
        for name, n in (fail or {}).items():
            self.fail(name, n)

    def fail(self, name: str, n: int = 1) -> None:
        """Make the ``n``-th call (counting from now on, 1-based) of method ``name`` fail."""
        if name not in CALLS:
            raise ValueError(f"unknown driver method {name!r}; choose from {sorted(CALLS)}")
        with self._lock:
            self._fail[name] = self.calls[name] + int(n)

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
                inject = self._fail.get(name) == n
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
