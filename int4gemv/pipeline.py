"""The call pipeline: validate → plan → bind → launch, one path for every caller.

:func:`int4gemv.gemv` (host and device), :func:`int4gemv.explain`, :func:`int4gemv.prepare` and
the benchmarks all go through these functions:

* :func:`validate` checks the arrays against the weight and returns a :class:`Call` (the
  :class:`~.descriptor.Problem` and the arrays' descriptions). ``TypeError``/``ValueError``
  name the argument; nothing is launched.
* :func:`plan` turns a call and a resolved tuning (:func:`~.tuning.resolve_tuning`) into a
  :class:`~.dispatch.Plan` (cached per problem, tuning and device).
* :func:`bind` asks the planned kernel's descriptor for its launch (:mod:`.descriptor`) and binds
  it once (:mod:`.launcher`): a :class:`~.launcher.BoundLaunch` whose ``launch(stream)`` is one
  driver call.
* the launch cache (:data:`LAUNCHES`, :func:`remember`, :func:`clear_caches`)
  keeps up to :data:`MAX_LAUNCHES` bound launches of device calls with ``out`` given, keyed on
  the tuning (a ``Tuning``/variant string as given, or the ``variant``/``pdl``/``prefetch``
  keywords and the four environment variables' values, read at call time), the weight's
  identity and each array's class, dtype, shape, strides and address, read afresh on every call
  (:func:`~.array_keys.call_key`). A hit is one dict lookup and one driver launch.

Batches are served up to ``M = 16`` (:data:`~.descriptor.MAX_M`) rows per call; larger ``a`` is
refused (split it).
"""

from __future__ import annotations

import functools
import warnings
import weakref
from dataclasses import dataclass

import numpy as np

from .arrays import ArrayInfo, check_array, describe, device_view, numpy_dtype, storage_dtype
from .descriptor import MAX_M, Operands, Problem
from .device import device_facts, supports_pdl
from .dispatch import Plan, plan_gemv
from .launcher import bind as bind_kernel
from .registry import descriptor
from .weights import QuantizedWeight

__all__ = ["Call", "validate", "plan", "bind", "run_host", "check_options", "emit_warnings",
           "remember", "clear_caches", "cached_launch_count", "MAX_LAUNCHES", "LAUNCHES"]

#: Bound launches kept by the launch cache (least recently stored dropped first).
MAX_LAUNCHES = 256
#: The launch cache: launch key -> ``(launch, warnings, tuning)``, oldest first (``launch`` is the
#: bound launch's ``launch`` method, called with the stream handle). A launch
#: key is :func:`~.array_keys.call_key` ``(a, out, bias, how, id(w))``, one flat tuple: ``how``
#: is the tuning as given (a :class:`~.tuning.Tuning` by identity, since hashing one is a
#: Python call; its entry keeps it alive, so the identity cannot be reused while the entry
#: exists; a variant string as given; with ``tuning=None``, ``(variant, pdl, prefetch,
#: environment)``, the environment being the call's :func:`~.tuning.read_environment`
#: snapshot, so a change of a variable applies to the next call), then the weight's identity
#: and what the arrays' keys are made of, read afresh. A weight's entries are dropped when it
#: dies (a ``weakref.finalize`` per weight, :func:`remember`), before its identity can be
#: reused, so a hit needs no weakref check. :func:`int4gemv.gemv` reads it inline (each Python
#: call on the eager path costs about 0.1 µs) and stores its misses with :func:`remember`.
LAUNCHES = {}


@dataclass(frozen=True)
class Call:
    """A validated call: its problem, the weight, the arrays' descriptions (``bias``/``out``
    ``None`` when not given), whether it runs on the device and whether ``a`` was 1-D."""

    problem: Problem
    weight: QuantizedWeight
    a: ArrayInfo
    bias: ArrayInfo | None
    out: ArrayInfo | None
    on_device: bool
    vector: bool

    @property
    def out_shape(self) -> tuple:
        p = self.problem
        return (p.N,) if self.vector else (p.M, p.N)


def validate(a, w, bias=None, out=None) -> Call:
    """Check ``a``, ``bias``, ``out`` against ``w``: kinds (numpy on the host, or device arrays;
    no mix), the weight's dtype, shapes, C-contiguous strides, 2-byte alignment, the current
    device; at most :data:`~.descriptor.MAX_M` rows."""
    if not isinstance(w, QuantizedWeight):
        raise TypeError(f"w must be an int4gemv.QuantizedWeight; got {type(w).__name__}")
    K, N, dtype = w.K, w.N, w.dtype
    ai = describe("a", a)
    if len(ai.shape) not in (1, 2):
        raise ValueError(f"a must have shape [K] or [M, K] with K={K}; got {ai.shape}")
    check_array(ai, dtype, lambda s: s[-1] == K and (len(s) == 1 or s[0] >= 1),
                f"[K] or [M, K] with K={K} and M >= 1")
    M = 1 if len(ai.shape) == 1 else ai.shape[0]
    if M > MAX_M:
        raise ValueError(f"a has M={M} rows; at most {MAX_M} are served per call (split the batch)")
    on_device = ai.kind == "device"
    infos = {}
    for name, x in (("bias", bias), ("out", out)):
        if x is None:
            infos[name] = None
            continue
        info = infos[name] = describe(name, x)
        if (info.kind == "device") != on_device:
            raise TypeError(f"{name} must be {'a CUDA array' if on_device else 'a numpy array'} "
                            f"like a (no host/device mix)")
    if infos["bias"] is not None:
        check_array(infos["bias"], dtype, lambda s: s == (N,), f"[N] = [{N}]")
    want = (N,) if len(ai.shape) == 1 else (M, N)
    if infos["out"] is not None:
        check_array(infos["out"], dtype, lambda s: s == want, f"{list(want)}")
        if infos["out"].readonly:
            raise ValueError("out is read-only (numpy writeable=False, or a read-only "
                             "__cuda_array_interface__); pass a writable array")
    align = 16 if not on_device else min(16, (ai.pointer & -ai.pointer) or 16)
    problem = Problem(M, N, K, w.block_size, dtype, w.has_zero_points, bias is not None, align)
    return Call(problem, w, ai, infos["bias"], infos["out"], on_device, len(ai.shape) == 1)


