"""`tether board` with 50 runs / 200 lanes: first paint, and a new line's delay to the screen.

Fills a fresh tether home's store with RUNS working runs (this process stands in as
their live process) of LANES lanes each, every lane in a call with a log of 200 lines,
starts `tether board --port 0` on it, and drives Debian's headless Chromium (Selenium):

- first paint: the page loaded again and again; the browser's own
  `first-contentful-paint` (from the navigation's start), and the whole load as Selenium
  waits for it;
- a new line's delay: a line appended to a lane log (as an agent's stage writes it),
  until the browser shows it (a MutationObserver in the page notes the time; both
  clocks are this machine's wall clock).

Targets (spec 05): first paint ≤ 500 ms, a new line on screen ≤ 1 s.

Run: `.venv/bin/python benchmarks/board.py [--runs 50] [--lanes 4] [--loads 20] [--lines 30]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import machine, summary

_PAINTED = """
const done = arguments[arguments.length - 1];
new PerformanceObserver((list) => {
  const paint = list.getEntriesByName("first-contentful-paint")[0];
  if (paint) done(paint.startTime);
}).observe({type: "paint", buffered: true});
"""
_OBSERVER = """
window.seen = {};
new MutationObserver(() => {
  for (const cell of document.querySelectorAll("td.line")) {
    const found = cell.textContent.match(/mark-(\\d+)/);
    if (found && !(found[1] in window.seen)) window.seen[found[1]] = Date.now();
  }
}).observe(document.body, {childList: true, subtree: true, characterData: true});
"""


def _fill(home: Path, runs: int, lanes: int) -> list[Path]:
    """The store and lane logs of `runs` working runs; the lane logs."""
    os.environ["TETHER_HOME"] = str(home)
    from tether.runs._lane_git import lane_log
    from tether.runs._liveness import here, process_start
    from tether.runs._open import default_store_path
    from tether.runs._sqlite import SqliteStore
    from tether.runs._values import LaneRow, LaneState, RunRow, RunState

    default_store_path().parent.mkdir(parents=True, mode=0o700)
    store = SqliteStore.open(default_store_path())
    logs = []
    now = time.time()
    for r in range(runs):
        run = f"run_bench{r:04}-1"
        store.create_run(
            RunRow(
                id=run,
                state=RunState.RUNNING,
                host=here(),
                pid=os.getpid(),
                pid_start=process_start(),
                started_at=now - r,
                plan="plan.toml",
                repo=str(home),
            )
        )
        for n in range(lanes):
            lane = f"lane_bench{r:04}-{n}"
            item = f"item-{r}-{n}"
            store.add_lane(
                LaneRow(
                    id=lane,
                    run=run,
                    item=item,
                    state=LaneState.IN_CALL,
                    branch=f"tether/{item}",
                    worktree=str(home / lane),
                )
            )
            store.log(run, "lane-open", lane=lane, detail=f"{item} epoch 1")
            store.log(run, "stage-start", lane=lane, detail="work")
            log = lane_log(run, lane)
            log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            log.write_text(
                "".join(f"step {i}: reading src/module_{i}.py\n" for i in range(200))
            )
            logs.append(log)
    store.close()
    return logs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--lanes", type=int, default=4, help="lanes per run")
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--lines", type=int, default=30)
    args = parser.parse_args()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    home = Path(tempfile.mkdtemp(prefix="tether-board-bench-"))
    logs = _fill(home, args.runs, args.lanes)
    board = subprocess.Popen(
        [sys.executable, "-m", "tether", "board", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TETHER_HOME": str(home)},
    )
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=Service(executable_path=shutil.which("chromedriver"))
    )
    try:
        assert board.stdout is not None
        url = board.stdout.readline().split()[-1]
        base = url.split("/?", 1)[0] + "/"
        driver.set_script_timeout(10)
        driver.get(url)  # the token becomes the cookie
        shown = driver.execute_script(
            "return [document.querySelectorAll('section.run').length,"
            " document.querySelectorAll('td.line').length];"
        )
        assert shown == [args.runs, args.runs * args.lanes], shown
        paints, loads = [], []
        for _ in range(args.loads):
            started = time.perf_counter()
            driver.get(base)
            loads.append(time.perf_counter() - started)
            fcp = driver.execute_async_script(_PAINTED)
            paints.append(fcp / 1000)
        driver.execute_script(_OBSERVER)
        delays = []
        for n in range(args.lines):
            log = logs[(n * 7) % len(logs)]
            written = time.time()
            with log.open("a") as f:
                f.write(f"mark-{n} edited the file\n")
            deadline = time.monotonic() + 5
            seen = None
            while seen is None and time.monotonic() < deadline:
                seen = driver.execute_script(f"return window.seen['{n}'] ?? null;")
                if seen is None:
                    time.sleep(0.02)
            assert seen is not None, f"line {n} never shown"
            delays.append(seen / 1000 - written)
            time.sleep(0.1)
    finally:
        driver.quit()
        board.terminate()
        board.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    print(f"# {day}, {machine()}")
    print(f"# {args.runs} runs / {args.runs * args.lanes} lanes, all working")
    print(summary("first contentful paint", paints))
    print(summary("page load (Selenium get)", loads))
    print(summary("new line to screen", delays))


if __name__ == "__main__":
    main()
