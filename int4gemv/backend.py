"""Where the kernels run: an NVIDIA GPU, or Numba's CUDA simulator on the CPU.

* :func:`gpu_present` asks the CUDA driver (``libcuda`` through ctypes, without importing
  ``numba.cuda``) whether a usable GPU exists; the answer and its reason are read once.
* :func:`use_simulator` switches this process to Numba's CUDA simulator, like
  ``NUMBA_ENABLE_CUDASIM=1``; it must run before ``numba.cuda`` is first imported, and refuses
  with :class:`SimulatorSwitchError` after that.
* :func:`require_gpu` is called by everything that launches or allocates (``gemv``, ``prepare``,
  ``QuantizedWeight.to_device``, ``int4gemv.benchmark``): with no GPU and no simulator it raises
  :class:`NoGPUError`, naming the cause and the two ways out.

Planning (``explain``, ``plan_gemv``) needs neither: without a GPU the plan is made for
:data:`ASSUMED_DEVICE` and says so (:func:`int4gemv.device.device_facts`).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["ASSUMED_DEVICE", "NoGPUError", "SimulatorSwitchError", "gpu_present", "no_gpu_reason",
           "require_gpu", "use_simulator", "simulator_selected", "WAYS_OUT"]

#: ``(name, multiprocessors, compute capability)`` a plan assumes when no GPU is usable: the
#: GPU the project's autotune table and results were measured on.
ASSUMED_DEVICE = ("NVIDIA H200", 132, (9, 0))

#: CUresult codes the probe names (cuda.h).
_CUDA_SUCCESS = 0
_CUDA_ERROR_NAMES = {100: "CUDA_ERROR_NO_DEVICE", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
                     3: "CUDA_ERROR_NOT_INITIALIZED", 999: "CUDA_ERROR_UNKNOWN",
                     101: "CUDA_ERROR_INVALID_DEVICE", 304: "CUDA_ERROR_OPERATING_SYSTEM"}

_probe = None  # (present: bool, reason: str), read once per process

WAYS_OUT = ("Two ways out: run on a machine with an NVIDIA GPU and its driver; or, for tiny "
            "shapes only (the simulator runs every GPU thread in Python), use Numba's CUDA "
            "simulator: call int4gemv.use_simulator() at the start of the program, before any "
            "other int4gemv call (or set NUMBA_ENABLE_CUDASIM=1 in the environment).")


class NoGPUError(RuntimeError):
    """A call needs a CUDA GPU, none is usable in this process and the simulator is not in use."""


class SimulatorSwitchError(RuntimeError):
    """:func:`use_simulator` was called after Numba's CUDA support was imported for a real GPU."""


def simulator_selected() -> bool:
    """True when Numba's CUDA simulator is (or, once imported, will be) in use in this process."""
    if "numba.core.config" in sys.modules:
        return bool(sys.modules["numba.core.config"].ENABLE_CUDASIM)
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")


def _driver_names() -> list:
    if os.environ.get("NUMBA_CUDA_DRIVER"):
        return [os.environ["NUMBA_CUDA_DRIVER"]]
    if sys.platform == "win32":
        return ["nvcuda.dll"]
    return ["libcuda.so.1", "libcuda.so"]


def _probe_driver() -> tuple:
    """``(present, reason)`` from the driver itself: library loads, ``cuInit`` succeeds, at least
    one device. No Numba import."""
    lib = None
    for name in _driver_names():
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return False, "the CUDA driver library (libcuda) cannot be found"
    try:
        status = lib.cuInit(0)
        if status != _CUDA_SUCCESS:
            code = _CUDA_ERROR_NAMES.get(status, f"error {status}")
            return False, f"the CUDA driver found no usable GPU (cuInit: {code})"
        count = ctypes.c_int(0)
        status = lib.cuDeviceGetCount(ctypes.byref(count))
    except AttributeError:
        return False, "the CUDA driver library has no cuInit (not a CUDA driver)"
    if status != _CUDA_SUCCESS or count.value < 1:
        return False, "the CUDA driver reports no GPU"
    return True, f"{count.value} CUDA device(s)"


def gpu_present() -> bool:
    """Whether a CUDA GPU is usable in this process (the driver loads, initialises and lists at
    least one device; ``CUDA_VISIBLE_DEVICES=""`` hides them). Read once; imports no Numba, so it
    can decide whether to call :func:`use_simulator`."""
    global _probe
    if _probe is None:
        _probe = _probe_driver()
    return _probe[0]


def no_gpu_reason() -> str:
    """Why no GPU is usable (``""`` when one is)."""
    return "" if gpu_present() else _probe[1]


def require_gpu(what: str) -> None:
    """Return if ``what`` can run here (a GPU, or the simulator); else raise :class:`NoGPUError`."""
    if simulator_selected() or gpu_present():
        return
    raise NoGPUError(f"{what} needs a CUDA GPU, and none is usable here: {no_gpu_reason()}. {WAYS_OUT}")


def use_simulator() -> None:
    """Run int4gemv's kernels on Numba's CUDA simulator in this process (tiny shapes only).

    The same switch as ``NUMBA_ENABLE_CUDASIM=1``, for notebooks and scripts: call it before
    anything imports ``numba.cuda`` (the first ``gemv``, ``to_device``, ``time_gemv`` ...).
    Calling it again, or when the simulator is already in use, does nothing.

    Raises :class:`SimulatorSwitchError` if ``numba.cuda`` was already imported for a real GPU
    (Numba picks the simulator or the driver once, at that import): restart the process (in
    Jupyter, the kernel) and call it first.
    """
    cuda = sys.modules.get("numba.cuda")
    if cuda is not None:
        if simulator_selected() and "numba.cuda.simulator" in sys.modules:
            return
        raise SimulatorSwitchError(
            "int4gemv.use_simulator(): Numba's CUDA support (numba.cuda) was already imported for a "
            "real GPU in this process (int4gemv imports it on its first call, e.g. quantize or "
            "explain), and Numba picks the simulator or the driver once, at that import. "
            "Call int4gemv.use_simulator() first, in a fresh process (in Jupyter: restart the "
            "kernel), or start Python with NUMBA_ENABLE_CUDASIM=1.")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    config = sys.modules.get("numba.core.config")
    if config is not None:
        config.ENABLE_CUDASIM = 1