def check_options(resolved, call: Call, stream_given: bool = False):
    """Refuse launch options the call cannot take: ``pdl`` on the host path or on a GPU before
    compute capability 9.0, ``stream`` on the host path, a device bf16 call without ``out``."""
    if resolved.tuning.pdl and not call.on_device:
        raise ValueError("pdl is only accepted with device arrays (the host path is synchronous)")
    if stream_given and not call.on_device:
        raise ValueError("stream is only accepted with device arrays (the host path is synchronous)")
    if call.on_device and call.out is None and call.problem.dtype == "bfloat16":
        raise ValueError("out is required for a bfloat16 device call (Numba has no bfloat16 arrays)")
    if resolved.tuning.pdl and not supports_pdl():
        raise ValueError("pdl needs a GPU of compute capability 9.0 or newer")


def plan(call: Call, resolved) -> Plan:
    """The plan for a validated call and a resolved tuning, on the current device."""
    name, multiprocessors, _ = device_facts()
    return _cached_plan(call.problem, resolved, name, multiprocessors)


@functools.lru_cache(maxsize=4096)
def _cached_plan(problem, resolved, device_name, multiprocessors):
    return plan_gemv(problem, resolved, device_name=device_name, multiprocessors=multiprocessors)


def emit_warnings(messages, stacklevel=3):
    """Emit a plan's warnings (conflicting controls) as ``RuntimeWarning``s."""
    for message in messages:
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)


def bind(plan: Plan, w: QuantizedWeight, a: ArrayInfo, out: ArrayInfo, bias: ArrayInfo | None = None):
    """Bind the planned kernel to device arrays (described by :func:`~.arrays.describe`) through
    its descriptor; returns a launch whose ``launch(stream_handle)`` enqueues it."""
    ops = Operands(device_view(a), device_view(out), None if bias is None else device_view(bias),
                   w.device_arrays())
    launch = descriptor(plan.kernel).bind(plan, ops)
    return bind_kernel(launch.kernel, launch.args, launch.grid, launch.block, launch.shared,
                       launch.programmatic)


def run_host(plan: Plan, call: Call, out=None):
    """The host path: copy ``a`` (and ``bias``) to the device, launch on the default stream,
    copy the result back (synchronous). Returns a numpy array (``out`` when given)."""
    from numba import cuda

    store = storage_dtype(call.problem.dtype)
    host = lambda info: cuda.to_device(np.ascontiguousarray(info.obj).reshape(-1).view(store))  # noqa: E731
    d_a = host(call.a)
    d_bias = None if call.bias is None else host(call.bias)
    d_out = cuda.device_array(call.problem.M * call.problem.N, store)
    bind(plan, call.weight, describe("a", d_a), describe("out", d_out),
         None if d_bias is None else describe("bias", d_bias)).launch(0)
    result = d_out.copy_to_host().view(numpy_dtype(call.problem.dtype)).reshape(call.out_shape)
    if out is None:
        return result
    out[...] = result
    return out


def remember(key, w, bound, messages=(), tuning=None):
    """Store a bound launch of weight ``w`` under ``key`` (dropping the oldest beyond
    :data:`MAX_LAUNCHES`); ``tuning``, the call's ``tuning=`` argument, is kept alive with it (see
    :data:`LAUNCHES`). ``w``'s entries are dropped when ``w`` dies."""
    ident = id(w)
    if ident not in _watched:
        _watched.add(ident)
        weakref.finalize(w, _forget_weight, ident)
    LAUNCHES[key] = (bound.launch, tuple(messages), tuning)
    while len(LAUNCHES) > MAX_LAUNCHES:
        del LAUNCHES[next(iter(LAUNCHES))]


_watched = set()  # id of every weight with a finalizer that drops its launch cache entries


def _forget_weight(ident):
    """``w`` (``id(w) == ident``) died: drop its entries (run before its identity is reused)."""
    _watched.discard(ident)
    for key in [key for key in list(LAUNCHES) if key[1] == ident]:
        LAUNCHES.pop(key, None)


def clear_caches():
    """Forget every cached plan and bound launch (the next call of each plans and binds again)."""
    LAUNCHES.clear()
    _cached_plan.cache_clear()


def cached_launch_count() -> int:
    """How many bound launches the cache holds."""
    return len(LAUNCHES)
