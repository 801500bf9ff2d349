"""From `tether stop` to a run halted: an idle run, and a run with two busy agents.

Idle: `tether run PLAN --follow` on an empty queue (nothing to do, reading the stop every
poll interval). The stop is set at a random moment of the poll cycle through the real
stop path (`set_stop()`, what `tether stop` calls); the figure is the time from the
stop's write to the `halted` row in the run's ledger. Target: ≤ poll interval + 100 ms.

Busy: two agents each in a call of `--call` seconds when the stop is set; the figures
are the time from the stop to `halted` (includes the calls' rest, by design: a stop
never cuts a call) and from the end of the last call (its receipt) to `halted` (the
saves and releases of the halt).

Big lane (`--big`): one agent fills its lane with `--files` files of `--mb` MB in all
(a few large files and many small ones, random bytes) and waits in its call; the stop is
set then, and the figure is the time from the `stop-observed` row to `halted` in the
ledger (the call's rest is over by design once the agent sees the stop, so the figure
is the halt's own cost: the receipt, the save and the release). Target (spec 05):
<= 2 s whatever the lane holds.

    .venv/bin/python benchmarks/halt_latency.py --runs 20 --poll 2.0
    .venv/bin/python benchmarks/halt_latency.py --big --runs 1 --files 50000 --mb 1024
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, summary

PLAN = """\
repo = "{repo}"
lanes = 2
poll = {poll}

[[stage]]
name = "work"
agent = ["sh", "-c", 'touch "$MARKS/$TETHER_ITEM"; sleep {call}']
{items}
"""


BIG_PLAN = """\
repo = "{repo}"
lanes = 1
poll = {poll}

[[stage]]
name = "work"
agent = ["sh", "-c", '{python} {fill} . {files} {mb} && touch "$MARKS/filled"; while [ ! -e "$MARKS/go" ]; do sleep 0.05; done']

[[stage]]
name = "review"
agent = ["true"]

