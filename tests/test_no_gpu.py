"""A machine without a GPU, as a user's plain script sees it (issue 23).

Each script runs in a fresh interpreter with ``NUMBA_ENABLE_CUDASIM`` removed and
``CUDA_VISIBLE_DEVICES=""`` (no GPU visible, also on a GPU machine): planning works and says
which device it assumed; everything that needs a GPU raises one ``NoGPUError`` naming the cause
and both ways out; ``int4gemv.use_simulator()`` switches a fresh process to the simulator and
refuses once Numba's CUDA support was imported for the driver.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


NO_GPU_SCRIPT = """
    import numpy as np, int4gemv
    from int4gemv.benchmark import time_gemv, compare, copy_bandwidth, measure_replays
    from int4gemv.decode import ChainShape, DecodeChain, PersistentChain, random_chain

    assert not int4gemv.gpu_present()
    w = int4gemv.quantize(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32))
    a = np.ones(256, np.float16)
    chain = random_chain(ChainShape(layers=1, hidden=32, intermediate=64, q_dim=32, kv_dim=16, vocab=48))
    print(int4gemv.explain(a, w))
    print("auto ->", int4gemv.explain(a, w, variant="auto").reason)
    calls = {
        "gemv": lambda: int4gemv.gemv(a, w),
        "to_device": lambda: w.to_device(),
        "time_gemv": lambda: time_gemv(w),
        "compare": lambda: compare([(8, 32)]),
        "DecodeChain": lambda: DecodeChain(*chain),
        "PersistentChain": lambda: PersistentChain(*chain),
        "copy_bandwidth": lambda: copy_bandwidth(1 << 20),
        "measure_replays": lambda: measure_replays(lambda: None, 0),
    }
    for name, call in calls.items():
        try:
            call()
        except int4gemv.NoGPUError as exc:
            assert isinstance(exc, RuntimeError)
            print(f"{name}: NoGPUError: {exc}")
        else:
            print(f"{name}: no error")
    try:   # an unknown tuning is still the caller's ValueError, before the GPU is asked for
        time_gemv(w, tuning="fast")
    except ValueError as exc:
        print("bad tuning: ValueError")
"""


def test_without_a_gpu_plans_work_and_launches_raise_one_clear_error():
    out = _run(NO_GPU_SCRIPT)
    assert "kernel   : default" in out and "grid=" in out
    assert "device   : NVIDIA H200, 132 SMs" in out and "(assumed: " in out
    assert "auto -> auto: nearest measured shape on NVIDIA H200" in out   # that model's table entries
    entry = {"gemv": "int4gemv.gemv", "to_device": "QuantizedWeight.to_device",
             "time_gemv": "int4gemv.benchmark", "compare": "int4gemv.benchmark",
             "DecodeChain": "int4gemv.decode.DecodeChain", "PersistentChain": "int4gemv.decode.PersistentChain",
             "copy_bandwidth": "int4gemv.benchmark.copy_bandwidth",
             "measure_replays": "int4gemv.benchmark.measure_replays"}
    for name, what in entry.items():
        line = next(x for x in out.splitlines() if x.startswith(f"{name}:"))
        assert f"NoGPUError: {what} needs a CUDA GPU" in line, line          # before Numba's CUDA
        assert "no usable GPU" in line or "cannot be found" in line, line     # the cause
        assert "NVIDIA GPU" in line and "int4gemv.use_simulator()" in line \
            and "NUMBA_ENABLE_CUDASIM=1" in line, line                         # the two ways out
    assert "bad tuning: ValueError" in out
    assert "Traceback" not in out


def test_use_simulator_switches_a_fresh_process_and_refuses_after_numba_cuda():
    out = _run("""
        import numpy as np, int4gemv
        int4gemv.use_simulator()
        int4gemv.use_simulator()                    # again: nothing to do
        w = int4gemv.quantize(np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32))
        a = np.random.default_rng(2).standard_normal(64).astype(np.float16)
        y = int4gemv.gemv(a, w)
        err = np.abs(y - int4gemv.reference_gemv(a, w)).max()
        print("simulator gemv error", err, int4gemv.explain(a, w).device)
        assert err < 1e-2
        int4gemv.use_simulator()                    # after use, on the simulator: still fine
    """)
    assert "simulator gemv error" in out and "Numba CUDA simulator" in out
    out = _run("""
        import int4gemv
        from numba import cuda                      # the driver's Numba, picked at this import
        try:
            int4gemv.use_simulator()
        except int4gemv.SimulatorSwitchError as exc:
            assert isinstance(exc, RuntimeError)
            print("refused:", exc)
    """)
    assert "refused:" in out and "restart the kernel" in out and "NUMBA_ENABLE_CUDASIM=1" in out


@pytest.mark.parametrize("status, expect", [(100, "CUDA_ERROR_NO_DEVICE"), (None, "cannot be found")])
def test_the_driver_probe_names_the_cause(monkeypatch, status, expect):
    """The probe's reasons, without a subprocess: a driver with no device, and no driver."""
    import ctypes

    from int4gemv import backend

    class Driver:
        def cuInit(self, flags):
            return status

    def cdll(name):
        if status is None:
            raise OSError(name)
        return Driver()

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.setattr(backend, "_probe", None)
    assert backend.gpu_present() is False and expect in backend.no_gpu_reason()
    monkeypatch.setattr(backend, "_probe", None)   # the next caller probes the real driver again
