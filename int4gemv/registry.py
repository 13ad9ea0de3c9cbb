"""The registry of kernels the dispatcher chooses from: ``name -> KernelDescriptor``.

To add a kernel: write its descriptor module under :mod:`int4gemv.descriptors` and register it
below. ``FALLBACK`` is the variant that means "no specialization requested": the dispatcher
(``dispatch``) serves it with the default tiling at M = 1 and the tensor-core kernel at M >= 2.
"""

from __future__ import annotations

from .descriptor import KernelDescriptor
from .descriptors import default, single_warp, tensor_core

__all__ = ["KERNELS", "FALLBACK", "register", "descriptor"]

KERNELS: dict = {}
FALLBACK = "default"


def register(d: KernelDescriptor) -> KernelDescriptor:
    """Add ``d`` to :data:`KERNELS`; a second kernel of the same name is refused."""
    if not isinstance(d, KernelDescriptor):
        raise TypeError(f"register() takes a KernelDescriptor; got {type(d).__name__}")
    if d.name in KERNELS:
        raise ValueError(f"a kernel named {d.name!r} is already registered")
    KERNELS[d.name] = d
    return d


def descriptor(name: str) -> KernelDescriptor:
    """The registered descriptor called ``name`` (``KeyError`` naming the registered ones)."""
    try:
        return KERNELS[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r}; registered: {', '.join(KERNELS)}") from None


register(default.DESCRIPTOR)
register(single_warp.DESCRIPTOR)
register(tensor_core.DESCRIPTOR)
