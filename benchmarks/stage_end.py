"""A lane's stage end with S16 in force beside the one it replaced, on the same content.

Run: .venv/bin/python benchmarks/stage_end.py [--files 50000] [--mb 1024] [--rounds 3]

The person's repository holds `--files` committed files (`--mb` MB in all, in 100
folders). Each round opens two lanes of it with `open_lane` and lets an "agent" change
`--changed` files and add as many in each; then one lane ends its stage the way runs did
before S16 (`git status --porcelain`, `git add -A`, `git commit` run in the lane, which
honoured the lane's own config) and the other with `commit_leftovers` (tether's walk of
the lane, `fast-import` into tether's own git dir, the branch and index written as
data). The two alternate in each round. Printed: each one's seconds, the ratio S16 /
before (target <= 1.2), and the same for a view (`make_view`, unchanged lane).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from save_lane import ENV, fill, sh

_OLD = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "gc.auto=0",
    "-c",
    "commit.gpgSign=false",
)


def old_stage_end(lane: Path) -> None:
    """What `commit_leftovers` ran before S16, in the lane."""

    def run(*args: str) -> str:
        return subprocess.run(
            ["git", *_OLD, *args],
            cwd=lane,
            env=ENV,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    run("symbolic-ref", "-q", "HEAD")
    if run("status", "--porcelain"):
        run("add", "-A")
        run("commit", "-q", "--no-verify", "-m", "work")
    run("rev-parse", "HEAD")


def agent_work(lane: Path, changed: int, n: int) -> None:
    for k in range(changed):
        folder = lane / f"d{k % 100:02}"
        (folder / f"f{k}.bin").write_bytes(os.urandom(512) + str(n).encode())
        (folder / f"new{n}-{k}.txt").write_text(f"new {n} {k}\n", encoding="utf-8")


async def rounds(args: argparse.Namespace, root: Path) -> None:
    from tether.runs._lane_git import commit_leftovers, lane_dir, make_view, open_lane

    repo = root / "repo"
    repo.mkdir()
    sh(repo, "init", "-q", "-b", "main")
    t0 = time.perf_counter()
    fill(repo, args.files, args.mb << 20, 1)
    sh(repo, "add", "-A")
    sh(repo, "commit", "-qm", "content")
    print(f"repository made in {time.perf_counter() - t0:.1f} s")
    old_t: list[float] = []
    new_t: list[float] = []
    view_t: list[float] = []
    old_view_t: list[float] = []
    for n in range(args.rounds):
        old = lane_dir("run_bench", f"old_{n}")
        new = lane_dir("run_bench", f"new_{n}")
        await open_lane(repo, old, f"old-{n}")
        await open_lane(repo, new, f"new-{n}")
        await anyio.sleep(0.5)  # files older than the racy window, as after a stage
        for lane in (old, new):
            agent_work(lane, args.changed, n)
        order = [("old", old), ("new", new)]
        if n % 2:
            order.reverse()
        for which, lane in order:
            start = time.perf_counter()
            if which == "old":
                old_stage_end(lane)
                old_t.append(time.perf_counter() - start)
            else:
                await commit_leftovers(lane, "work")
                new_t.append(time.perf_counter() - start)
        # A view of an unchanged lane (the halt's, made after the release).
        start = time.perf_counter()
        await anyio.run_process(
            ["git", *_OLD, "status", "--porcelain"], cwd=old, env=ENV
        )
        old_view_t.append(time.perf_counter() - start)
        start = time.perf_counter()
        await make_view(repo, new, message="v")
        view_t.append(time.perf_counter() - start)
    med = statistics.median
    print(f"stage end before S16:  {med(old_t):.3f} s  {[round(x, 3) for x in old_t]}")
    print(f"stage end with S16:    {med(new_t):.3f} s  {[round(x, 3) for x in new_t]}")
    print(f"  ratio S16 / before: {med(new_t) / med(old_t):.2f} (target <= 1.2)")
    print(f"unchanged lane, git status before: {med(old_view_t):.3f} s")
    print(f"unchanged lane, S16 view (walk + fetch): {med(view_t):.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50000)
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--changed", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    print(f"{args.files} files, {args.mb} MB, {args.changed} changed + added per stage")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TETHER_HOME"] = str(Path(tmp) / "home")
        anyio.run(rounds, args, Path(tmp))


if __name__ == "__main__":
    main()
