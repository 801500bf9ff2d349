"""The unattended demo, offline in a temporary directory: a run, a stop, a take-over.

A run works, a stop halts it, a lift leaves it halted, a take-over restores the saved
work and finishes.

Everything goes through the real parts: a real git repository and worktrees, command-
line agents under the process-tree supervisor, the SQLite store, and a stop written by
`set_stop()` (what `tether stop` calls) in a temporary account home, so the person's own
runs and stop are never touched.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from .._env import TetherEnv
from ._entry import run_plan
from ._open import default_store_path, open_store
from ._run import ExitCode, Run
from ._views import show_run

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("run_demo",)

_ITEMS = (
    ("fix-typo", "Fix the typo in README.md"),
    ("add-license", "Add a LICENSE file"),
    ("add-changelog", "Start a CHANGELOG"),
)

_IMPLEMENT = (
    # The agent works for a while: it changes a tracked file, leaves an untracked one,
    # then commits its main change (the busy part is what the stop waits for).
    'echo "$TETHER_ITEM:" {brief} >> NOTES.md; '
    'echo "draft for $TETHER_ITEM" > "draft-$TETHER_ITEM.txt"; '
    "sleep BUSY; "
    'git add NOTES.md && git commit -qm "$TETHER_ITEM: implement"'
)
_REVIEW = (
    'echo "reviewed $TETHER_ITEM" >> NOTES.md; git add -A; '
    'git commit -qm "$TETHER_ITEM: review"'
)


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@localhost",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@localhost",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def _setup(root: Path, busy: float) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# demo\n\nTeh project.\n", encoding="utf-8")
    _git(repo, "add", "README.md")
    _git(repo, "commit", "-qm", "init")
    items = "\n".join(
        f'[[item]]\nid = "{ident}"\nbrief = "{brief}"\n' for ident, brief in _ITEMS
    )
    plan = root / "plan.toml"
    plan.write_text(
        textwrap.dedent(
            f"""\
            repo = "repo"
            lanes = 2
            poll = 0.2

            [[stage]]
            name = "implement"
            agent = ["sh", "-c", '''{_IMPLEMENT.replace("BUSY", str(busy))}''']

            [[stage]]
            name = "review"
            agent = ["sh", "-c", '''{_REVIEW}''']

            """
        )
        + items,
        encoding="utf-8",
    )
    for name, value in (
        ("GIT_AUTHOR_NAME", "agent"),
        ("GIT_AUTHOR_EMAIL", "agent@localhost"),
        ("GIT_COMMITTER_NAME", "agent"),
        ("GIT_COMMITTER_EMAIL", "agent@localhost"),
    ):
        os.environ[name] = value
    return plan


async def _demo(root: Path, say: Callable[[str], None], busy: float) -> int:
    from ..stop import lift_stop, set_stop

    plan = _setup(root, busy)
    repo = root / "repo"
    say(f"demo: a git repository at {repo}, three items, a two-stage plan, two lanes")
    started: list[Run] = []
    halted: list[ExitCode] = []

    async def person() -> None:
        # The person sets a stop once both agents are busy, with the real stop path.
        for _ in range(600):  # a bounded look, every 50 ms, for at most 30 s
            if started and started[0].agents_in_call() >= 2:
                break
            await anyio.sleep(0.05)
        reading = set_stop("demo: going out for lunch")
        say(f"person: tether stop  -> {reading.outcome.value} at {reading.stop_path}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(person)
        halted.append(
            await run_plan(plan, say=say, handle_sigint=False, on_start=started.append)
        )
    run = started[0].id
    say(f"demo: the run exited {int(halted[0])} (halted)")
    refs = _git(repo, "for-each-ref", "--format=%(refname)", "refs/tether/saved")
    for ref in refs.splitlines():
        files = _git(repo, "show", "--name-only", "--format=", ref).split()
        say(f"  saved aside: {ref}  ({', '.join(files)})")
    store = open_store(str(default_store_path()))
    try:
        say(f"  claims held now: {len(store.claims())} (released)")
    finally:
        store.close()
    lift_stop()
    say(f"person: tether lift  -> the run stays {show_run(run)['state']}")
    say(f"person: tether takeover {run}")
    code = await run_plan(None, say=say, takeover=run, handle_sigint=False)
    for ident, _ in _ITEMS:
        log = _git(repo, "log", "--format=%s", f"main..tether/{ident}").splitlines()
        say(f"  branch tether/{ident}: {' / '.join(reversed(log))}")
    say(f"demo: the take-over exited {int(code)}; the person's checkout is untouched")
    if halted[0] is not ExitCode.HALTED or code is not ExitCode.DONE:
        return 1
    return 0


def run_demo(say: Callable[[str], None], *, busy: float = 1.5) -> int:
    """Run the unattended demo in a temporary directory; returns the exit code."""
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="tether-demo-") as tmp:
        root = Path(tmp)
        home = root / "home"
        home.mkdir(mode=0o700)
        os.environ[TetherEnv.HOME] = str(home)
        os.environ.pop(TetherEnv.STORE, None)
        try:
            return anyio.run(_demo, root, say, busy)
        finally:
            os.environ.clear()
            os.environ.update(saved)
