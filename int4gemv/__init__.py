"""int4gemv: INT4 weight-only GEMV in ONNX Runtime's MatMulNBits layout, as Numba CUDA kernels.

Importing this package touches no GPU and does not import Numba: the public names below load on
first use. Without a GPU, call :func:`use_simulator` (or set ``NUMBA_ENABLE_CUDASIM=1``) before
first use to run the same kernels on Numba's CUDA simulator (tiny shapes only); otherwise calls
that need a GPU raise :class:`NoGPUError`, while :func:`explain` still plans (for an assumed device).

Every call goes validate → plan → bind → launch through :mod:`int4gemv.pipeline`; kernels are
described by :class:`KernelDescriptor` values in :mod:`int4gemv.registry`; a tuning is one
frozen :class:`Tuning` (:mod:`int4gemv.tuning`).
"""

import importlib

__all__ = [
    "QuantizedWeight", "quantize", "reference_gemv", "gemv", "explain", "prepare", "PreparedGemv",
    "Plan", "plan_gemv", "Problem", "Tuning", "KernelDescriptor", "BLOCK_SIZES", "MAX_M",
    "use_simulator", "simulator_selected", "gpu_present", "NoGPUError", "SimulatorSwitchError",
]
__version__ = "0.1.0"

_HOME = {
    "QuantizedWeight": "weights", "BLOCK_SIZES": "weights", "quantize": "quantization",
    "reference_gemv": "reference", "gemv": "api", "explain": "api",
    "prepare": "prepared", "PreparedGemv": "prepared",
    "Plan": "dispatch", "plan_gemv": "dispatch",
    "Problem": "descriptor", "KernelDescriptor": "descriptor", "MAX_M": "descriptor",
    "Tuning": "tuning",
    "use_simulator": "backend", "simulator_selected": "backend", "gpu_present": "backend",
    "NoGPUError": "backend",
    "SimulatorSwitchError": "backend",
}


def __getattr__(name):
    if name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'int4gemv' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
