"""Workloads: the projections of one decode step, read from package data with a checked schema.

A workload file (``int4gemv/workloads/*.json``, installed with the package) lists the projections
of one decode step, each with ``name``, ``N``, ``K`` and ``per_step`` (how many times one step runs
it), plus ``model.num_hidden_layers`` and ``block_size``. :func:`load_workload` reads one and checks
it (``ValueError`` naming the file and the field). From a workload:

* :func:`bench_shapes` gives the distinct ``(N, K)`` a run measures (projections sharing a shape
  are measured once and named together), plus the merged shapes of :data:`MERGES`;
* :func:`step_projections` lists every launch of one step, separate or merged.

Merged projections read the same input and are the same layout concatenated along N: q/k/v become
one ``qkv_proj`` weight and gate/up one ``gate_up_proj`` weight, so a layer needs 4 launches
instead of 7.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .weights import weight_bytes

__all__ = [
    "DEFAULT_WORKLOAD",
    "INPUTS",
    "MERGES",
    "SIM_WORKLOAD",
    "Launch",
    "Shape",
    "bench_shapes",
    "check_workload",
    "load_workload",
    "select_shapes",
    "step_bytes",
    "step_projections",
    "workload_names",
]

#: The workload :func:`load_workload` reads by default (a file name under ``int4gemv/workloads``).
DEFAULT_WORKLOAD = "qwen3_vl_2b_decode"

#: Merged groups: one weight per group, parts concatenated along N in this order.
MERGES = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}

#: Which activation vector a projection reads; every other projection reads ``"hidden"``.
INPUTS = {"o_proj": "attn", "down_proj": "mlp"}

#: A tiny workload of the same structure for Numba's simulator (one layer, N=8, K=32: each
#: simulated launch of these costs about half a second on one core).
SIM_WORKLOAD = {
    "name": "tiny-simulator",
    "description": "One layer of 8x32 projections: exercises every code path on the simulator.",
    "block_size": 32,
    "model": {"num_hidden_layers": 1},
    "projections": [{"name": n, "N": 8, "K": 32, "per_step": 1} for n in (
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")],
}

_BLOCK_SIZES = (16, 32, 64, 128)


def workload_names() -> list:
    """The workloads installed with the package (names for :func:`load_workload`)."""
    folder = resources.files("int4gemv") / "workloads"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_workload(source=None) -> dict:
    """A checked workload: ``None`` (:data:`DEFAULT_WORKLOAD`), the name of an installed workload
    (see :func:`workload_names`) or a path to a JSON file. Raises ``ValueError`` naming the file
    and what is wrong with it."""
    source = DEFAULT_WORKLOAD if source is None else source
    if isinstance(source, str) and source in workload_names():
        where = f"int4gemv/workloads/{source}.json"
        text = (resources.files("int4gemv") / "workloads" / f"{source}.json").read_text()
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"workload {str(source)!r} is neither an installed workload "
                             f"({', '.join(workload_names())}) nor a file")
        where, text = str(path), path.read_text()
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    return check_workload(doc, where)


def check_workload(doc, where: str = "workload") -> dict:
    """``doc`` itself if it is a well-formed workload, else ``ValueError`` naming the field."""
    def fail(what):
        raise ValueError(f"{where}: {what}")

    if not isinstance(doc, dict):
        fail(f"must be a JSON object, got {type(doc).__name__}")
    if not isinstance(doc.get("name"), str) or not doc["name"]:
        fail("'name' must be a non-empty string")
    if doc.get("block_size", 32) not in _BLOCK_SIZES:
        fail(f"'block_size' must be one of {_BLOCK_SIZES}, got {doc.get('block_size')!r}")
    layers = (doc.get("model") or {}).get("num_hidden_layers") if isinstance(doc.get("model"), dict) else None
    if not _positive_int(layers):
        fail(f"'model.num_hidden_layers' must be a positive integer, got {layers!r}")
    projections = doc.get("projections")
    if not isinstance(projections, list) or not projections:
        fail("'projections' must be a non-empty list")
    seen = set()
    for i, p in enumerate(projections):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not p["name"]:
            fail(f"projections[{i}] must be an object with a non-empty 'name'")
        if p["name"] in seen:
            fail(f"projections[{i}]: name {p['name']!r} appears twice")
        seen.add(p["name"])
        for key in ("N", "K", "per_step"):
            if not _positive_int(p.get(key)):
                fail(f"projections[{i}] ({p['name']}): {key!r} must be a positive integer, got {p.get(key)!r}")
        if p["K"] % 8:
            fail(f"projections[{i}] ({p['name']}): 'K' must be a multiple of 8, got {p['K']}")
    return doc


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class Shape:
    """One ``(N, K)`` a run measures; ``names`` are the projections with this shape."""

    names: tuple
    N: int
    K: int
    per_step: int          # launches of this shape in one decode step (separate layout)
    merged: bool = False   # a merged group (see MERGES)

    @property
    def label(self) -> str:
        return "/".join(self.names)


@dataclass(frozen=True)
class Launch:
    """One launch of a decode step: ``layer`` (-1 for lm_head), projection ``name``, its input."""

    layer: int
    name: str
    N: int
    K: int
    input: str
    parts: tuple = ()      # merged: the projections it replaces, in concatenation order


def _by_name(workload):
    return {p["name"]: p for p in workload["projections"]}


def bench_shapes(workload: dict, *, merged: bool = True) -> list:
    """Distinct shapes of ``workload`` in file order, then its merged shapes (when ``merged``)."""
    shapes: dict = {}
    for p in workload["projections"]:
        key = (p["N"], p["K"])
        names, per_step = shapes.get(key, ((), 0))
        shapes[key] = (names + (p["name"],), per_step + p["per_step"])
    out = [Shape(names, N, K, per_step) for (N, K), (names, per_step) in shapes.items()]
    if merged:
        projections = _by_name(workload)
        for group, parts in MERGES.items():
            if all(p in projections for p in parts):
                first = projections[parts[0]]
                out.append(Shape((group,), sum(projections[p]["N"] for p in parts), first["K"],
                                 first["per_step"], merged=True))
    return out


def select_shapes(shapes: list, wanted) -> list:
    """The shapes named in ``wanted`` (projection or group names, or ``NxK``); all if empty.

    Raises ``ValueError`` naming an unknown entry and the accepted names.
    """
    if not wanted:
        return list(shapes)
    chosen = []
    for item in wanted:
        hits = [s for s in shapes if item in s.names or item == f"{s.N}x{s.K}"]
        if not hits:
            accepted = sorted({n for s in shapes for n in s.names} | {f"{s.N}x{s.K}" for s in shapes})
            raise ValueError(f"unknown shape {item!r}; accepted: {', '.join(accepted)}")
        chosen += [s for s in hits if s not in chosen]
    return chosen


def step_projections(workload: dict, *, merged: bool) -> list:
    """Every launch of one decode step, layer by layer, then the per-step projections.

    Projections with ``per_step`` equal to the layer count run once per layer; the others
    (lm_head) run ``per_step`` times after the layers. With ``merged``, each complete group of
    :data:`MERGES` is one launch at the position of its first part.
    """
    layers = workload["model"]["num_hidden_layers"]
    projections = workload["projections"]
    per_layer = [p for p in projections if p["per_step"] == layers]
    tail = [p for p in projections if p["per_step"] != layers]
    by_name = _by_name(workload)
    groups = {parts[0]: (group, parts) for group, parts in MERGES.items()
              if merged and all(p in by_name and by_name[p]["per_step"] == layers for p in parts)}
    skipped = {p for _, parts in groups.values() for p in parts[1:]}
    launches = []
    for layer in range(layers):
        for p in per_layer:
            name = p["name"]
            if name in skipped:
                continue
            if name in groups:
                group, parts = groups[name]
                launches.append(Launch(layer, group, sum(by_name[q]["N"] for q in parts), p["K"],
                                       INPUTS.get(name, "hidden"), parts))
            else:
                launches.append(Launch(layer, name, p["N"], p["K"], INPUTS.get(name, "hidden")))
    for p in tail:
        launches += [Launch(-1, p["name"], p["N"], p["K"], INPUTS.get(p["name"], "hidden"))
                     for _ in range(p["per_step"])]
    return launches


def step_bytes(launches: list, block_size: int = 32) -> int:
    """Weight bytes one step reads (the same for separate and merged launches)."""
    return sum(weight_bytes(x.N, x.K, block_size) for x in launches)
