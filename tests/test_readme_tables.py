"""The README's results tables are their generators' output for the committed files they name
(``bench/readme_tables.py``), and every table of figures in the README is one of them."""

import re
from pathlib import Path

import pytest

from bench.readme_tables import blocks, generate, main, regenerate

README = Path(__file__).resolve().parents[1] / "README.md"
#: The README's tables that hold no measured figure (their header rows).
PLAIN_TABLES = {"| path | what |"}


def test_every_generated_table_is_its_generators_output():
    text = README.read_text()
    found = blocks(text)
    assert len(found) >= 20 and {spec.split()[0] for spec, _ in found} == {"targets", "decode", "eager",
                                                                           "probe_default", "summary"}
    for spec, body in found:
        assert body == generate(spec), f"README block '{spec}' is not its generator's output " \
                                       "(python -m bench.readme_tables --write regenerates it)"
    assert main([str(README)]) == 0


def test_every_table_of_figures_is_generated():
    outside = re.sub(r"<!-- generated: [^>]*? -->\n.*?<!-- end generated -->", "", README.read_text(), flags=re.S)
    lines = outside.splitlines()
    headers = [line for i, line in enumerate(lines)
               if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))]
    assert set(headers) <= PLAIN_TABLES, [h for h in headers if h not in PLAIN_TABLES]


def test_an_edited_cell_or_a_dropped_row_is_caught(tmp_path):
    text = README.read_text()
    spec, body = next((s, b) for s, b in blocks(text) if s.startswith("targets"))
    row = next(line for line in body.splitlines() if line.startswith("| ") and "%)" in line)
    edited = row.replace("%)", "%) ", 1)
    for changed in (body.replace(row, edited), body.replace(row + "\n", "")):
        readme = tmp_path / "README.md"
        readme.write_text(text.replace(body, changed))
        assert main([str(readme)]) == 1
        assert regenerate(readme.read_text()) == text
    assert main([str(readme), "--write"]) == 0 and readme.read_text() == text


def test_a_block_names_a_known_generator_and_its_files():
    with pytest.raises(ValueError, match="unknown table kind 'typed'"):
        generate("typed bench/results/x.json")
    with pytest.raises(ValueError, match="names no results file"):
        generate("targets")
    with pytest.raises(ValueError, match="takes one results file; got 2"):
        generate("eager bench/results/a.json bench/results/b.json")
