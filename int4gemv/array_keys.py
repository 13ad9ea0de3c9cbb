"""Cache keys of the arrays of a call: what validation and binding depend on, read cheaply.

The launch cache (:mod:`.pipeline`) reuses a bound launch only for arrays whose key equals the key
they had when the launch was bound. :func:`array_key` reads one array, :func:`call_key` the arrays
of a call; both are read afresh on every call, and how a class is read is decided once per class
(:data:`KEY_READERS`, :data:`CALL_KEY_READERS`).
"""

from __future__ import annotations

import weakref

import numpy as np

from .arrays import numba_pointer, torch_like
from .device import simulated

__all__ = ["array_key", "key_reader", "KEY_READERS", "call_key", "call_key_reader",
           "CALL_KEY_READERS"]


def array_key(x):
    """What validation and binding depend on for a device array: its class, dtype, shape,
    strides and data address; ``None`` for anything that is not a device array. Read afresh on
    every call (a torch tensor can be resized or re-pointed in place: ``resize_``, ``set_``,
    ``as_strided_``, ``.data =``), except for Numba device arrays, which never change (see
    :func:`_numba_key`). Equal keys mean an equal binding: a cached launch exists only for arrays
    that passed validation.

    How a class is read is decided once per class (:data:`KEY_READERS`, :func:`key_reader`): a
    Numba device array through its attributes and its memory pointer's integer address; anything
    else through its ``__cuda_array_interface__``; a torch tensor, the common eager case, through
    ``data_ptr()``, ``shape``, ``is_contiguous()`` and ``dtype`` only (about 0.3 µs; no
    ``__cuda_array_interface__`` dict, which costs microseconds). Those suffice: validation
    accepts C-contiguous arrays only, so a contiguous tensor's strides follow from its shape, and
    a CUDA tensor's address (unified addressing: device memory and host memory never share an
    address while the context lives) is never a CPU tensor's. A read that fails gives ``None``
    (the call then takes the full pipeline, which names the problem)."""
    try:
        return key_reader(x)(x)
    except Exception:
        return None


def key_reader(x):
    """The function that reads the array key (see :func:`array_key`) of objects of ``x``'s class,
    decided once per class and kept in :data:`KEY_READERS`. It may raise on an object it cannot
    read (:func:`array_key` turns that into ``None``)."""
    reader = KEY_READERS.get(x.__class__)
    if reader is None:
        reader = KEY_READERS[x.__class__] = _keyer_for(x)
    return reader


def _numba_key(x):
    """A Numba device array: its attributes and its MemoryPointer's address (a view's is its
    own). A Numba device array never changes its memory, shape, strides or dtype after it is
    made (reshapes and views are new objects), so its key is kept per live object
    (:data:`_NUMBA_KEYS`, an entry dropped when the array dies) and checked by identity."""
    hit = _NUMBA_KEYS.get(id(x))
    if hit is not None and hit[0]() is x:
        return hit[1]
    gpu_data = x.gpu_data
    key = (x.__class__, x.dtype, x.shape, x.strides,
           0 if gpu_data is None else int(gpu_data.device_pointer))
    ident = id(x)

    def forget(ref):
        if _NUMBA_KEYS.get(ident, (None,))[0] is ref:
            del _NUMBA_KEYS[ident]

    _NUMBA_KEYS[ident] = (weakref.ref(x, forget), key)
    return key


def _simulator_key(x):
    return (x.__class__, x.dtype, x.shape, x.strides, numba_pointer(x))


def _torch_reader(cls):
    """The key reader of torch tensor class ``cls`` (see :func:`array_key`): its C methods are
    looked up once here, not on every call."""
    data_ptr, is_contiguous = cls.data_ptr, cls.is_contiguous

    def torch_key(x):
        return (x.__class__, data_ptr(x), x.shape, is_contiguous(x), x.dtype)
    return torch_key


def _torch_like_key(x):
    return (x.__class__, x.dtype, tuple(x.shape), x.stride(), x.data_ptr(), x.device)


def _interface_key(x):
    cai = x.__cuda_array_interface__
    return (x.__class__, cai["typestr"], tuple(cai["shape"]), cai.get("strides"), cai["data"][0])


def _no_key(x):
    return None


def _keyer_for(x):
    """How :func:`array_key` reads objects of ``x``'s class."""
    if x is None or isinstance(x, np.ndarray):
        return _no_key
    if hasattr(x, "copy_to_host") and hasattr(x, "dtype"):  # as describe() decides
        return _simulator_key if simulated() or not hasattr(x, "gpu_data") else _numba_key
    if torch_like(x):
        return _torch_reader(x.__class__) if _real_torch(x) else _torch_like_key
    return _interface_key


