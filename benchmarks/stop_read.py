"""Time one stop read with every check, beside a bare `os.stat` of the same file.

Builds a shared folder for real (under /srv when run as root, else under the temp dir),
with the person's uid directory and a stop in it, then times, call by call:

- `os.stat(stop)`: the floor, one system call by path;
- `StopStore.read()`: the walk from `/`, the filesystem type, the scan for other
  accounts' stops, the uid directory, the gate, the open and the fstat;
- `StopWatch.read()`: what a run does before each move (pins compared, setup and
  binding watched, the root's mount compared, what cannot change unseen reused, the
  chain looked up through the directories it holds open).

The folder is left unchanged for a second before timing, as a run's folder is between
two settings (a folder changed within the last second is listed on every read).
`--busy N` runs N busy loops (`yes > /dev/null`) beside the timing, killed after.
Besides the wall-clock percentiles, `cpu` is the thread's CPU time per call (the mean
over all calls), which a loaded machine changes less.

Run: `.venv/bin/python benchmarks/stop_read.py [--samples N] [--busy N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


def _percentiles(samples: list[int]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    return {
        "p50": at(0.50),
        "p90": at(0.90),
        "p99": at(0.99),
        "mean": statistics.fmean(ordered) / 1000,
    }


def _time(fn: Callable[[], object], samples: int) -> dict[str, float]:
    for _ in range(samples // 10):
        fn()
    out: list[int] = []
    clock = time.perf_counter_ns
    cpu = time.thread_time_ns()
    for _ in range(samples):
        start = clock()
        fn()
        out.append(clock() - start)
    cpu = time.thread_time_ns() - cpu
    return {**_percentiles(out), "cpu": cpu / samples / 1000}


def _settle(folder: Path) -> None:
    """Wait until the folder's last change is more than `SETTLED_NS` in the past."""
    from tether.stop._read_memo import SETTLED_NS

    age = time.time_ns() - os.stat(folder).st_ctime_ns
    if age <= SETTLED_NS:
        time.sleep((SETTLED_NS - age) / 1e9 + 0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside")
    args = parser.parse_args()
    busy = [
        subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.busy)
    ]
    home = Path(tempfile.mkdtemp(prefix="tether-bench-home-"))
    os.environ["TETHER_HOME"] = str(home)
    from tether.stop import ReadOutcome, SetupRecord, StopStore
    from tether.stop._setup import save_setup

    root = (
        Path("/srv")
        if os.geteuid() == 0 and Path("/srv").is_dir()
        else Path(tempfile.gettempdir())
    )
    folder = root / f"tether-bench-{os.getpid()}"
    folder.mkdir()
    os.chmod(folder, 0o1777 if os.stat(root).st_uid == 0 else 0o755)
    uid_dir = folder / str(os.geteuid())
    uid_dir.mkdir(mode=0o755)
    stop = uid_dir / "stop"
    try:
        record = SetupRecord(folder=folder, person_uid=os.geteuid())
        save_setup(record)
        store = StopStore.from_setup()
        _settle(folder)
        load = os.getloadavg()[0]
        rows: list[tuple[str, dict[str, float]]] = []
        for state in ("STOPPED", "CLEAR"):
            if state == "STOPPED":
                stop.touch()
                os.chmod(stop, 0o1644)
                target = stop
            else:
                stop.unlink()
                target = uid_dir
            watch = store.watch()
            assert store.read().outcome is ReadOutcome(state)
            assert watch.read().outcome is ReadOutcome(state)
            rows.append(
                (
                    f"os.stat ({state.lower()}: {target.name})",
                    _time(lambda t=target: os.stat(t), args.samples),
                )
            )
            rows.append((f"StopStore.read() {state}", _time(store.read, args.samples)))
            rows.append((f"StopWatch.read() {state}", _time(watch.read, args.samples)))
        print(
            f"folder: {folder} (depth {len(folder.parts) - 1}); samples per row: "
            f"{args.samples}; busy loops: {args.busy}; load average "
            f"{load:.2f} before, {os.getloadavg()[0]:.2f} after"
        )
        print(
            f"{'what':36} {'p50 µs':>8} {'p90 µs':>8} {'p99 µs':>8} {'mean µs':>8} "
            f"{'cpu µs':>8}"
        )
        for name, figures in rows:
            print(
                f"{name:36} {figures['p50']:8.1f} {figures['p90']:8.1f} "
                f"{figures['p99']:8.1f} {figures['mean']:8.1f} {figures['cpu']:8.1f}"
            )
        for state, base in (("STOPPED", 0), ("CLEAR", 3)):
            bare = rows[base][1]["p50"]
            print(
                f"ratio to os.stat, median, {state}: "
                f"StopStore.read {rows[base + 1][1]['p50'] / bare:.1f}x, "
                f"StopWatch.read {rows[base + 2][1]['p50'] / bare:.1f}x"
            )
        ratios = [rows[base + 2][1]["p50"] / rows[base][1]["p50"] for base in (0, 3)]
        verdict = "met" if max(ratios) <= 10 else "NOT met"
        print(f"target (spec 05): a run's read <= 10x a bare os.stat: {verdict}")
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
