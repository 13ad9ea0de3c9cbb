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

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numba import config  # noqa: E402

SIMULATED = bool(config.ENABLE_CUDASIM)
CONTROL_VARS = ("INT4GEMV_SINGLE_WARP", "INT4GEMV_ENABLE_SINGLE_WARP_GEMV",
                "INT4GEMV_SINGLE_WARP_COLS", "INT4GEMV_SINGLE_WARP_UNROLL")


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