def _real_torch(x):
    """A torch tensor (its class from a ``torch`` module, with ``is_cuda``), not a look-alike:
    read through ``is_contiguous()`` (see :func:`array_key`)."""
    return torch_like(x) and type(x).__module__.startswith("torch") and hasattr(x, "is_cuda")


#: Class -> its key reader (see :func:`array_key`).
KEY_READERS = {}


def call_key(a, out, bias=None, tuning_key=None, weight_id=None):
    """The launch cache's key of a device call (see :data:`int4gemv.pipeline.LAUNCHES`): the
    caller's ``tuning_key`` and ``weight_id``, then what :func:`array_key` reads of ``a``,
    ``out`` and ``bias`` (``None`` when not given), as one flat tuple; ``None`` if any given
    array has no key. Equal call keys mean equal arguments ``tuning_key``, ``weight_id`` and
    equal :func:`array_key` of each array. Read through the reader of ``a``'s class
    (:func:`call_key_reader`), as the eager hot path does."""
    try:
        return call_key_reader(a)(a, out, bias, tuning_key, weight_id)
    except Exception:
        return None


def call_key_reader(a):
    """``reader(a, out, bias, tuning_key, weight_id)``, the function that reads :func:`call_key`
    for calls whose ``a`` has ``a``'s class, decided once per class and kept in
    :data:`CALL_KEY_READERS`. It may raise on an object it cannot read (:func:`call_key` turns
    that into ``None``). A torch tensor's reader reads ``a`` and ``out`` (and ``bias``) of the
    same class in one Python call and builds the key as one tuple (the eager case: each Python
    call or tuple costs about 0.1 µs there); any other call is read array by array."""
    reader = CALL_KEY_READERS.get(a.__class__)
    if reader is None:
        keyer = key_reader(a)
        reader = CALL_KEY_READERS[a.__class__] = (
            _no_call_key if keyer is _no_key else
            _numba_call_reader(a.__class__) if keyer is _numba_key else
            _torch_call_reader(a.__class__) if _real_torch(a) else _each_key)
    return reader


def _each_key(a, out, bias, tuning_key, weight_id):
    """Array by array, each through its class's reader (:data:`KEY_READERS`, read directly:
    :func:`array_key` and :func:`key_reader` would be two more Python calls per array)."""
    readers = KEY_READERS
    ka = (readers.get(a.__class__) or key_reader(a))(a)
    kout = (readers.get(out.__class__) or key_reader(out))(out)
    kb = None if bias is None else (readers.get(bias.__class__) or key_reader(bias))(bias)
    if ka is None or kout is None or (kb is None and bias is not None):
        return None
    return (tuning_key, weight_id, ka, kout, kb)


def _no_call_key(a, out, bias, tuning_key, weight_id):
    return None


def _numba_call_reader(cls):
    """The call key reader of Numba device array class ``cls``: with ``out`` of the same class
    and no ``bias`` (the eager case), each array's :func:`_numba_key` directly."""

    def numba_call_key(a, out, bias, tuning_key, weight_id):
        if out.__class__ is not cls or bias is not None:
            return _each_key(a, out, bias, tuning_key, weight_id)
        return (tuning_key, weight_id, _numba_key(a), _numba_key(out))
    return numba_call_key


def _torch_call_reader(cls):
    """The call key reader of torch tensor class ``cls``: with ``out`` (and ``bias``) of the same
    class, ``(tuning_key, weight_id, cls)`` and the other fields of :func:`_torch_reader`'s key
    of each array, flat, in one call."""
    data_ptr, is_contiguous = cls.data_ptr, cls.is_contiguous

    def torch_call_key(a, out, bias, tuning_key, weight_id):
        if out.__class__ is not cls or (bias is not None and bias.__class__ is not cls):
            return _each_key(a, out, bias, tuning_key, weight_id)
        key = (tuning_key, weight_id, cls, data_ptr(a), a.shape, is_contiguous(a), a.dtype,
               data_ptr(out), out.shape, is_contiguous(out), out.dtype)
        if bias is None:
            return key
        return key + (data_ptr(bias), bias.shape, is_contiguous(bias), bias.dtype)
    return torch_call_key


#: Class of ``a`` -> its call key reader (see :func:`call_key_reader`); the eager hot path
#: (:func:`int4gemv.gemv`) reads it directly.
CALL_KEY_READERS = {}
_NUMBA_KEYS = {}  # id(Numba device array) -> (weakref to it, its key), while it lives
