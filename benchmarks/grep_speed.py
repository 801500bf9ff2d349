"""Grep tool speed against plain `rg` on the same tree (ratio of medians).

Run: .venv/bin/python benchmarks/grep_speed.py [--runs N]
Target (spec 05): the tool runs at >= 0.9x the speed of plain rg.

Both sides run the same `rg` binary (the `ripgrep` wheel's) on a tree of about 500k
lines. "Plain rg" is `subprocess.run([rg, <user flags>, pattern])` with its output
captured; the tool is `await Grep().run(...)` with the equivalent input, which adds its
own flags (.gitignore outside git, hidden files, `.git` skipped, long-line previews) and
its Python-side output handling. A third side runs rg blocking with exactly the tool's
command line, to tell the cost of the flags from the cost of the wrapper. The sides run
in a shuffled order each round; the figure is median(plain) / median(tool), so above 1.0
means the tool was faster.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _common import machine, write_tree

from tether.host import ToolContext
from tether.host.tools.grep import Grep, GrepInput, build_argv, rg_path

CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "files_with_matches, common word",
        {"pattern": "tether"},
        ["--files-with-matches", "-e", "tether"],
    ),
    (
        "content -n, rare match",
        {"pattern": "omega omega omega omega", "output_mode": "content"},
        ["--line-number", "-e", "omega omega omega omega"],
    ),
    (
        "count, common word",
        {"pattern": "gamma", "output_mode": "count"},
        ["--count", "-e", "gamma"],
    ),
    (
        "files_with_matches -i, regex",
        {"pattern": r"stop\s+read\s+grep", "-i": True},
        ["--files-with-matches", "-i", "-e", r"stop\s+read\s+grep"],
    ),
]


def run_plain(argv: list[str], tree: Path) -> float:
    """Run rg blocking, output captured; return the seconds it took."""
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=tree, capture_output=True, check=False)
    return time.perf_counter() - t0


async def main(runs: int) -> None:
    rg = rg_path()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        lines = write_tree(tree, dirs=50, files=20, lines=500, seed=5)
        ctx = ToolContext(call_id="c", session_id="s", workspace=tree)
        tool = Grep()
        print(f"machine: {machine()}")
        print(f"tree: {lines} lines in 1000 files; rg {rg}; {runs} runs per side")
        ratios = []
        for name, args, flags in CASES:
            validated = tool.validate(args)
            same = build_argv(GrepInput.model_validate(validated), rg)
            times: dict[str, list[float]] = {"plain": [], "same": [], "tool": []}
            for i in range(runs + 3):
                order = list(times)
                rng.shuffle(order)  # no side always runs first (caches, frequency)
                for side in order:
                    if side == "tool":
                        t0 = time.perf_counter()
                        await tool.run(ctx, validated)
                        took = time.perf_counter() - t0
                    else:
                        argv = [rg, *flags] if side == "plain" else same
                        # The baselines are blocking rg, with no event loop in the way.
                        took = run_plain(argv, tree)
                    if i >= 3:  # warm-up runs are not counted
                        times[side].append(took)
            med = {side: statistics.median(v) for side, v in times.items()}
            ratio = med["plain"] / med["tool"]
            ratios.append(ratio)
            print(
                f"{name}: plain rg {med['plain'] * 1e3:.2f} ms, rg with the tool's "
                f"flags {med['same'] * 1e3:.2f} ms, Grep tool {med['tool'] * 1e3:.2f} ms;"
                f" speed vs plain rg {ratio:.3f}x, vs same flags "
                f"{med['same'] / med['tool']:.3f}x"
            )
        print(f"lowest ratio vs plain rg: {min(ratios):.3f}x (target >= 0.9x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    anyio.run(main, parser.parse_args().runs)
