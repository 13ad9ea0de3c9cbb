"""Drivers for testing lifecycle without (or around) a GPU, kept apart from the real runtime.

:class:`SimDriver` models the CUDA driver semantics lifecycle depends on, on the CPU (CI);
:class:`FaultInjectingDriver` wraps any driver and fails chosen calls (or every call in turn), and
counts what was created through it so one leak check serves the simulated and the real driver.
Both stay importable from :mod:`lifecycle` itself.
"""

from .faults import FaultInjectingDriver
from .sim_driver import SimDeviceArray, SimDriver, SimKernel

__all__ = ["SimDriver", "SimDeviceArray", "SimKernel", "FaultInjectingDriver"]
