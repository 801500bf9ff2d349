"""Run one benchmark against two versions of tether in turn: before and after a change.

The same benchmark script (this checkout's) runs against the `src/` of a git revision
(`--base`, checked out into a temporary worktree) and against this checkout's `src/`,
alternating which goes first round by round so that load drift hits both; each run's output is printed
with its label, and a line with the machine, the date and the load average heads it.
Compare the figures the benchmark prints for each (its floor is measured in the same
process, so each ratio is taken against its own floor).

Run: `.venv/bin/python benchmarks/side_by_side.py --base REV [--rounds N] --
benchmarks/stop_read.py --samples 20000`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return (
        f"{platform.node()} {platform.release()} {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {when}, "
        f"load {load}"
    )


def _run(label: str, src: Path, command: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(src)}
    print(f"--- {label} ({src}) load {os.getloadavg()[0]:.2f}", flush=True)
    done = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=env, check=False, text=True
    )
    if done.returncode != 0:
        print(f"--- {label}: exit {done.returncode}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision measured before")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the benchmark after --")
    print(f"# {_machine()}")
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        text=True,
        check=True,
        capture_output=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="tether-base-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(base), args.base],
            cwd=ROOT,
            check=True,
        )
        try:
            for round_ in range(1, args.rounds + 1):
                print(f"# round {round_} of {args.rounds}", flush=True)
                pair = [
                    (f"before ({args.base})", base / "src"),
                    (f"after ({head})", ROOT / "src"),
                ]
                for label, src in pair if round_ % 2 else pair[::-1]:
                    _run(label, src, command)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)],
                cwd=ROOT,
                check=False,
            )


if __name__ == "__main__":
    main()
