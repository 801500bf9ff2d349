"""The lossless save of a lane beside the git-only save it replaced, on the same content.

Run: .venv/bin/python benchmarks/save_lane.py [--files 50000] [--mb 1024] [--rounds 3]
     .venv/bin/python benchmarks/save_lane.py --halt [--files 50000] [--mb 1024]

Each round makes two lanes with the same content (`--files` untracked files holding
`--mb` MB of random bytes in all, in 100 folders): one a git worktree of the person's
repository, saved the way runs saved before (a temporary index, `git add -A`,
`write-tree`, `commit-tree`, `update-ref` in the shared repository: git keeps only what
git tracks), the other a lane of today's layout, saved with `save_lane` (the same view
commit in the lane's own git dir, fetched into the person's repository, then the
directory moved aside by one rename). The two saves alternate in each round, so load
drift hits both. Printed: each save's seconds, and the ratio lossless / git-only.

`--halt` times a real `tether run` instead: its one agent fills its lane the same way
and waits; the stop is set and the agent let go at once; the figure is from the stop
to the run's exit 3, each round (the agent's last moment, the save, the release).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import anyio
from _common import machine

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@b",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@b",
}


def sh(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args],
        cwd=cwd,
        env=env or ENV,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def fill(root: Path, files: int, total: int, seed: int) -> None:
    """`files` files of random bytes, `total` bytes in all, in 100 folders."""
    size = max(1, total // files)
    rng = __import__("random").Random(seed)
    chunk = rng.randbytes(size + 4096)
    for n in range(files):
        folder = root / f"d{n % 100:02}"
        folder.mkdir(exist_ok=True)
        start = n % 4096
        (folder / f"f{n}.bin").write_bytes(chunk[start : start + size])


def git_only_save(worktree: Path, ref: str) -> None:
    """The save runs made before the lossless one (in a worktree sharing the repo)."""
    index = Path(
        sh(worktree, "rev-parse", "--path-format=absolute", "--git-path", "index")
    )
    tmp = index.with_name("bench-save.index")
    env = {**ENV, "GIT_INDEX_FILE": str(tmp)}
    if index.exists():
        tmp.write_bytes(index.read_bytes())
    base = sh(worktree, "rev-parse", "HEAD")
    staged = sh(worktree, "write-tree", env=env)
    sh(worktree, "add", "-A", env=env)
    tree = sh(worktree, "write-tree", env=env)
    tmp.unlink()
    staged_c = sh(worktree, "commit-tree", staged, "-p", base, "-m", "index")
    commit = sh(worktree, "commit-tree", tree, "-p", base, "-p", staged_c, "-m", "save")
    sh(worktree, "update-ref", "--create-reflog", ref, commit)


def one_round(root: Path, files: int, total: int, n: int) -> tuple[float, float]:
    from tether.runs._lane_git import lane_dir, open_lane, save_lane

    # One person's repository each, so neither save finds the other's objects.
    repos = []
    for which in ("old", "new"):
        repo = root / f"repo-{which}{n}"
        repo.mkdir()
        sh(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("hello\n", encoding="utf-8")
        sh(repo, "add", "README.md")
        sh(repo, "commit", "-qm", "init")
        repos.append(repo)
    old_repo, repo = repos
    worktree = root / f"wt{n}"
    sh(old_repo, "worktree", "add", "-q", "-b", "old", str(worktree), "HEAD")
    lane = lane_dir("run_bench", f"lane_{n}")
    anyio.run(open_lane, repo, lane, "tether/bench")
    fill(worktree, files, total, seed=n)
    fill(lane, files, total, seed=n)
    timings = {}
    order = ("old", "new") if n % 2 == 0 else ("new", "old")
    for which in order:
        # Both start alike: the lane's files in the page cache (an agent just wrote
        # them), nothing waiting to be written back.
        subprocess.run(["sync"], check=True)
        for top in (worktree, lane):
            for path in top.rglob("*.bin"):
                path.read_bytes()
        started = time.perf_counter()
        if which == "old":
            git_only_save(worktree, f"refs/bench/{n}")
        else:
            anyio.run(
                lambda: save_lane(
                    repo, lane, run="run_bench", lane_id=f"lane_{n}", message="bench"
                )
            )
        timings[which] = time.perf_counter() - started
    return timings["old"], timings["new"]


def halt_round(root: Path, files: int, mb: int, n: int) -> float:
    """Seconds from the stop to the run's exit 3, with a lane of `files` files."""
    import sys

    from tether.stop import lift_stop, set_stop

    repo = root / f"halt-repo{n}"
    repo.mkdir()
    sh(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n", encoding="utf-8")
    sh(repo, "add", "README.md")
    sh(repo, "commit", "-qm", "init")
    ready = root / f"ready{n}"
    here = Path(__file__).resolve().parent
    filler = root / "fill.py"
    filler.write_text(
        "import sys\nfrom pathlib import Path\n"
        f"sys.path.insert(0, {str(here)!r})\nfrom save_lane import fill\n"
        f"fill(Path('.'), {files}, {mb << 20}, 0)\n",
        encoding="utf-8",
    )
    script = (
        f"{sys.executable} {filler}; touch {ready}; "
        f"while [ ! -e {ready}.go ]; do sleep 0.05; done"
    )
    plan = root / f"plan{n}.toml"
    plan.write_text(
        "\n".join(
            [
                f'repo = "{repo}"',
                "poll = 0.1",
                "[[stage]]",
                'name = "fill"',
                f"agent = ['sh', '-c', {script!r}]",
                "[[stage]]",
                'name = "next"',
                "agent = ['true']",
                "[[item]]",
                f'id = "big{n}"',
                'brief = "fill"',
                "",
            ]
        ),
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "run", str(plan)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not ready.exists():
        if proc.poll() is not None:
            raise SystemExit(f"the run ended early ({proc.returncode})")
        time.sleep(0.05)
    subprocess.run(["sync"], check=True)
    set_stop("benchmark")
    started = time.perf_counter()
    (root / f"ready{n}.go").touch()
    code = proc.wait()
    took = time.perf_counter() - started
    lift_stop()
    if code != 3:
        raise SystemExit(f"the run exited {code}, not 3 (halted)")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--halt", action="store_true", help="time a real run's halt")
    args = parser.parse_args()
    print(machine())
    print(f"a lane of {args.files} files, {args.mb} MB; {args.rounds} rounds")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        os.environ["TETHER_HOME"] = str(root / "home")
        if args.halt:
            took = [
                halt_round(root, args.files, args.mb, n) for n in range(args.rounds)
            ]
            print(
                "stop -> halted: "
                + ", ".join(f"{t:.2f} s" for t in took)
                + f"; median {statistics.median(took):.2f} s"
            )
            return
        olds, news = [], []
        for n in range(args.rounds):
            old, new = one_round(root, args.files, args.mb << 20, n)
            olds.append(old)
            news.append(new)
            print(
                f"round {n}: git-only {old:.2f} s, lossless {new:.2f} s, {new / old:.2f}x"
            )
        ratios = [new / old for old, new in zip(olds, news, strict=True)]
        print(
            f"git-only median {statistics.median(olds):.2f} s; lossless median "
            f"{statistics.median(news):.2f} s; ratio median {statistics.median(ratios):.2f}x "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}x)"
        )


if __name__ == "__main__":
    main()
