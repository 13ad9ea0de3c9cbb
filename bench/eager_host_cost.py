"""The Python cost of a cached ``gemv`` call, without a GPU: the launch replaced by a no-op.

    NUMBA_ENABLE_CUDASIM=1 python -m bench.eager_host_cost [--calls 2000] [--repeats 40]

What the eager path costs above ``prepare()`` (one bound launch) is pure Python: the environment
read, the array keys, the cache lookup. This measures it on any machine: a cached call's bound
launch is swapped for a no-op, and the arrays are torch-like stand-ins (:class:`Tensor`, a class
of a module named ``torch_standin`` read like a torch tensor; its attributes are Python-level,
torch's are C getters). Printed: µs per call for each call form and for the ``prepare()``-like
floor (the no-op launch with its stream handle), minimum over ``repeats`` runs of ``calls``
calls. Use it to compare checkouts (run the file with ``PYTHONPATH`` set to each); the H200
numbers come from :mod:`bench.eager_latency`.
"""

from __future__ import annotations

import argparse
import sys
import timeit
import types

import numpy as np

__all__ = ["main", "measure"]


def _standin_module():
    """A module ``torch_standin`` with a torch-like ``Tensor`` over a host array."""
    mod = types.ModuleType("torch_standin")

    class Device:
        __slots__ = ("type", "index")

        def __init__(self):
            self.type, self.index = "cuda", 0

        def __eq__(self, other):
            return isinstance(other, Device) and (other.type, other.index) == (self.type, self.index)

        def __hash__(self):
            return hash((self.type, self.index))

    class Tensor:
        def __init__(self, host):
            self._host, self._ptr = host, host.ctypes.data
            self.dtype, self.is_cuda = "torch.float16", True
            self._shape, self._stride = host.shape, tuple(s // host.itemsize for s in host.strides)

        shape = property(lambda self: tuple(self._shape))
        device = property(lambda self: Device())

        def data_ptr(self):
            return self._ptr

        def stride(self):
            return self._stride

        def is_contiguous(self):
            return self._host.flags.c_contiguous

        def element_size(self):
            return self._host.itemsize

    Tensor.__module__ = Device.__module__ = mod.__name__
    mod.Tensor = Tensor
    sys.modules[mod.__name__] = mod
    return mod


class _NoLaunch:
    def launch(self, stream_handle=0):
        pass


def measure(calls=2000, repeats=40) -> dict:
    """``{call form: µs per call}`` with the launch a no-op (see the module docstring).

    Simulator only: the first call of each form runs for real, and the stand-in tensors are host
    memory, which a GPU kernel cannot read (on a GPU it would fault and poison the context).
    Raises ``RuntimeError`` when Numba's simulator is not in use."""
    import int4gemv as ig
    from int4gemv import pipeline
    from int4gemv.device import simulated, stream_handle

    if not simulated():
        raise RuntimeError("bench.eager_host_cost runs on Numba's simulator only (its tensors are "
                           "host memory): set NUMBA_ENABLE_CUDASIM=1; on a GPU use bench.eager_latency")

    torch_standin = _standin_module()
    rng = np.random.default_rng(0)
    w = ig.quantize(rng.standard_normal((8, 64)).astype(np.float32), 32)
    a = torch_standin.Tensor(rng.standard_normal(64).astype(np.float16))
    out = torch_standin.Tensor(np.zeros(8, np.float16))
    tuning = ig.Tuning("default")
    forms = {"gemv(tuning=None)": {}, 'gemv(variant="default")': {"variant": "default"},
             "gemv(tuning=Tuning(...))": {"tuning": tuning}}
    for kwargs in forms.values():
        ig.gemv(a, w, out=out, **kwargs)  # plan, bind and cache (on the simulator: runs it)
    for key, entry in list(pipeline.LAUNCHES.items()):
        pipeline.LAUNCHES[key] = (_NoLaunch().launch,) + tuple(entry[1:])
    noop = _NoLaunch()

    def prepared():  # what PreparedGemv.__call__ does around its launch
        noop.launch(stream_handle(None))
        return out

    paths = {"prepare()-like floor": prepared}
    paths.update({name: (lambda kw=kw: ig.gemv(a, w, out=out, **kw)) for name, kw in forms.items()})
    best = {name: float("inf") for name in paths}
    try:
        for _ in range(repeats):
            for name, fn in paths.items():
                best[name] = min(best[name], timeit.timeit(fn, number=calls) / calls * 1e6)
    finally:
        pipeline.clear_caches()  # no no-op launch stays behind
    return best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=40)
    args = p.parse_args(argv)
    best = measure(args.calls, args.repeats)
    floor = best["prepare()-like floor"]
    for name, us in best.items():
        print(f"{name:28} {us:6.2f} us   over the floor {us - floor:+6.2f}")


if __name__ == "__main__":
    main()
