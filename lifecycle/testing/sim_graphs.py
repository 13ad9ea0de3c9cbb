"""Graphs and events of the simulated driver (a mixin of
:class:`~lifecycle.testing.sim_driver.SimDriver`, whose lock, tables and capture rules it uses)."""

from __future__ import annotations

from cuda.bindings.driver import CUresult as R

from .sim_objects import SimGraph

__all__ = ["SimGraphs"]


class SimGraphs:
    """Instantiate, launch and destroy graphs; create, record, wait on and destroy events."""

    # -- graphs ------------------------------------------------------------------------------
    def graph_instantiate(self, graph):
        self._unsafe("cuGraphInstantiate")
        with self._cv:
            if self._graphs.get(id(graph)) is not graph:
                self._fail("cuGraphInstantiate", R.CUDA_ERROR_INVALID_VALUE)
            if graph.ctx != self._thread_ctx():
                self._fail("cuGraphInstantiate", R.CUDA_ERROR_INVALID_CONTEXT)
            exe = SimGraph(graph.ctx, graph.ops)
            self._execs[id(exe)] = exe
        return exe

    def graph_launch(self, graph_exec, stream: int) -> None:
        with self._cv:
            if self._execs.get(id(graph_exec)) is not graph_exec:
                self._fail("cuGraphLaunch", R.CUDA_ERROR_INVALID_HANDLE)
            if graph_exec.ctx != self._thread_ctx():
                self._fail("cuGraphLaunch", R.CUDA_ERROR_INVALID_CONTEXT)
            self._enqueue("cuGraphLaunch", stream, graph_exec.ops)
            self.launches.append((id(graph_exec), self._device_of_ctx[graph_exec.ctx]))

    def graph_exec_destroy(self, graph_exec) -> None:
        with self._cv:
            if self._execs.pop(id(graph_exec), None) is not graph_exec:
                self._fail("cuGraphExecDestroy", R.CUDA_ERROR_INVALID_VALUE)

    def graph_destroy(self, graph) -> None:
        with self._cv:
            if self._graphs.pop(id(graph), None) is not graph:
                self._fail("cuGraphDestroy", R.CUDA_ERROR_INVALID_VALUE)

    # -- events --------------------------------------------------------------------------------
    def event_create(self) -> int:
        ctx = self._need_ctx("cuEventCreate")
        with self._cv:
            handle = next(self._ids)
            self._events[handle] = [ctx, None, 0]  # ctx, stream, target count
        return handle

    def _event(self, call, event):
        ev = self._events.get(int(event))
        if ev is None:
            self._fail(call, R.CUDA_ERROR_INVALID_HANDLE)
        return ev

    def event_record(self, event: int, stream: int) -> None:
        s = self._stream("cuEventRecord", stream)
        with self._cv:
            ev = self._event("cuEventRecord", event)
            if s.capture is not None:  # lifecycle never records events during capture
                self._fail("cuEventRecord", R.CUDA_ERROR_NOT_SUPPORTED)
            ev[1], ev[2] = s, s.enqueued

    def event_synchronize(self, event: int) -> None:
        with self._cv:
            _, s, target = self._event("cuEventSynchronize", event)
        self._unsafe("cuEventSynchronize")
        if s is not None:
            self._wait("cuEventSynchronize", s, target)

    def event_destroy(self, event: int) -> None:
        with self._cv:
            self._event("cuEventDestroy", event)
            del self._events[int(event)]
