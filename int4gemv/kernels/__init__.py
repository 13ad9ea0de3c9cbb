"""The kernels: one module per tiling, plus their shared device functions. Kernels never read the
environment; each is described to the pipeline by a descriptor in :mod:`int4gemv.descriptors`."""

from .default import default_kernel
from .single_warp import single_warp_kernel

__all__ = ["default_kernel", "single_warp_kernel"]
