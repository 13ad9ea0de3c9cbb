"""The measured ``auto`` table (package data ``autotune_table.json``): a checked schema.

Format::

    {"schema": 2, "devices": {"<GPU name>": {"source": "<results file>", "entries": [
        {"N": 2048, "K": 2048, "M": 1, "block_size": 32, "zero_points": false,
         "dtype": "float16", "variant": "single_warp", "cols": 4, "unroll": 2,
         "note": "single_warp 4x2 3.0 us vs default 9.3 us"}, ...]}}}

Schema 1 (the first committed tables) has no ``M``/``block_size``/``zero_points``/``dtype``;
its entries were measured at ``M=1, block_size=32``, no zero points, float16, and read so.
Every entry is checked (:func:`parse_table`): a malformed table raises ``ValueError`` naming
the device, the entry and the key.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources

from .tuning import COLS_VALUES, UNROLL_VALUES
from .tuning import VARIANTS as TUNING_VARIANTS

__all__ = ["Entry", "parse_table", "load_autotune_table", "lookup", "SCHEMAS", "VARIANTS"]

SCHEMAS = (1, 2)
_SCHEMA1_DEFAULTS = {"M": 1, "block_size": 32, "zero_points": False, "dtype": "float16"}
#: Kernels an entry may name (the registered kernels; ``auto`` is not a kernel).
VARIANTS = tuple(v for v in TUNING_VARIANTS if v != "auto")
_KEYS = ("N", "K", "M", "block_size", "zero_points", "dtype", "variant", "cols", "unroll", "note")


@dataclass(frozen=True)
class Entry:
    """One measured choice: at this shape and configuration, ``variant`` (with ``cols`` x
    ``unroll`` for the single-warp kernel) was fastest."""

    N: int
    K: int
    M: int
    block_size: int
    zero_points: bool
    dtype: str
    variant: str
    cols: int | None = None
    unroll: int | None = None
    note: str = ""

    @property
    def config_key(self):
        return (self.M, self.block_size, self.zero_points, self.dtype)


def _entry(raw, schema, where):
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be an object; got {type(raw).__name__}")
    unknown = set(raw) - set(_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}; accepted: {_KEYS}")
    values = dict(_SCHEMA1_DEFAULTS) if schema == 1 else {}
    values.update(raw)

    def need(key, ok, what):
        if key not in values:
            raise ValueError(f"{where} lacks {key!r}")
        v = values[key]
        if not ok(v):
            raise ValueError(f"{where}: {key!r} must be {what}; got {v!r}")

    posint = lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0  # noqa: E731
    for key in ("N", "K", "M", "block_size"):
        need(key, posint, "a positive int")
    need("zero_points", lambda v: isinstance(v, bool), "a bool")
    need("dtype", lambda v: v in ("float16", "bfloat16"), "'float16' or 'bfloat16'")
    need("variant", lambda v: v in VARIANTS, f"one of {VARIANTS}")
    for key, accepted in (("cols", COLS_VALUES), ("unroll", UNROLL_VALUES)):
        if values.get(key) is not None:
            need(key, lambda v, a=accepted: v in a and not isinstance(v, bool), f"one of {accepted} or null")
    if not isinstance(values.get("note", ""), str):
        raise ValueError(f"{where}: 'note' must be a string")
    return Entry(**values)


def parse_table(doc, origin: str = "autotune table") -> dict:
    """Check a table document and index it: ``{gpu: {(M, bs, zp, dtype): {(N, K): Entry}}}``."""
    if not isinstance(doc, dict) or doc.get("schema") not in SCHEMAS:
        raise ValueError(f"{origin}: 'schema' must be one of {SCHEMAS}")
    devices = doc.get("devices")
    if not isinstance(devices, dict):
        raise ValueError(f"{origin}: 'devices' must be an object")
    table = {}
    for gpu, d in devices.items():
        entries = d.get("entries") if isinstance(d, dict) else None
        if not isinstance(entries, list):
            raise ValueError(f"{origin}: devices[{gpu!r}]['entries'] must be a list")
        by_config = table.setdefault(gpu, {})
        for i, raw in enumerate(entries):
            e = _entry(raw, doc["schema"], f"{origin}: devices[{gpu!r}].entries[{i}]")
            by_config.setdefault(e.config_key, {})[(e.N, e.K)] = e
    return table


@functools.lru_cache(maxsize=None)
def load_autotune_table(path=None) -> dict:
    """The committed table (or the JSON file at ``path``), checked and indexed (see
    :func:`parse_table`); an absent package table is empty."""
    if path is None:
        try:
            text = resources.files("int4gemv").joinpath("autotune_table.json").read_text()
        except FileNotFoundError:
            return {}
        origin = "int4gemv/autotune_table.json"
    else:
        with open(path) as f:
            text = f.read()
        origin = str(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{origin} is not valid JSON: {exc}") from None
    return parse_table(doc, origin)


def lookup(table: dict, device_name, problem):
    """``(entry, how)``: the measured entry for ``problem`` on ``device_name`` (exact ``(N, K)``,
    else the nearest in log-shape among entries of the same M, block size, zero points and
    dtype), or ``(None, why)`` when there is none."""
    key = (problem.M, problem.block_size, problem.zero_points, problem.dtype)
    entries = (table.get(device_name) or {}).get(key) if device_name else None
    if not entries:
        return None, (f"no measurements for GPU {device_name!r} at M={problem.M}, block_size="
                      f"{problem.block_size}, zero_points={problem.zero_points}, {problem.dtype}")
    N, K = problem.N, problem.K
    if (N, K) in entries:
        return entries[(N, K)], f"measured on {device_name} at N={N} K={K}"
    near = min(entries, key=lambda nk: math.hypot(math.log(nk[0] / N), math.log(nk[1] / K)))
    return entries[near], f"nearest measured shape on {device_name} is N={near[0]} K={near[1]}"
