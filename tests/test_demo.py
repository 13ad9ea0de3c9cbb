"""The README's main job runs and reports the reference check and both plans."""

from numba import config

from int4gemv import demo


def test_demo_main_job(capsys):
    assert demo.main() == 0
    text = capsys.readouterr().out
    assert "OK: worst relative error" in text
    assert "kernel   : default" in text and "kernel   : single_warp" in text
    assert ("simulator" in text) == bool(config.ENABLE_CUDASIM)
