"""The kernels: one module per tiling. Kernels never read the environment."""

from .default import default_kernel
from .single_warp import single_warp_kernel

__all__ = ["default_kernel", "single_warp_kernel"]
