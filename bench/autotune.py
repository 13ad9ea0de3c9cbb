"""Writing ``int4gemv/autotune_table.json`` from a run's results (``python -m bench --write-autotune``).

For every measured ``(N, K)`` the fastest int4gemv configuration wins: the default tiling, or the
single-warp specialization with the tuning (cols, unroll) that was fastest. The table format is the
one :func:`int4gemv.dispatch.load_autotune_table` reads::

    {"schema": 1, "devices": {"NVIDIA H200": {"source": "<results file>", "entries": [
        {"N": 2048, "K": 2048, "variant": "single_warp", "cols": 4, "unroll": 2,
         "note": "single_warp 4x2 41.2 us vs default 80.1 us"}, ...]}}}

Writing merges into an existing file: only this device's entry is replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["SCHEMA", "table_entries", "write_table"]

SCHEMA = 1


def table_entries(doc) -> list:
    """The entries for one results document. Raises ``ValueError`` if it timed nothing."""
    if not doc.get("timed"):
        raise ValueError("these results timed nothing (a simulator run); run `python -m bench` on a GPU "
                         "and write the table from its JSON")
    by_shape: dict = {}
    for r in doc["rows"]:
        if r["family"] != "int4gemv" or r.get("method") == "auto" or not r.get("us") or r.get("ok") is False:
            continue
        by_shape.setdefault((r["N"], r["K"]), []).append(r)
    entries = []
    for (N, K), rows in sorted(by_shape.items()):
        default = next((r for r in rows if r.get("kernel") == "default"), None)
        warps = [r for r in rows if r.get("kernel") == "single_warp"]
        best_sw = min(warps, key=lambda r: r["us"]) if warps else None
        if best_sw is None and default is None:
            continue
        if best_sw is not None and (default is None or best_sw["us"] < default["us"]):
            note = f"single_warp {best_sw['cols']}x{best_sw['unroll']} {best_sw['us']:.1f} us"
            if default is not None:
                note += f" vs default {default['us']:.1f} us"
            entries.append({"N": N, "K": K, "variant": "single_warp", "cols": best_sw["cols"],
                            "unroll": best_sw["unroll"], "note": note})
        else:
            note = f"default {default['us']:.1f} us"
            if best_sw is not None:
                note += f" vs single_warp {best_sw['cols']}x{best_sw['unroll']} {best_sw['us']:.1f} us"
            entries.append({"N": N, "K": K, "variant": "default", "cols": None, "unroll": None, "note": note})
    if not entries:
        raise ValueError("these results have no timed int4gemv rows")
    return entries


def write_table(path, doc, source: str) -> dict:
    """Write (or update) the table at ``path`` with ``doc``'s device; returns the whole table."""
    path = Path(path)
    table = {"schema": SCHEMA, "devices": {}}
    if path.exists():
        table = json.loads(path.read_text())
        if table.get("schema") != SCHEMA:
            raise ValueError(f"{path} has schema {table.get('schema')!r}; this writer knows schema {SCHEMA}")
    device = doc["device"]["name"]
    table["devices"][device] = {"source": source, "entries": table_entries(doc)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    return table
