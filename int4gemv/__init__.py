"""int4gemv: INT4 weight-only GEMV in ONNX Runtime's MatMulNBits layout, as Numba CUDA kernels.

Importing this package touches no GPU. Set ``NUMBA_ENABLE_CUDASIM=1`` before the first import to
run the same kernels on Numba's CUDA simulator (tiny shapes only).
"""

from .api import explain, gemv
from .controls import Controls, read_controls
from .dispatch import Plan, plan_gemv, single_warp_eligibility
from .reference import reference_gemv
from .weights import BLOCK_SIZES, QuantizedWeight, quantize

__all__ = [
    "QuantizedWeight", "quantize", "reference_gemv", "gemv", "explain", "Plan", "plan_gemv",
    "single_warp_eligibility", "read_controls", "Controls", "BLOCK_SIZES",
]
__version__ = "0.1.0"
