"""The ``cuLaunchKernelEx`` configuration of a bound launch (pure ctypes: no GPU needed)."""

import ctypes
import threading

import pytest

from int4gemv import launcher
from int4gemv.launcher import MAX_STREAMS, BoundLaunch, launch_config


def test_a_plain_launch_has_no_attributes():
    config, attributes = launch_config((4, 1, 1), (128, 1, 1), 64)
    assert list(config.grid) == [4, 1, 1] and list(config.block) == [128, 1, 1]
    assert config.sharedMemBytes == 64 and config.numAttrs == 0 and len(attributes) == 0
    assert not config.attrs  # NULL


def _bound(grid=(7, 1, 1), block=(64, 1, 1), shared=0, programmatic=True):
    """A BoundLaunch without a GPU: a parameter block of two values and a recording driver call."""
    b = object.__new__(BoundLaunch)
    b._values = [ctypes.c_int64(5), ctypes.c_int64(6)]
    b._params = (ctypes.c_void_p * 2)(*[ctypes.addressof(v) for v in b._values])
    b._geometry = (grid, block, shared, programmatic, False)
    b._function = ctypes.c_void_p(0xF00)
    b._by_stream = {}
    seen = []

    def call(config_ref, function, params, extra):
        config = config_ref._obj
        seen.append((config.hStream, list(config.grid), list(config.block), config.sharedMemBytes,
                     config.numAttrs, function.value, params.value, extra))
        return 0
    b._call = call
    return b, seen


def test_each_stream_gets_its_own_configuration_with_that_stream():
    b, seen = _bound()
    for handle in (0, 0x1234, 0, 0x5678, 0x1234):
        b.launch(handle)
    params = ctypes.addressof(b._params)
    assert seen == [(None if h == 0 else h, [7, 1, 1], [64, 1, 1], 0, 1, 0xF00, params, None)
                    for h in (0, 0x1234, 0, 0x5678, 0x1234)]
    configs = {h: b._by_stream[h][0]._obj for h in (0, 0x1234, 0x5678)}
    assert len({id(c) for c in configs.values()}) == 3, "streams share a configuration"


def test_threads_launching_one_binding_on_their_own_streams_each_get_their_stream():
    b, _ = _bound()
    handles = [0x1000 * (i + 1) for i in range(8)]
    mine, seen = threading.local(), []

    def call(config_ref, function, params, extra):  # other threads launch while this one waits
        before = config_ref._obj.hStream
        threading.Event().wait(0.001)
        seen.append((mine.handle, before, config_ref._obj.hStream))
        return 0
    b._call = call

    def launches(handle):
        mine.handle = handle
        for _ in range(20):
            b.launch(handle)
    threads = [threading.Thread(target=launches, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 160 and all(h == before == after for h, before, after in seen), \
        "a launch went to another thread's stream"


def test_streams_past_the_limit_start_afresh_and_launch_on_the_right_stream():
    b, seen = _bound()
    for handle in range(1, MAX_STREAMS + 3):
        b.launch(handle)
    assert [s[0] for s in seen] == list(range(1, MAX_STREAMS + 3))
    assert len(b._by_stream) <= MAX_STREAMS


def test_a_failed_launch_names_the_call(monkeypatch):
    b, _ = _bound()
    b._call = lambda *args: 1  # CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(launcher, "_error_name", lambda code: f"code {code}")
    with pytest.raises(launcher.CudaCallError, match="cuLaunchKernelEx failed: 'code 1'"):
        b.launch(0)


@pytest.mark.parametrize("programmatic, cooperative, ids", [(True, False, [6]), (False, True, [2]),
                                                            (True, True, [6, 2])])
def test_each_attribute_asked_for_is_set_once(programmatic, cooperative, ids):
    # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6, CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
    config, attributes = launch_config((528, 1, 1), (128, 2, 1), 1024, programmatic, cooperative)
    assert list(config.grid) == [528, 1, 1] and list(config.block) == [128, 2, 1]
    assert config.sharedMemBytes == 1024 and config.hStream is None
    assert config.numAttrs == len(ids) == len(attributes)
    assert [config.attrs[i].id for i in range(len(ids))] == ids          # through the pointer
    assert [config.attrs[i].value[0] for i in range(len(ids))] == [1] * len(ids)
    assert [a.id for a in attributes] == ids


def test_an_array_without_strides_is_passed_with_c_contiguous_byte_strides():
    """An array interface with no ``strides`` is C-contiguous: the kernel gets byte strides
    outermost first, (128, 2) for a (2, 64) float16 array, after size, itemsize and pointer."""
    from types import SimpleNamespace

    arr = SimpleNamespace(__cuda_array_interface__={"shape": (2, 64), "typestr": "<f2",
                                                    "data": (0x1000, False), "version": 3})
    params = [p.value for p in launcher._array_params(arr)]
    assert params[2:] == [128, 2, 0x1000, 2, 64, 128, 2]
