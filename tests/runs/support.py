"""Helpers of the run tests: a real git repository, plans, `tether run` as a process."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from tests.cli._run import TETHER
from tests.cli._run import tether as run_tether

from tether.runs._open import default_store_path
from tether.runs._sqlite import SqliteStore
from tether.runs._values import AgentSession

if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.runs import Store


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repo(root: Path) -> Path:
    """A person's repository with one commit and a tracked file."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "person@example.com")
    git(repo, "config", "user.name", "Person")
    (repo / "README.md").write_text("hello\n", encoding="utf-8")
    git(repo, "add", "README.md")
    git(repo, "commit", "-qm", "init")
    return repo


WAIT_FOR_GO = (
    'touch "$MARKS/$TETHER_ITEM.{stage}"; n=0; '
    'while [ ! -e "$MARKS/go" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done'
)
"""A busy agent: marks that it started, then waits (bounded) for the test's go file."""


def write_plan(
    root: Path,
    repo: Path,
    *,
    items: list[str],
    stages: list[tuple[str, str]],
    lanes: int = 2,
    extra: str = "",
) -> Path:
    """A plan whose stages are `sh -c SCRIPT` command lines."""
    parts = [f'repo = "{repo}"', f"lanes = {lanes}", "poll = 0.1", extra, ""]
    for name, script in stages:
        parts += [
            "[[stage]]",
            f'name = "{name}"',
            f"agent = ['sh', '-c', '''{script}''']",
            "",
        ]
    for item in items:
        parts += ["[[item]]", f'id = "{item}"', f'brief = "Work on {item}"', ""]
    plan = root / "plan.toml"
    plan.write_text(textwrap.dedent("\n".join(parts)), encoding="utf-8")
    return plan


OPENED: list[subprocess.Popen[str] | Store] = []
"""Processes and stores a test opened; the autouse fixture closes them."""


def close_opened() -> None:
    while OPENED:
        thing = OPENED.pop()
        if isinstance(thing, subprocess.Popen):
            if thing.poll() is None:
                thing.kill()
            thing.communicate(timeout=30)
        else:
            thing.close()


def _declared(env: dict[str, str]) -> dict[str, str]:
    """A test's agents write their marks (`$MARKS`) outside their lanes: the run
    declares that folder writable for them (S15 walls everything else)."""
    if "MARKS" in env:
        return {"TETHER_WRITABLE": env["MARKS"], **env}
    return env


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `tether ARGS` as a process of its own, output captured."""
    proc = subprocess.Popen(
        [*TETHER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **_declared(env or {})},
    )
    OPENED.append(proc)
    return proc


def tether(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `tether ARGS` to its end, its agents' marks folder declared writable."""
    return run_tether(*args, env=_declared(env or {}), timeout=120)


def open_default_store() -> Store:
    store = SqliteStore.open(default_store_path())
    OPENED.append(store)
    return store


def kinds(store: Store, run: str) -> list[tuple[str, str | None]]:
    return [(e.kind, e.lane) for e in store.events(run)]


def run_id_of(proc: subprocess.Popen[str]) -> str:
    """Read the first line of a run's output: `run <id>`."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("run "), line
    return line.split()[1]


def halted_run(
    root: Path,
    repo: Path,
    *,
    item: str,
    work: str,
    reason: str | None = None,
) -> str:
    """A one-item run whose first stage does `work` then waits (a second stage stays
    to do), halted by a stop set while it waits; its id (the run exited 3)."""
    from tests.waiting import wait_until

    from tether.stop import set_stop

    marks = root / "marks"
    marks.mkdir(exist_ok=True)
    plan = write_plan(
        root,
        repo,
        items=[item],
        stages=[("work", work + WAIT_FOR_GO.format(stage="w")), ("more", "true")],
    )
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(lambda: (marks / f"{item}.w").exists(), what="the agent busy")
    if reason is None:
        set_stop()
    else:
        set_stop(reason)
    (marks / "go").touch()
    code = proc.wait(timeout=60)
    assert code == 3, proc.communicate()
    return run


def write_lane_of_before(execute: Callable[[str, tuple[object, ...]], object]) -> None:
    """Record, with the first schema's columns, a lane `old` of run `run1` that started
    two stages (`implement`, then `write tests`) and was saved twice; `execute` takes
    `%s` marks."""
    execute(
        "INSERT INTO lanes (id, run, item, state, branch, worktree, stage, note) "
        "VALUES ('old', 'run1', 'a', 'halted', 'tether/a', '/w', 1, 'n')",
        (),
    )
    ledger = [
        ("stage-start", "implement"),
        ("saved", "refs/tether/saved/run1/old c0ffee"),
        ("stage-start", "write tests"),
        ("saved", "refs/tether/saved/run1/old-1 beef"),
    ]
    for at, (kind, detail) in enumerate(ledger):
        execute(
            "INSERT INTO events (at, run, lane, kind, detail) "
            "VALUES (%s, 'run1', 'old', %s, %s)",
            (float(at), kind, detail),
        )


def check_lane_of_before(store: Store) -> None:
    """The lane `write_lane_of_before` recorded reads back, its last stage and its
    saves taken from the ledger once, and records an agent session from then on."""
    (old,) = store.lanes("run1")
    assert (old.stage, old.note, old.stage_name, old.session) == (
        1,
        "n",
        "write tests",
        None,
    )
    assert store.saved_refs("run1") == {
        "old": ["refs/tether/saved/run1/old", "refs/tether/saved/run1/old-1"]
    }
    session = AgentSession("write tests", "s-1", Path("/t/my lane.transcript"))
    store.record_session("old", session)
    (old,) = store.item_lanes("a")
    assert old.session == session
