"""Issue 22, items 3 and 6: bad arguments are a TypeError/ValueError naming the argument, raised
before anything reaches the driver (checked by counting driver calls)."""

import numpy as np
import pytest

from lifecycle import GraphProvider, RealDriver, SimDriver

from payloads import capture_payload

BAD_STREAMS = [("abc", TypeError), (1.5, TypeError), (object(), TypeError), (b"1", TypeError),
               (-5, ValueError), (1 << 64, ValueError), (np.int64(-1), ValueError), (True, TypeError)]


def _calls(drv):
    return sum(drv.calls.values())


@pytest.mark.parametrize("stream, error", BAD_STREAMS, ids=lambda v: repr(v)[:20])
def test_a_bad_stream_is_named_before_any_driver_call(backend, stream, error):
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        before, ran = _calls(drv), []
        for op in (lambda: p.capture(1, stream=stream).__enter__(), lambda: p.begin_capture(1, stream=stream),
                   lambda: p.record(1, ran.append, stream=stream)):
            with pytest.raises(error, match="stream"):
                op()
        assert _calls(drv) == before and ran == [] and p.graph_ids() == ()
    backend.assert_clean(drv)


class _TorchLikeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


class _CudaCoreLikeStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.mark.parametrize("wrap", [np.uint64, _TorchLikeStream, _CudaCoreLikeStream],
                         ids=["numpy-int", "cuda_stream", "__cuda_stream__"])
def test_stream_objects_and_numpy_integers_are_accepted(backend, wrap):
    s, dst = backend.stream(), backend.zeros(8)
    with backend.provider() as p:
        capture_payload(p, 1, wrap(s), dst, 1.0)
        p.replay(1)
        p.synchronize(1)
        np.testing.assert_array_equal(backend.read(dst), np.ones(8))
    backend.assert_clean()


@pytest.mark.parametrize("warmup", ["no", None, 1, 0.0])
def test_record_warmup_must_be_a_bool(backend, warmup):
    s = backend.stream()
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        before, ran = _calls(drv), []
        with pytest.raises(TypeError, match="warmup must be a bool"):
            p.record(1, ran.append, stream=s, warmup=warmup)
        assert _calls(drv) == before and ran == [] and p.graph_ids() == ()
    backend.assert_clean(drv)


@pytest.mark.parametrize("nbytes, error", [(4.0, TypeError), ("4", TypeError), (True, TypeError),
                                           (0, ValueError), (-4, ValueError), (33, ValueError),
                                           (np.int32(64), ValueError)])
def test_copy_to_device_nbytes_is_checked_by_lifecycle_before_the_copy(backend, nbytes, error):
    """A copy past the end of the 32-byte source is refused by lifecycle itself (the driver would
    read memory the buffer does not own), and so is any nbytes that is not an int."""
    s, dst = backend.stream(), backend.zeros(64)
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        with pytest.raises(error, match="nbytes"):
            with p.capture(1, stream=s) as cap:
                src = cap.stage(np.ones(8, np.float32))
                before = drv.calls["memcpy_htod_async"]
                try:
                    cap.copy_to_device(dst, src, nbytes=nbytes)
                finally:
                    assert drv.calls["memcpy_htod_async"] == before, "the copy reached the driver"
        assert p.graph_ids() == () and p.counters.pinned_buffers == 0
    backend.assert_clean(drv)


def test_copy_to_device_refuses_a_destination_smaller_than_nbytes(backend):
    s, small = backend.stream(), backend.zeros(4)
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        with pytest.raises(ValueError, match="destination holds 16 bytes; the copy needs 32"):
            with p.capture(1, stream=s) as cap:
                cap.copy_to_device(small, cap.stage(np.ones(8, np.float32)))
        assert drv.calls["memcpy_htod_async"] == 0
        with p.capture(1, stream=s) as cap:  # a partial copy that fits is fine
            cap.copy_to_device(small, cap.stage(np.full(8, 3.0, np.float32)), nbytes=np.int64(16))
        p.replay(1)
        p.synchronize(1)
        np.testing.assert_array_equal(backend.read(small), np.full(4, 3.0))
    backend.assert_clean(drv)



@pytest.mark.parametrize("dst, error", [(-5, ValueError), (0, ValueError), (1 << 64, ValueError),
                                        (np.int64(-1), ValueError), (1.5, TypeError), ("x", TypeError),
                                        (True, TypeError), (np.zeros(8, np.float32), TypeError)],
                         ids=lambda v: repr(v)[:20])
