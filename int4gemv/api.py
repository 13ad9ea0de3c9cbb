"""``gemv`` and ``explain``: the public calls, each a walk through :mod:`.pipeline`.

Host path: ``a`` is a numpy array. It is copied to the device, the kernel runs on the default
stream, the result is copied back and returned as numpy (synchronous).

Device path: ``a`` is a Numba device array, any ``__cuda_array_interface__`` object (CuPy, torch
fp16) or a torch CUDA tensor (bf16 included). Nothing is copied and nothing synchronizes; the
launch goes on ``stream`` (see :func:`~.device.stream_handle`; ``None`` is the legacy default
stream). With ``out`` given, the call allocates nothing, so it is safe inside CUDA graph capture
once the kernel was compiled by an earlier call; repeated calls with the same arrays and tuning
reuse a bound launch (one driver call).

Tuning: ``tuning=`` (an :class:`~int4gemv.Tuning` or a variant string) is used as given; without
it each field resolves from the ``variant=``/``pdl=``/``prefetch=`` keywords, the environment and
the defaults (:mod:`.tuning`). Dtypes: ``a``, ``bias`` and ``out`` must have the weight's dtype
(``w.dtype``, float16 or bfloat16); a mix is a ``TypeError`` naming the argument.
"""

from __future__ import annotations

from dataclasses import replace

from .array_keys import CALL_KEY_READERS, call_key_reader
from .backend import require_gpu
from .device import device_note, stream_handle
from .dispatch import Plan
from .pipeline import (LAUNCHES, bind, check_options, emit_warnings, plan, remember, run_host,
                       validate)
from .tuning import ENV_VARS, Tuning, read_environment, resolve_tuning

__all__ = ["gemv", "explain"]


def explain(a, w, *, bias=None, out=None, tuning=None, variant=None, pdl=False,
            prefetch=False) -> Plan:
    """The :class:`~int4gemv.dispatch.Plan` :func:`gemv` would use for these arguments.

    Validates like ``gemv`` but launches nothing and needs no GPU; ``print(explain(...))`` shows
    the kernel and its configuration, the launch geometry, every tuning field with where it came
    from (argument, environment variable, autotune table, default or the kernel's choice), the
    reason and the device it planned for (with no usable GPU: the model it assumed, see
    :data:`int4gemv.backend.ASSUMED_DEVICE`).
    """
    resolved = resolve_tuning(tuning, variant=variant, pdl=pdl, prefetch=prefetch)
    call = validate(a, w, bias, out)
    check_options(resolved, call)
    result = plan(call, resolved)
    emit_warnings(result.warnings)
    return replace(result, device=device_note())


def gemv(a, w, *, bias=None, out=None, stream=None, tuning=None, variant=None, pdl=False,
         prefetch=False):
    """``Y = A · ((q − zp) · scale)ᵀ + bias`` with ``a`` ``[K]`` or ``[M, K]`` (``M <= 16``).

    Args:
        a: activations in the weight's dtype; numpy (host path) or a CUDA array (device path).
        w: an :class:`~int4gemv.QuantizedWeight`; moved to the device on first use.
        bias: optional ``[N]``, on the same side as ``a``, same dtype.
        out: optional ``[N]`` / ``[M, N]``, on the same side as ``a``, same dtype; written in
            place. Required for bf16 device calls.
        stream: device path only; see :func:`~int4gemv.device.stream_handle`.
        tuning: ``None`` (resolve from the keywords and the environment), a
            :class:`~int4gemv.Tuning` or a variant string ``"default"``/``"single_warp"``/``"auto"``/
            ``"tensor_core"``.
        variant, pdl, prefetch: shorthands for those tuning fields when ``tuning`` is ``None``
            (``variant`` still lets the environment set ``cols``/``unroll``). ``pdl`` (device
            path, compute capability 9.0+) launches the single-warp or default kernel as a programmatic
            dependent launch: it may start while the previous kernel on ``stream`` runs and waits
            for it before reading ``a``/``bias`` or writing ``out``, so the weights must not be
            written by a kernel that may still be running. ``prefetch`` (with ``pdl``) also
            prefetches the weights into L2 before that wait.

    Returns: device path, ``out`` itself when given, else a new Numba device array; host path,
    a numpy array (``out`` when given).

    Raises ``TypeError``/``ValueError`` naming the argument before any launch, and
    :class:`~int4gemv.backend.NoGPUError` when no GPU is usable and the simulator is not in use.
    """
    # The eager hot path, written out here (each Python call costs about 0.1 µs): the launch key
    # of pipeline.LAUNCHES and, on a hit, one driver launch. Unusual argument types leave the
    # key None and take the full pipeline, which names them.
    environment = how = None
    if tuning is None:
        environment = read_environment()  # one snapshot per call
        if out is not None and pdl.__class__ is bool and prefetch.__class__ is bool and (
                variant is None or variant.__class__ is str):
            how = (variant, pdl, prefetch, environment)
    elif out is not None and variant is None and pdl is False and prefetch is False:
        how = id(tuning) if tuning.__class__ is Tuning else tuning if tuning.__class__ is str else None
    key = None
    if how is not None:
        try:
            key = (CALL_KEY_READERS.get(a.__class__) or call_key_reader(a))(a, out, bias, how, id(w))
        except Exception:
            key = None
        hit = LAUNCHES.get(key)
        if hit is not None:
            if hit[1]:
                emit_warnings(hit[1])
            hit[0](0 if stream is None else stream_handle(stream))
            return out
    resolved = resolve_tuning(tuning, variant=variant, pdl=pdl, prefetch=prefetch,
                              environ=None if environment is None else dict(zip(ENV_VARS, environment)))
    call = validate(a, w, bias, out)
    handle = stream_handle(stream)
    check_options(resolved, call, stream is not None)
    chosen = plan(call, resolved)
    emit_warnings(chosen.warnings)
    require_gpu("int4gemv.gemv")
    if not call.on_device:
        return run_host(chosen, call, out)
    if call.out is None:
        from numba import cuda

        from .arrays import describe

        result = cuda.device_array(call.out_shape, "float16")
        out_info = describe("out", result)
    else:
        result, out_info = out, call.out
    bound = bind(chosen, w, call.a, out_info, call.bias)
    bound.launch(handle)
    if key is not None:
        remember(key, w, bound, chosen.warnings, tuning)
    return result
