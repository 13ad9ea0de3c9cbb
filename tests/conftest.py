"""Test set-up: pick the simulator when there is no GPU, and share fixtures.

Tests are split by what they need: pure host logic (no CUDA), kernels (the simulator on a CPU
machine, the GPU where there is one), and ``@pytest.mark.gpu`` tests that need real hardware and
skip with a printed reason otherwise.
"""

import os
import sys
import zlib

if "NUMBA_ENABLE_CUDASIM" not in os.environ and not os.path.exists("/dev/nvidiactl"):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    print("tests: no NVIDIA device node, so the kernels run on Numba's CUDA simulator "
          "(NUMBA_ENABLE_CUDASIM=1) at tiny shapes", file=sys.stderr)

# Numba colours its warnings through colorama, whose init()/deinit() wrap sys.stdout without a
# lock: kernels launched from several threads at once (the lifecycle stress) warned concurrently
# and left stdout wrapped in itself (RecursionError on the next print, H200, 470f880). Read once,
# when numba.core.errors is first imported, so it is set before any numba import.
os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numba import config  # noqa: E402

SIMULATED = bool(config.ENABLE_CUDASIM)
if SIMULATED:
    from simulator_polling import install

    install()  # the simulator's block manager yields while it polls (tests/simulator_polling.py)
CONTROL_VARS = ("INT4GEMV_SINGLE_WARP", "INT4GEMV_ENABLE_SINGLE_WARP_GEMV",
                "INT4GEMV_SINGLE_WARP_COLS", "INT4GEMV_SINGLE_WARP_UNROLL")
#: ``PYTEST_REPORT_DIR``: where each failure (traceback and captured output) is written the
#: moment its test ends, with every test phase over :data:`SLOW_S` seconds: a run cut by a time
#: bound (the GPU evidence runs) still names its failures and its slow tests.
REPORT_DIR = os.environ.get("PYTEST_REPORT_DIR")
SLOW_S = 10.0


def pytest_runtest_logreport(report):
    """Append failures to ``$PYTEST_REPORT_DIR/failures.log`` and slow phases to ``slow.log``
    as they happen (under xdist: in the controller only, once per report)."""
    if not REPORT_DIR or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # an xdist worker's reports reach the controller, which writes them once
    os.makedirs(REPORT_DIR, exist_ok=True)
    if report.failed:
        with open(os.path.join(REPORT_DIR, "failures.log"), "a") as f:
            f.write(f"===== {report.nodeid} ({report.when}, {report.duration:.1f} s)\n"
                    f"{report.longreprtext}\n")
            for name, content in report.sections:
                f.write(f"----- {name}\n{content}\n")
    if report.duration > SLOW_S:
        with open(os.path.join(REPORT_DIR, "slow.log"), "a") as f:
            f.write(f"{report.duration:7.1f} s  {report.when:8}  {report.nodeid}\n")


def pytest_collection_modifyitems(config, items):
    if SIMULATED:
        skip = pytest.mark.skip(reason="needs a real CUDA GPU: running on Numba's CUDA simulator")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def clean_controls(monkeypatch):
    """Every test starts with the int4gemv environment controls unset (restored afterwards)."""
    for name in CONTROL_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def rng(request):
    """Fresh random data for every test, seeded by the test name (reproducible, never zeros)."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)
