"""A caller on device 0 using a provider that owns device 1 (simulated: always; real: 2 GPUs)."""

import gc
import threading

import numpy as np
import pytest

from lifecycle import DeviceMismatchError, GraphProvider, UnclosedProviderWarning
from lifecycle.testing import SimDriver

from payloads import capture_payload


def test_every_replay_runs_on_the_providers_device(two_devices):
    b = two_devices
    s1, dst1 = b.stream(device=1), b.zeros(32, device=1)
    s0, dst0 = b.stream(device=0), b.zeros(32, device=0)
    caller_ctx = b.base.ctx_get_current()
    assert b.base.ctx_get_device() == 0
    with b.provider(device=1) as p1, b.provider(device=0) as p0:
        ref1 = capture_payload(p1, 7, s1, dst1, 1.0)
        ref0 = capture_payload(p0, 7, s0, dst0, 0.5)  # same id, other provider: independent
        assert b.base.ctx_get_current() == caller_ctx, "the caller's context is restored"

        def replay_from(thread_device):
            with b.on(thread_device):
                for _ in range(3):
                    p1.replay(7)
                assert b.base.ctx_get_device() == thread_device

        replay_from(0)
        t = threading.Thread(target=replay_from, args=(0,))
        t.start()
        t.join(20)
        p1.synchronize(7)
        np.testing.assert_array_equal(b.read(dst1, device=1), np.full(32, 1.0))
        if isinstance(b.base, SimDriver):
            devices = {device for _, device in b.base.launches}
            assert devices == {1}, "a graph of device 1 ran elsewhere"

        p1.release(7)  # frees only p1's buffer
        gc.collect()
        assert ref1() is None and ref0() is not None and not ref0().freed
        p0.replay(7)
        p0.synchronize(7)
        np.testing.assert_array_equal(b.read(dst0, device=0), np.full(32, 0.5))
    b.assert_clean()


def test_a_stream_of_another_device_is_refused(two_devices):
    b = two_devices
    s0 = b.stream(device=0)
    with b.provider(device=1) as p1:
        with pytest.raises(DeviceMismatchError, match="another context"):
            with p1.capture(7, stream=s0):
                pass
        assert p1.graph_ids() == () and p1.counters.capturing == 0
    b.assert_clean()


class _WrongDeviceSim(SimDriver):
    """A driver whose context reports another device: the provider must notice."""

    def ctx_get_device(self) -> int:
        return 0


def test_a_context_that_runs_on_another_device_is_refused():
    sim = _WrongDeviceSim(devices=2)
    try:
        p = GraphProvider(sim, device=1)
        with pytest.raises(DeviceMismatchError, match="device 0, not device 1"):
            _ = p.stream  # any operation: the provider's stream is created in its context
        with pytest.raises(DeviceMismatchError):
            with p.capture(7, stream=None):
                pass
        assert sim.ctx_get_current() == 0, "the caller's context is restored after the refusal"
        assert p.graph_ids() == () and sim.live_resources().keys() <= {"ctx_retains"}
        with pytest.raises(DeviceMismatchError):   # close() runs in the context too
            p.close()
        with pytest.warns(UnclosedProviderWarning):   # so only its finalizer can release it
            del p
            gc.collect()
    finally:
        sim.close()
