"""The README's results tables, regenerated from the committed results files they name.

Every results table of ``README.md`` sits between two markers, the first naming its generator and
its files (paths from the repository root)::

    <!-- generated: KIND FILE [FILE ...] -->
    ...what the generator prints for those files...
    <!-- end generated -->

``KIND``: ``targets`` (:func:`bench.target_table.format_markdown`, one file), ``decode`` (the
header and rows of :mod:`bench.decode_report`, every configuration of every file, in order),
``eager`` (:func:`bench.eager_latency.markdown`, one file), ``probe_default``
(:func:`bench.probe_default.target_table`, one file, as a text block) and ``summary``
(:func:`bench.report.format_summary`, one file, as a text block).

    python -m bench.readme_tables            # check: every block equals its generator's output
    python -m bench.readme_tables --write    # rewrite every block from its files

Pure: reads JSON files and text, needs no GPU.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

__all__ = ["GENERATORS", "generate", "blocks", "regenerate", "main"]

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"<!-- generated: (?P<spec>[^>]*?) -->\n(?P<body>.*?)<!-- end generated -->", re.S)


def _load(path):
    return json.loads((ROOT / path).read_text())


def _one(files):
    if len(files) != 1:
        raise ValueError(f"this kind of table takes one results file; got {len(files)}")
    return _load(files[0])


def _targets(files):
    from .target_table import format_markdown
    return format_markdown(_one(files))


def _decode(files):
    from .decode_report import HEADER, markdown_rows, source_label
    rows = []
    for f in files:
        report = _load(f)
        rows += markdown_rows(report, source_label(f, report))
    return "\n".join([HEADER] + rows)


def _eager(files):
    from .eager_latency import markdown
    return markdown(_one(files))


def _probe_default(files):
    from .probe_default import target_table
    return "```text\n" + target_table(_one(files)["rows"]).rstrip("\n") + "\n```"


def _summary(files):
    from .report import format_summary
    return "```text\n" + format_summary(_one(files)).rstrip("\n") + "\n```"


#: KIND -> generator of the block's text from its files.
GENERATORS = {"targets": _targets, "decode": _decode, "eager": _eager, "probe_default": _probe_default,
              "summary": _summary}


def generate(spec: str) -> str:
    """The text of the block ``spec`` (``"KIND FILE ..."``) names, ending in a newline."""
    kind, *files = spec.split()
    if kind not in GENERATORS:
        raise ValueError(f"unknown table kind {kind!r} in <!-- generated: {spec} -->; kinds: {sorted(GENERATORS)}")
    if not files:
        raise ValueError(f"<!-- generated: {spec} --> names no results file")
    return GENERATORS[kind](files).rstrip("\n") + "\n"


def blocks(text: str) -> list:
    """``(spec, body)`` of every generated block of ``text``, in order."""
    return [(m["spec"], m["body"]) for m in _BLOCK.finditer(text)]


def regenerate(text: str) -> str:
    """``text`` with every generated block's body replaced by its generator's output."""
    return _BLOCK.sub(lambda m: f"<!-- generated: {m['spec']} -->\n{generate(m['spec'])}<!-- end generated -->",
                      text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.readme_tables", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("readme", nargs="?", type=Path, default=ROOT / "README.md")
    p.add_argument("--write", action="store_true", help="rewrite the blocks instead of checking them")
    args = p.parse_args(argv)
    text = args.readme.read_text()
    new = regenerate(text)
    if args.write:
        args.readme.write_text(new)
        print(f"{args.readme}: {len(blocks(new))} generated tables written")
        return 0
    if new == text:
        print(f"{args.readme}: {len(blocks(text))} generated tables, each equal to its generator's output")
        return 0
    sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                               str(args.readme), "regenerated"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