[[item]]
id = "big"
brief = "b"
"""

FILL = """\
import os, sys
files, mb = int(sys.argv[2]), int(sys.argv[3])
os.chdir(sys.argv[1])
big = max(1, min(16, files // 1000))
small = files - big
small_size = 4096
left = mb * (1 << 20) - small * small_size
block = os.urandom(1 << 20)
for i in range(big):
    size = left // big
    fd = os.open(f"big{i}.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, os.urandom(64))
    size -= 64
    while size > 0:
        n = os.write(fd, block[: min(size, len(block))])
        size -= n
    os.close(fd)
noise = os.urandom(small_size + 256)
for i in range(small):
    folder = f"d{i // 500:03d}"
    if i % 500 == 0:
        os.mkdir(folder)
    fd = os.open(f"{folder}/f{i}.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, noise[i % 256 : i % 256 + small_size])
    os.close(fd)
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _setup(root: Path, *, poll: float, call: float, items: list[str]) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(
        repo,
        "-c",
        "user.email=a@b",
        "-c",
        "user.name=a",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "init",
    )
    blocks = "".join(f'\n[[item]]\nid = "{i}"\nbrief = "b"\n' for i in items)
    plan = root / "plan.toml"
    plan.write_text(
        PLAN.format(repo=repo, poll=poll, call=call, items=blocks), encoding="utf-8"
    )
    return plan


def _one(poll: float, call: float, busy: bool) -> tuple[float, float | None]:
    from tether.runs._open import default_store_path
    from tether.runs._sqlite import SqliteStore
    from tether.stop import set_stop

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["TETHER_HOME"] = str(root / "home")
        marks = root / "marks"
        marks.mkdir()
        items = ["a", "b"] if busy else []
        plan = _setup(root, poll=poll, call=call, items=items)
        args = [sys.executable, "-m", "tether", "run", str(plan)]
        if not busy:
            args.append("--follow")
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "MARKS": str(marks), "TETHER_WRITABLE": str(marks)},
        )
        assert proc.stdout is not None
        run = proc.stdout.readline().split()[1]
        if busy:
            while len(list(marks.iterdir())) < 2:
                time.sleep(0.005)
        else:
            time.sleep(poll * (1 + random.random()))  # anywhere in a poll cycle
        set_stop("benchmark")
        stopped_at = time.time()
        proc.communicate(timeout=120)
        assert proc.returncode == 3, proc.returncode
        store = SqliteStore.open(default_store_path())
        events = store.events(run)
        store.close()
        halted = next(e.at for e in events if e.kind == "halted")
        receipts = [e.at for e in events if e.kind == "receipt"]
        after_calls = halted - max(receipts) if receipts else None
        return halted - stopped_at, after_calls


def _big(poll: float, files: int, mb: int) -> tuple[float, float, float]:
    """One big-lane halt: (build seconds, stop seen -> halted, call's end -> halted)."""
    from tether.runs._open import default_store_path
    from tether.runs._sqlite import SqliteStore
    from tether.stop import set_stop

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["TETHER_HOME"] = str(root / "home")
        marks = root / "marks"
        marks.mkdir()
        plan = _setup(root, poll=poll, call=0, items=[])
        fill = root / "fill.py"
        fill.write_text(FILL, encoding="utf-8")
        plan.write_text(
            BIG_PLAN.format(
                repo=root / "repo",
                poll=poll,
                python=sys.executable,
                fill=fill,
                files=files,
                mb=mb,
            ),
            encoding="utf-8",
        )
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether", "run", str(plan)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "MARKS": str(marks), "TETHER_WRITABLE": str(marks)},
        )
        assert proc.stdout is not None
        run = proc.stdout.readline().split()[1]
        while not (marks / "filled").exists():
            if proc.poll() is not None:
                raise SystemExit(f"the run ended early: {proc.returncode}")
            time.sleep(0.05)
        built = time.monotonic() - started
        set_stop("benchmark")
        (marks / "go").touch()
        proc.communicate(timeout=1800)
        assert proc.returncode == 3, proc.returncode
        store = SqliteStore.open(default_store_path())
        events = store.events(run)
        store.close()
        seen = next(e.at for e in events if e.kind == "stop-observed")
        halted = next(e.at for e in events if e.kind == "halted")
        ended = max(e.at for e in events if e.kind == "receipt")
        for e in events:
            if seen <= e.at <= halted:
                print(f"    {(e.at - seen) * 1000:8.1f} ms  {e.kind} {e.detail or ''}")
        return built, halted - seen, halted - ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--call", type=float, default=1.0)
    parser.add_argument("--big", action="store_true", help="one lane of --files/--mb")
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--mb", type=int, default=1024)
    args = parser.parse_args()
    print(machine())
    if args.big:
        big = [_big(args.poll, args.files, args.mb) for _ in range(args.runs)]
        print(f"  lane filled in {max(b[0] for b in big):.1f} s at most")
        print(
            summary(
                f"a lane of {args.files} files / {args.mb} MB, stop seen -> halted",
                [b[1] for b in big],
            )
        )
        print(summary("  the call's end -> halted", [b[2] for b in big]))
        print(f"  target: <= 2000 ms; max {max(b[1] for b in big) * 1000:.1f} ms")
        return
    idle = [_one(args.poll, args.call, False)[0] for _ in range(args.runs)]
    print(summary(f"idle run, stop -> halted (poll {args.poll} s)", idle))
    print(
        f"  target: <= {args.poll * 1000 + 100:.0f} ms; max {max(idle) * 1000:.1f} ms"
    )
    busy = [_one(args.poll, args.call, True) for _ in range(args.runs)]
    print(
        summary(
            f"two busy agents ({args.call} s calls), stop -> halted",
            [b[0] for b in busy],
        )
    )
    print(
        summary("  last call's end -> halted", [b[1] for b in busy if b[1] is not None])
    )


if __name__ == "__main__":
    main()
