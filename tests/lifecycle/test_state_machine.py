"""Random single-threaded operation sequences agree with a dictionary model of the provider."""

from contextlib import nullcontext

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from lifecycle import GraphStateError, UnknownGraphError

IDS = st.integers(0, 4)
VALUES = st.floats(-1e3, 1e3, allow_nan=False, width=32)


class Boom(Exception):
    pass


def _machine(backend):
    stream = backend.stream()
    slots = [backend.zeros(8) for _ in range(5)]

    class ProviderModel(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.p = backend.provider()
            self.model: dict[int, float] = {}

        @rule(gid=IDS, value=VALUES, fail=st.booleans())
        def capture(self, gid, value, fail):
            exists = gid in self.model
            with pytest.raises(GraphStateError if exists else Boom) if (exists or fail) else nullcontext():
                with self.p.capture(gid, stream=stream) as cap:
                    cap.copy_to_device(slots[gid], cap.stage(np.full(8, value, np.float32)))
                    if fail:
                        raise Boom
            if not (exists or fail):
                self.model[gid] = value

        @rule(gid=IDS)
        def replay(self, gid):
            if gid not in self.model:
                with pytest.raises(UnknownGraphError):
                    self.p.replay(gid)
                return
            self.p.replay(gid)
            self.p.synchronize(gid)
            np.testing.assert_array_equal(backend.read(slots[gid]), np.full(8, self.model[gid], np.float32))

        @rule(gid=IDS, value=VALUES)
        def update_input(self, gid, value):
            if gid in self.model:
                self.p.synchronize(gid)
                self.p.buffers(gid)[0].array[:] = value
                self.model[gid] = value

        @rule(gid=IDS)
        def release(self, gid):
            if gid not in self.model:
                with pytest.raises(UnknownGraphError):
                    self.p.release(gid)
                return
            self.p.release(gid)
            del self.model[gid]

        @invariant()
        def counters_match_the_model(self):
            c = self.p.counters
            assert self.p.graph_ids() == tuple(sorted(self.model))
            assert (c.graphs_alive, c.capturing, c.pinned_bytes, c.pending_cleanup) == \
                (len(self.model), 0, 32 * len(self.model), 0)

        def teardown(self):
            self.p.close()
            backend.assert_clean()

    return ProviderModel


def test_random_operation_sequences_match_the_model(backend):
    run_state_machine_as_test(
        _machine(backend),
        settings=settings(max_examples=25, stateful_step_count=30, deadline=None, derandomize=True,
                          suppress_health_check=list(HealthCheck), database=None))
