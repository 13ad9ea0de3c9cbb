"""The ``cuLaunchKernelEx`` configuration of a bound launch (pure ctypes: no GPU needed)."""

import pytest

from int4gemv.launcher import launch_config


def test_a_plain_launch_has_no_extended_configuration():
    assert launch_config((4, 1, 1), (128, 1, 1)) == (None, None)


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
