"""What ``bench.decode_chain`` prints and writes: the per-configuration table, the JSON, the PNG;
and the README's markdown tables, generated from results files:

    python -m bench.decode_report bench/results/decode-chain-*.json   # one markdown row per configuration
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .decode_timeline import plot, print_phases, print_timeline

__all__ = ["print_table", "write_report", "markdown_rows", "source_label", "main"]


def print_table(report: dict, out=sys.stdout) -> None:
    print(f"\n{report['workload']}: {report['layers']} layers, {report['weight_bytes'] / 1e9:.3f} GB/step, "
          f"copy {report['copy_gbs']:.0f} GB/s ({report['copy_source']}), floor {report['floor_us']:.1f} µs, "
          f"tolerance {report['tolerance']:.2e} (ideal fp16 chain {report['ideal_fp16_rel_err']:.2e})", file=out)
    print(f"{'layout':11}{'configuration':30}{'launch':>7}{'µs/step':>9}{'×floor':>8}{'%copy':>7}{'jitter':>8}"
          f"{'rel err':>10}{'lm_head in/alone':>18}{'race':>10}  ok", file=out)
    for r in report["configs"]:
        if "error" in r:
            print(f"{r['layout']:11}{r['label']:30}FAIL  {r['error'][:90]}", file=out)
            continue
        lm = r.get("lm_head", {})
        lm_text = (f"{lm['in_chain_us']:.1f}/{lm['standalone_us']:.1f}" if "in_chain_us" in lm
                   else f"-/{lm['standalone_us']:.1f}" if lm else "-")
        race = f"{r['race']['mismatched']}/{r['race']['runs']}" if "race" in r else "-"
        print(f"{r['layout']:11}{r['label']:30}{r['launches']:>7}{r['us_per_step']:>9.1f}{r['x_floor']:>8.2f}"
              f"{r['pct_copy']:>7.1f}{r['jitter']:>8.3f}{r['rel_err']:>10.2e}{lm_text:>18}{race:>10}  "
              f"{'ok' if r['correct'] else 'FAIL'}", file=out)


def write_report(report: dict, args) -> Path:
    """Write the JSON (and the PNG with ``--png``) and print the tables; returns the JSON path."""
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = args.out / f"decode-chain-{report['device']['name'].replace(' ', '-').lower()}-{stamp}.json"
    path.write_text(json.dumps(report, indent=1))
    for row in report["configs"]:
        if row.get("timeline"):
            print_timeline(row)
        if row.get("phases"):
            print_phases(row)
    if args.png:
        try:
            plot(report, args.png)
        except ImportError as exc:
            print(f"no PNG: {exc} (redraw with python -m bench.decode_timeline {path} --png ...)")
    print_table(report)
    print(f"\nwritten: {path}")
    return path


def markdown_rows(report: dict, source: str) -> list:
    """One markdown table row per configuration of ``report`` (see :func:`main` for the header)."""
    rows = []
    for r in report["configs"]:
        if "error" in r:
            continue
        lm = r.get("lm_head", {})
        lm_text = f"{lm['in_chain_us']:.1f} / {lm['standalone_us']:.1f}" if "in_chain_us" in lm else "—"
        race = f"{r['race']['mismatched']} / {r['race']['runs']}" if "race" in r else "—"
        rows.append(f"| {r['layout']} | `{r['label']}` | {r['launches']} | {r['us_per_step']:.1f} | "
                    f"{r['x_floor']:.2f} | {r['pct_copy']:.1f} | {r['jitter']:.3f} | {r['rel_err']:.1e} | "
                    f"{lm_text} | {race} | {source} |")
    return rows


HEADER = ("| layout | configuration | launches | µs/step | × floor | % of copy | jitter p90/p10 | rel err | "
          "lm_head in chain / alone (µs) | race mismatches | file |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.decode_report",
                                description="One markdown row per configuration of each decode-chain results file.")
    p.add_argument("results", nargs="+", type=Path, help="decode-chain results JSON files")
    files = p.parse_args(argv).results
    print(HEADER)
    for f in files:
        report = json.loads(f.read_text())
        for row in markdown_rows(report, source_label(f, report)):
            print(row)
    return 0


def source_label(path, report: dict) -> str:
    """The ``file`` cell of a results file's rows: its name without ``decode-chain-`` and
    ``.json`` (each committed run's is distinct), and the run's floor."""
    name = Path(path).name.removeprefix("decode-chain-").removesuffix(".json")
    return f"{name} ({report['floor_us']:.1f} µs floor)"


if __name__ == "__main__":
    sys.exit(main())
