"""lifecycle: capture, replay and release of CUDA graphs owned by integer graph id.

Importing this package touches no GPU. Start with :class:`GraphProvider` (or
:func:`numba_provider` for Numba work); every CUDA call goes through a :class:`Driver`:
:class:`RealDriver` on a GPU, :class:`SimDriver` on the CPU, :class:`FaultInjectingDriver` to make
chosen calls fail (the last two live in :mod:`lifecycle.testing`).

Rooms: :mod:`~lifecycle.provider` (the door), :mod:`~lifecycle.sessions` (capture sessions),
:mod:`~lifecycle.eager_runs` (warm-up and eager re-runs), :mod:`~lifecycle.waits` (synchronize and
release), :mod:`~lifecycle.registry` (records by id), :mod:`~lifecycle.disposal` (freeing,
closing, finalizing), :mod:`~lifecycle.capture`, :mod:`~lifecycle.record`,
:mod:`~lifecycle.staging`, :mod:`~lifecycle.threads` (which thread is calling),
:mod:`~lifecycle.streams` (stream checks and the claims callers wait their turn on),
:mod:`~lifecycle.context`; the driver seam :mod:`~lifecycle.driver`.
"""

from .capture import Capture
from .driver import STREAM_LEGACY, STREAM_PER_THREAD, CaptureMode, CaptureStatus, Driver, check
from .errors import (
    CaptureError,
    ClosedError,
    DeviceMismatchError,
    DriverError,
    GraphStateError,
    HostFunctionError,
    LifecycleError,
    StreamError,
    UnclosedProviderWarning,
    UnknownGraphError,
)
from .numba_glue import hold_deallocations, numba_provider
from .provider import Counters, GraphProvider
from .real_driver import RealDriver
from .record import GraphState
from .staging import PinnedBuffer
from .testing import FaultInjectingDriver, SimDriver

__all__ = [
    "GraphProvider", "Capture", "Counters", "GraphState", "PinnedBuffer",
    "Driver", "RealDriver", "SimDriver", "FaultInjectingDriver", "check",
    "CaptureStatus", "CaptureMode", "STREAM_LEGACY", "STREAM_PER_THREAD",
    "numba_provider", "hold_deallocations",
    "LifecycleError", "DriverError", "CaptureError", "GraphStateError", "UnknownGraphError",
    "StreamError", "DeviceMismatchError", "ClosedError", "HostFunctionError", "UnclosedProviderWarning",
]
