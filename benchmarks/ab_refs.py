"""Run one benchmark on two git refs of this repository, alternating, in one run.

Usage: python benchmarks/ab_refs.py BEFORE AFTER [--runs 6] -- benchmarks/x.py [args...]

Each ref is exported (``git archive``) into a temporary directory; the runs
alternate (before, after, after, before, ...), each a fresh process with that
tree first on ``PYTHONPATH`` and the benchmark taken from that tree. Every
table row of the benchmark's output that ends in a bold ratio (``**0.95**``)
is collected; the summary gives, per ref and row, the median of those ratios
over the runs and their range.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

_RATIO = re.compile(r"^\|\s*([^|]+?)\s*\|.*\*\*([0-9.]+)\*\*")


def _export(ref: str, into: str) -> str:
    """The files of ``ref`` (as committed) in a new directory under ``into``."""
    tree = os.path.join(into, "tree")
    os.mkdir(tree)
    archive = subprocess.run(["git", "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    return tree


def main() -> None:
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args(argv[:split])
    bench = argv[split + 1 :]
    if not bench or args.runs < 1:
        parser.error("name a benchmark after --, and --runs >= 1")
    ratios: Dict[str, Dict[str, List[float]]] = {args.before: {}, args.after: {}}
    with tempfile.TemporaryDirectory() as before_dir, tempfile.TemporaryDirectory() as after_dir:
        trees = {
            args.before: _export(args.before, before_dir),
            args.after: _export(args.after, after_dir),
        }
        for run in range(args.runs):
            order = (args.before, args.after) if run % 2 == 0 else (args.after, args.before)
            for ref in order:
                tree = trees[ref]
                env = {**os.environ, "PYTHONPATH": tree}
                done = subprocess.run(
                    [sys.executable, os.path.join(tree, bench[0]), *bench[1:]],
                    cwd=tree,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=1800,
                    check=True,
                )
                for line in done.stdout.splitlines():
                    found = _RATIO.match(line)
                    if found:
                        print(f"run {run + 1} {ref}: {line}")
                        ratios[ref].setdefault(found.group(1), []).append(float(found.group(2)))
    print(f"\n{args.runs} runs each, alternating; median of the runs' ratios (range):")
    print(f"| row | {args.before} | {args.after} |")
    print("| --- | --- | --- |")
    for row in ratios[args.before]:
        cells = []
        for ref in (args.before, args.after):
            got = ratios[ref].get(row, [])
            cells.append(
                f"**{statistics.median(got):.2f}** ({min(got):.2f}..{max(got):.2f})" if got else "-"
            )
        print(f"| {row} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
