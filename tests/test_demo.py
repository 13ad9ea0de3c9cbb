"""The README's main job runs, reports the reference check and both plans, is reproducible and
prints each warning once (one test: each demo run costs seconds on the simulator)."""

from numba import config

from int4gemv import demo


def _main_job_checks(text):
    """What the main job must print: the reference check, both plans, where it ran, the timing."""
    assert "OK: worst relative error" in text
    assert "kernel   : default" in text and "kernel   : single_warp" in text
    assert ("simulator" in text) == bool(config.ENABLE_CUDASIM)
    assert "time_gemv" in text and ("not timed" in text) == bool(config.ENABLE_CUDASIM)


def _untimed(text):
    """``text`` without the timing line (on a GPU the measured time differs from run to run)."""
    lines = text.splitlines()
    at = lines.index("timing (int4gemv.benchmark.time_gemv):") + 1
    return lines[:at] + lines[at + 1:]


def test_demo_is_seeded_and_prints_each_warning_once(capsys, monkeypatch):
    # Conflicting controls: every call's plan carries the same warning, and gemv warns each call.
    monkeypatch.setenv("INT4GEMV_SINGLE_WARP", "1")
    monkeypatch.setenv("INT4GEMV_ENABLE_SINGLE_WARP_GEMV", "0")
    assert demo.main(["--seed", "3"]) == 0
    first = capsys.readouterr().out
    _main_job_checks(first)   # one demo run serves both tests (each costs seconds on the simulator)
    assert demo.main(["--seed", "3"]) == 0
    second = capsys.readouterr().out
    assert _untimed(second) == _untimed(first)
    if config.ENABLE_CUDASIM:   # nothing timed: every line repeats
        assert second == first
    assert first.count("disagree") == 1 and "warnings (each once):" in first
    assert "(seed 3)" in first
    assert demo.main(["--seed", "4"]) == 0
    assert _untimed(capsys.readouterr().out) != _untimed(first)
