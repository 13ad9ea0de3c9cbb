"""Timing int4gemv: a small library that ships with the package (``bench/`` in a checkout holds
the suites and the ``python -m bench`` command built on it).

One call for notebooks::

    from int4gemv.benchmark import time_gemv, compare, random_weight
    print(time_gemv(random_weight(2048, 2048), tuning="auto"))       # µs, GB/s, % of copy
    print(compare(["q_proj", "lm_head"], tunings=["default", "auto"], peers=["tinygemm"]))

Modules (one concept each; importing any of them touches no GPU):

* :mod:`~int4gemv.benchmark.selection`   tunings → int4gemv keyword arguments (the one adapter)
* :mod:`~int4gemv.benchmark.timing`      event-timed graph replays, eager calls, copy bandwidth
* :mod:`~int4gemv.benchmark.weights`     random weights, L2 rotation, byte counts, reference
* :mod:`~int4gemv.benchmark.gemv_timing` :class:`GemvBench`, :func:`time_gemv`
* :mod:`~int4gemv.benchmark.timing_row`  :class:`GemvTiming`: one measured row
* :mod:`~int4gemv.benchmark.comparison`  :func:`compare`
* :mod:`~int4gemv.benchmark.table`       :class:`Comparison`: the printable table and its chart
* :mod:`~int4gemv.benchmark.peers`       torch tinygemm, torch.mv, dequant+mv, gemlite (``int4gemv[peers]``)
* :mod:`~int4gemv.benchmark.stream`      the ``stream`` peer: the floor (a read-only stream of the weight's bytes)
* :mod:`~int4gemv.benchmark.workloads`   the decode-step workloads installed as package data

On Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) everything runs at tiny shapes, checks
results and times nothing (results say ``simulated``).
"""

import importlib

__all__ = [
    "Comparison", "GemvBench", "GemvTiming", "PEERS", "Timing", "EagerTiming",
    "compare", "copy_bandwidth", "gemv_options", "load_workload", "measure_replays",
    "random_weight", "time_eager", "time_gemv", "tuning_label",
]

_HOME = {
    "Comparison": "table", "compare": "comparison",
    "GemvBench": "gemv_timing", "GemvTiming": "timing_row", "time_gemv": "gemv_timing",
    "PEERS": "peers",
    "Timing": "timing", "EagerTiming": "timing", "copy_bandwidth": "timing",
    "measure_replays": "timing", "time_eager": "timing",
    "gemv_options": "selection", "tuning_label": "selection",
    "load_workload": "workloads", "random_weight": "weights",
}


def __getattr__(name):
    if name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'int4gemv.benchmark' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
