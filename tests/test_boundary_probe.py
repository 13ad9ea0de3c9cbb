"""bench.boundary_probe (issue 21's boundary probe): every mode computes the chain bit for bit,
on the simulator at tiny shapes and on a GPU at the probe's own size, and a consumer polling its
input gives up and says so when the input never comes."""

import numpy as np
import pytest

from bench.boundary_probe import MODES, ProbeChain, reference
from int4gemv.device import simulated


def _run(chain, order=None):
    for n in order if order is not None else range(chain.kernels + 1):
        chain.issue(n)
    if not simulated():
        from numba import cuda
        cuda.synchronize()


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_matches_numpy_bit_for_bit(mode):
    big = not simulated()
    chain = ProbeChain(mode, kernels=16 if big else 3, blocks=512 if big else 4, loads=2,
                       K=2048 if big else 24)
    _run(chain)
    chain.check()
    chain.xs.copy_to_device(np.zeros(chain.xs.shape, np.float16))  # a rerun rewrites every row
    chain.xs[0].copy_to_device(chain.x0)
    _run(chain)
    chain.check()


def test_reference_is_the_recurrence():
    x0 = np.array([1.0, 2.0, 0.5, 4.0], np.float16)
    np.testing.assert_array_equal(reference(x0, 1), np.array([1.25, 0.5, 2.25, 0.75], np.float16))
    np.testing.assert_array_equal(reference(x0, 2), reference(reference(x0, 1), 1))


@pytest.mark.parametrize("mode", ["count", "words"])
def test_a_consumer_whose_input_never_comes_gives_up_and_counts_it(mode):
    """Kernel 1 launched without kernel 0 finds its input missing (sentinels / a zero count) for
    good, so it must give up rather than hang, and say so: the counter poll counts it, the words
    poll leaves the sentinels in what it computed (a few seconds of polls on a GPU). Kernel 0 is
    not launched at all: launched after kernel 1 it could still run beside it on a GPU (kernel 1
    allows the next grid at entry) and deliver the input."""
    chain = ProbeChain(mode, kernels=2, blocks=2, loads=0, K=16)
    _run(chain, order=[0, 2])
    with pytest.raises(AssertionError, match="gave up" if mode == "count" else "differ"):
        chain.check()
    if mode == "words":   # the consumer read the sentinels it gave up on: NaN, not stale values
        assert np.isnan(chain.xs.copy_to_host()[-1]).all()


def test_measure_checks_the_chains_own_output(monkeypatch):
    """``measure`` checks ``x_L`` after the chain's replays, not after the fill's (which leave
    the sentinels): run on the simulator with a stand-in timer that issues each graph once."""
    import sys

    import bench.boundary_probe as probe
    import bench.graph_timer as timer

    class Timed:
        us = p10_us = p90_us = 1.0

    def run_once(issue, stream, launches, replays):
        for n in range(launches):
            issue(n, 0)
        return Timed()

    monkeypatch.setattr(timer, "time_in_torch_graph", run_once)
    monkeypatch.setitem(sys.modules, "torch", _FakeTorch())
    monkeypatch.setattr(probe, "ProbeChain", lambda mode, **kw: ProbeChain(mode, **{**kw, "K": 24}))
    row = probe.measure("stream", kernels=3, blocks=4, loads=1, replays=10)
    assert row["checked"] and row["us"] == 4.0 / 3


class _FakeTorch:
    """The two torch calls :func:`bench.boundary_probe.measure` makes itself."""

    class cuda:
        Stream = staticmethod(lambda: None)
        synchronize = staticmethod(lambda: None)
