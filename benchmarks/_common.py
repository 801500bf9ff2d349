"""Shared helpers for the benchmarks: percentiles and the machine they ran on."""

from __future__ import annotations

import os
import platform
import random
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[rank]


def summary(name: str, seconds: Sequence[float], unit: str = "ms") -> str:
    """One line: count, p50, p90, p99, max in the unit."""
    scale = {"ms": 1e3, "us": 1e6}[unit]
    p = {q: percentile(seconds, q) * scale for q in (50, 90, 99)}
    return (
        f"{name}: n={len(seconds)} p50={p[50]:.3f}{unit} p90={p[90]:.3f}{unit} "
        f"p99={p[99]:.3f}{unit} max={max(seconds) * scale:.3f}{unit} "
        f"mean={statistics.fmean(seconds) * scale:.3f}{unit}"
    )


def machine() -> str:
    """The machine, for the figures' record."""
    return f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}, {platform.platform()}"


WORDS = ["alpha", "beta", "gamma", "delta", "tether", "stop", "read", "grep", "omega"]


def write_tree(root: Path, *, dirs: int, files: int, lines: int, seed: int) -> int:
    """Write `dirs * files * lines` lines of varied words under `root`; return the count."""
    rng = random.Random(seed)
    for d in range(dirs):
        directory = root / f"d{d:02}"
        directory.mkdir(parents=True)
        for f in range(files):
            words = rng.choices(WORDS, k=lines * 10)
            text = "".join(
                " ".join(words[n * 10 : n * 10 + 10]) + f" {n}\n" for n in range(lines)
            )
            (directory / f"f{f:02}.txt").write_text(text, encoding="utf-8")
    return dirs * files * lines
