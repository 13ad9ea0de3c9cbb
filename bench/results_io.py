"""Loading committed benchmark results (the notebook's helpers).

Results documents are the JSON files ``python -m bench`` writes; committed ones live in
``bench/results/``. :func:`load_latest` returns the newest (or ``None``) and :func:`describe` says
in words what a document holds (or that none is committed); :func:`bench.chart.plot` draws one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = [
    "RESULTS_DIR",
    "RUNS_DIR",
    "describe",
    "list_results",
    "load",
    "load_latest",
    "results_dir",
    "rows_frame",
]

RESULTS_DIR = Path(__file__).parent / "results"
#: Where ``python -m bench`` writes without ``--out``: git-ignored (commit a run by passing
#: ``--out bench/results``).
RUNS_DIR = Path(__file__).parent / "runs"


def results_dir() -> Path:
    """Where committed results are read from: ``$BENCH_RESULTS_DIR``, else :data:`RESULTS_DIR`."""
    return Path(os.environ.get("BENCH_RESULTS_DIR") or RESULTS_DIR)


def list_results(directory=None) -> list:
    """Results JSON files in ``directory`` (default :func:`results_dir`), oldest first by date
    (checkpoints of unfinished runs, ``"partial": true``, are skipped)."""
    folder = Path(directory or results_dir())
    docs = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("kind") == "int4gemv-bench" and not doc.get("partial"):
            docs.append((doc.get("date", ""), path))
    return [p for _, p in sorted(docs)]


def load(path) -> dict:
    """One results document. Raises ``ValueError`` if the file is not one."""
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "int4gemv-bench":
        raise ValueError(f"{path} is not an int4gemv benchmark results file")
    doc.setdefault("source", str(path))
    return doc


def load_latest(directory=None, *, timed_only: bool = True):
    """The newest results document in ``directory`` (timed runs only, by default), or ``None``."""
    for path in reversed(list_results(directory)):
        doc = load(path)
        if doc.get("timed") or not timed_only:
            return doc
    return None


def describe(doc, directory=None) -> str:
    """A few lines about ``doc``; for ``None``, that no results are committed yet."""
    if doc is None:
        where = Path(directory or results_dir()).resolve()
        try:
            where = where.relative_to(RESULTS_DIR.parents[1])
        except ValueError:
            pass
        return (f"No benchmark results are committed yet ({where}/*.json holds no timed run). "
                "Run `python -m bench` on a GPU and commit the JSON it writes.")
    from .report import format_summary

    head = (f"{doc.get('source', 'results')}: {doc['device']['name']}, {doc['date']}, "
            f"commit {str(doc['git']['commit'])[:12]}\n$ {doc['command']}")
    return head + "\n" + format_summary(doc)


def rows_frame(doc) -> list:
    """The per-shape rows as ``(shape, N x K, method, µs, GB/s, % copy)`` tuples, for display."""
    return [(r["shape"], f"{r['N']}x{r['K']}", r["method"], r.get("us"), r.get("gbs"), r.get("pct_copy"))
            for r in doc["rows"]]