def test_a_bad_copy_destination_is_named_before_the_copy(backend, dst, error):
    """``dst``: a device pointer in 1..2**64-1 or a CUDA array; anything else (a negative or null
    pointer, a host array) is refused naming ``dst`` before the copy reaches the driver."""
    s, good = backend.stream(), backend.zeros(8)
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        with pytest.raises(error, match="dst"):
            with p.capture(1, stream=s) as cap:
                src = cap.stage(np.ones(8, np.float32))
                with pytest.raises(TypeError, match="src"):
                    cap.copy_to_device(good, np.ones(8, np.float32))
                cap.copy_to_device(dst, src)
        assert drv.calls["memcpy_htod_async"] == 0, "the copy reached the driver"
        assert p.graph_ids() == () and p.counters.pinned_buffers == 0
    backend.assert_clean(drv)


@pytest.mark.parametrize("value", [np.float32(3.0), 3.0, np.array(7, np.int32)], ids=repr)
def test_stage_takes_a_scalar_as_one_element(backend, value):
    """``stage`` takes anything ``np.asarray`` takes with one element or more; a 0-d value (a
    position id, say) is staged as shape (1,), not refused with an error about a ``shape`` the
    caller never passed."""
    s, dst = backend.stream(), backend.zeros(1, np.asarray(value).dtype)
    with backend.provider() as p:
        with p.capture(1, stream=s) as cap:
            buf = cap.stage(value)
            assert buf.shape == (1,) and buf.array[0] == value
            cap.copy_to_device(dst, buf)
        p.replay(1)
        p.synchronize(1)
        np.testing.assert_array_equal(backend.read(dst), [value])
    backend.assert_clean()

@pytest.mark.parametrize("cls", [SimDriver, RealDriver])
def test_a_driver_class_instead_of_an_instance_is_named(cls):
    with pytest.raises(TypeError, match=rf"driver must be a Driver instance; got the class {cls.__name__} "
                                        rf"\(pass {cls.__name__}\(\)"):
        GraphProvider(cls)


def test_a_device_the_driver_does_not_have_is_named_before_its_context_is_retained():
    """The simulated driver has one device: ``device=1`` is a ValueError naming ``device`` and the
    count, not the driver's CUDA_ERROR_INVALID_DEVICE from retaining its context; nothing is held."""
    sim = SimDriver(timeout=5.0)
    count = sim.device_count()
    with pytest.raises(ValueError, match=rf"device must be < {count}, the number of devices the driver sees; "
                                         rf"got {count}"):
        GraphProvider(sim, device=count)
    assert not any(sim.live_resources().values()), sim.live_resources()
    with GraphProvider(sim, device=count - 1):
        pass
    sim.close()


class _Strided2D:
    """A 2-D (4, 8) float32 view of a device array, with explicit ``strides``."""

    def __init__(self, base, strides):
        self.base, cai = base, base.__cuda_array_interface__
        self.__cuda_array_interface__ = {"shape": (4, 8), "typestr": np.dtype(np.float32).str,
                                         "data": cai["data"], "strides": strides, "version": 3}


def test_copy_to_device_takes_a_c_contiguous_2d_destination_and_refuses_a_fortran_one(backend):
    """``dst`` may be any C-contiguous CUDA array: explicit strides are checked from the last
    dimension inwards, so a (4, 8) float32 array with strides (32, 4) is taken (the values land in
    order), and a Fortran-order one (strides (4, 16)) is a ValueError naming ``dst`` before the copy."""
    s, flat = backend.stream(), backend.zeros(32)
    drv = backend.instrumented()
    with backend.provider(drv) as p:
        with pytest.raises(ValueError, match="dst must be C-contiguous"):
            with p.capture(2, stream=s) as cap:
                cap.copy_to_device(_Strided2D(flat, (4, 16)), cap.stage(np.ones(32, np.float32)))
        assert drv.calls["memcpy_htod_async"] == 0, "the copy reached the driver"
        with p.capture(1, stream=s) as cap:
            cap.copy_to_device(_Strided2D(flat, (32, 4)), cap.stage(np.arange(32, dtype=np.float32)))
        p.replay(1)
        p.synchronize(1)
        np.testing.assert_array_equal(backend.read(flat), np.arange(32, dtype=np.float32))
    backend.assert_clean(drv)
