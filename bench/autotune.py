"""Writing ``int4gemv/autotune_table.json`` from a run's results (``python -m bench --write-autotune``).

For every measured ``(N, K, M, block size, zero points, dtype)`` the fastest int4gemv configuration
wins: the default tiling, or the single-warp specialization with the tuning (cols, unroll) that was
fastest. The table format is schema 2 of :mod:`int4gemv.autotune`::

    {"schema": 2, "devices": {"NVIDIA H200": {"source": "<results file>", "entries": [
        {"N": 2048, "K": 2048, "M": 1, "block_size": 32, "zero_points": false, "dtype": "float16",
         "variant": "single_warp", "cols": 4, "unroll": 2,
         "note": "single_warp 4x2 41.2 us vs default 80.1 us"}, ...]}}}

Writing merges into an existing file (of either schema, checked by
:func:`int4gemv.autotune.parse_table`): only this device's entries are replaced; the others are
kept, rewritten in schema 2.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

__all__ = ["SCHEMA", "table_entries", "write_table"]

SCHEMA = 2


def table_entries(doc) -> list:
    """The entries for one results document. Raises ``ValueError`` if it timed nothing."""
    if not doc.get("timed"):
        raise ValueError("these results timed nothing (a simulator run); run `python -m bench` on a GPU "
                         "and write the table from its JSON")
    by_shape: dict = {}
    for r in doc["rows"]:
        if r["family"] != "int4gemv" or r.get("method") == "auto" or not r.get("us") or r.get("ok") is False:
            continue
        # The bench times symmetric float16 weights; rows that say otherwise are keyed by it.
        key = (r["N"], r["K"], r.get("M", 1), r.get("block_size", 32), bool(r.get("zero_points", False)),
               r.get("dtype", "float16"))
        by_shape.setdefault(key, []).append(r)
    entries = []
    for (N, K, M, bs, zp, dtype), rows in sorted(by_shape.items()):
        where = {"N": N, "K": K, "M": M, "block_size": bs, "zero_points": zp, "dtype": dtype}
        default = next((r for r in rows if r.get("kernel") == "default"), None)
        warps = [r for r in rows if r.get("kernel") == "single_warp"]
        best_sw = min(warps, key=lambda r: r["us"]) if warps else None
        if best_sw is None and default is None:
            continue
        if best_sw is not None and (default is None or best_sw["us"] < default["us"]):
            note = f"single_warp {best_sw['cols']}x{best_sw['unroll']} {best_sw['us']:.1f} us"
            if default is not None:
                note += f" vs default {default['us']:.1f} us"
            entries.append({**where, "variant": "single_warp", "cols": best_sw["cols"],
                            "unroll": best_sw["unroll"], "note": note})
        else:
            note = f"default {default['us']:.1f} us"
            if best_sw is not None:
                note += f" vs single_warp {best_sw['cols']}x{best_sw['unroll']} {best_sw['us']:.1f} us"
            entries.append({**where, "variant": "default", "cols": None, "unroll": None, "note": note})
    if not entries:
        raise ValueError("these results have no timed int4gemv rows")
    return entries


def write_table(path, doc, source: str) -> dict:
    """Write (or update) the table at ``path`` with ``doc``'s device; returns the whole table."""
    from int4gemv.autotune import parse_table

    path = Path(path)
    table = {"schema": SCHEMA, "devices": {}}
    if path.exists():
        old = json.loads(path.read_text())
        for gpu, by_config in parse_table(old, str(path)).items():   # ValueError if malformed
            entries = [asdict(e) for shapes in by_config.values() for e in shapes.values()]
            table["devices"][gpu] = {"source": old["devices"][gpu].get("source", ""), "entries": entries}
    device = doc["device"]["name"]
    table["devices"][device] = {"source": source, "entries": table_entries(doc)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    return table
