"""The wall (S15) attacked from a run's agents: a command agent, the built-in agent (its
guard on), and the real Claude Code CLI driven by a stub model.

Each runs `attacks.py`'s script (every attack of the wall's list that a process can try:
the run's store, plan and logs, the person's repository, another lane, the stop's setup
and config, kernel knobs, session variables, secrets) and must find every attempt
refused, with the store's truth, the person's repository, the other lane and the stop as
they were.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.host import containment
from tether.runs._open import default_store_path

from .attacks import ATTACKS, attack_script, outcomes, repo_state, secrets
from .presets_support import need_cli, preset_env, serving, shell_call
from .support import git, make_repo, open_default_store, tether, write_plan

pytestmark = [pytest.mark.rule("S15"), pytest.mark.slow]


@pytest.fixture(autouse=True)
def walled() -> None:
    if containment().kind != "namespace":
        pytest.skip(f"the wall needs namespace containment: {containment().reason}")


def _home() -> Path:
    return Path(os.environ["TETHER_HOME"])


def _all_refused(found: dict[str, str]) -> None:
    assert set(found) == set(ATTACKS), sorted(set(ATTACKS) - set(found))
    changed = sorted(name for name, said in found.items() if said != "refused")
    assert changed == [], changed


def _unchanged_stop_and_config(home: Path) -> None:
    assert not (home / "config" / "stop-setup.json").exists()
    assert not (home / "config" / "config.toml").exists()
    assert not (home / "state" / "stop" / "planted").exists()


def _item_states(home: Path | None = None) -> dict[str, str]:
    if home is None:
        return {item.id: item.state for item in open_default_store().items()}
    # Another account's store: tether opens only its own, so read the rows as they are.
    uri = f"file:{home / 'state' / 'runs.sqlite3'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        return dict(db.execute("SELECT id, state FROM items").fetchall())


WAIT = 'n=0; while [ ! -e "$MARKS/{mark}" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done'
SETPRIV = shutil.which("setpriv")
OTHER_UID = 1000


def _two_lanes_attacked(
    root: Path, home: Path, run_tether: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """Two lanes at once: the agent of item a attacks while item b's agent waits in
    its own lane; then every check of the command agent's test."""
    repo = make_repo(root)
    git(repo, "branch", "tether/keep")
    marks = root / "marks"
    marks.mkdir()
    plan_path = root / "plan.toml"
    script = attack_script(
        root / "attack.sh",
        '"$MARKS/$TETHER_ITEM.results"',
        repo=repo,
        home=home,
        plan=plan_path,
    )
    stage = (
        f'if [ "$TETHER_ITEM" = a ]; then {WAIT.format(mark="b.busy")}; '
        f'sh {script}; touch "$MARKS/go"; '
        f'else touch "$MARKS/b.busy"; {WAIT.format(mark="go")}; echo b > b.txt; fi'
    )
    plan = write_plan(root, repo, items=["a", "b"], stages=[("only", stage)])
    assert plan == plan_path
    plan_text = plan.read_text(encoding="utf-8")
    before = run_tether(repo, marks)
    result = run_tether(repo, marks, "run", str(plan))
    logs = run_tether(repo, marks, "logs", result.stdout.split()[1]).stdout
    assert result.returncode == 0, result.stdout + result.stderr + logs
    _all_refused(outcomes((marks / "a.results").read_text(encoding="utf-8")))
    run = result.stdout.split()[1]
    assert _item_states(home) == {"a": "done", "b": "done"}
    assert plan.read_text(encoding="utf-8") == plan_text
    assert repo_state(repo) == before.stdout
    assert git(repo, "-c", "safe.directory=*", "show", "tether/b:b.txt") == "b"
    lanes = home / "state" / "lanes" / run
    assert not list(lanes.glob("*/planted"))
    _unchanged_stop_and_config(home)


Runner = Callable[..., subprocess.CompletedProcess[str]]
"""`(repo, marks, *args)`: `tether ARGS` as the caller under test; with no args, the
repository's state (`repo_state`) in `.stdout`, taken as that caller would leave it."""


def _as_this_caller(
    repo: Path, marks: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    if not args:
        return subprocess.CompletedProcess([], 0, repo_state(repo), "")
    env = {"MARKS": str(marks), **secrets(default_store_path())}
    return tether(*args, env=env)


def test_S15_a_command_agent_reaches_nothing_of_the_run_the_repository_or_another_lane(
    tmp_path: Path,
) -> None:
    """As the caller the tests run as (root in CI: the tree's root is unprivileged
    outside): every attempt refused; both items end done, with no forged state, the
    person's repository and lane b as they were."""
    _two_lanes_attacked(tmp_path, _home(), _as_this_caller)


def _as_other_uid() -> tuple[list[str], dict[str, str]]:
    """The command prefix and environment that run tether as `OTHER_UID`: the system
    `python3` with this tether and its packages on `PYTHONPATH` (the interpreter the
    tests run with may sit in a folder only root may enter)."""
    import anyio

    import tether

    system = shutil.which("python3", path="/usr/bin:/bin")
    if SETPRIV is None or system is None:
        pytest.skip("needs util-linux setpriv and a system python3")
    paths = [
        str(Path(tether.__file__).parents[1]),
        str(Path(anyio.__file__).parents[1]),
    ]
    prefix = [
        SETPRIV,
        f"--reuid={OTHER_UID}",
        f"--regid={OTHER_UID}",
        "--clear-groups",
        system,
    ]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE", "TETHER_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(paths)
    reach = subprocess.run(
        [*prefix, "-c", "import tether.runs"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd="/",
    )
    if reach.returncode != 0:
        pytest.skip(f"uid {OTHER_UID} cannot run tether here: {reach.stderr[-300:]}")
    return prefix, env


def _other_uid_runner(root: Path, home: Path) -> Runner:
    """A `Runner` for uid 1000 whose files are all of `root` (chowned before each)."""
    prefix, base_env = _as_other_uid()

    def run_tether(
        repo: Path, marks: Path, *args: str
    ) -> subprocess.CompletedProcess[str]:
        for path in [root, *root.rglob("*")]:
            os.lchown(path, OTHER_UID, OTHER_UID)
        if not args:
            return subprocess.CompletedProcess([], 0, repo_state(repo), "")
        env = base_env | {
            "HOME": str(home),
            "TETHER_HOME": str(home),
            "MARKS": str(marks),
            "TETHER_WRITABLE": str(marks),
            **secrets(home / "state" / "runs.sqlite3"),
        }
        return subprocess.run(
            [*prefix, "-m", "tether", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
            cwd=root,
        )

    return run_tether


@contextlib.contextmanager
def _other_uids_root() -> Iterator[tuple[Path, Path]]:
    """A folder uid 1000 can reach, with a home of its own in it."""
    with tempfile.TemporaryDirectory(prefix="tether-attacks-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        (root / "home").mkdir()
        yield root, root / "home"


@pytest.mark.root
def test_S15_a_command_agent_of_an_unprivileged_callers_run_reaches_nothing_either() -> (
    None
):
    """The same attacks in a run of uid 1000, with its own home, repository and
    tether folders (config not made yet)."""
    with _other_uids_root() as (root, home):
        _two_lanes_attacked(root, home, _other_uid_runner(root, home))


def _scripted(path: Path, script: Path, home: Path) -> None:
    import json

    moves = [
        {
            "text": "Trying the walls.",
            "tool_calls": [
                {"id": "c1", "name": "Bash", "input": {"command": f"sh {script}"}},
                {
                    "id": "c2",
                    "name": "Write",
                    "input": {
                        "file_path": str(home / "config" / "stop-setup.json"),
                        "content": "{}",
                    },
                },
                {
                    "id": "c3",
                    "name": "Write",
                    "input": {"file_path": "../planted", "content": "x"},
                },
            ],
        },
        {"text": "Done."},
    ]
    lines = [json.dumps({"tether_script": 1}), *(json.dumps(m) for m in moves)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _builtin_attacked(root: Path, home: Path, run_tether: Runner) -> None:
    """The built-in agent's Bash runs the attacks, its Write tries the setup record
    and beside its lane; then every check of the builtin test."""
    repo = make_repo(root)
    git(repo, "branch", "tether/keep")
    marks = root / "marks"
    marks.mkdir()
    plan = root / "plan.toml"
    script = attack_script(
        root / "attack.sh", "attack-results", repo=repo, home=home, plan=plan
    )
    _scripted(root / "moves.jsonl", script, home)
    plan.write_text(
        f'repo = "{repo}"\npoll = 0.1\n\n'
        '[[stage]]\nname = "implement"\nagent = "builtin"\n'
        f'model = "scripted:{root / "moves.jsonl"}"\n\n'
        '[[item]]\nid = "walls"\nbrief = "Try the walls"\n',
        encoding="utf-8",
    )
    before = run_tether(repo, marks)
    result = run_tether(repo, marks, "run", str(plan))
    assert result.returncode == 0, result.stdout + result.stderr
    said = git(repo, "-c", "safe.directory=*", "show", "tether/walls:attack-results")
    _all_refused(outcomes(said))
    run = result.stdout.split()[1]
    assert _item_states(None if home == _home() else home) == {"walls": "done"}
    assert repo_state(repo) == before.stdout
    assert not (home / "state" / "lanes" / run / "planted").exists()
    _unchanged_stop_and_config(home)
    log = run_tether(repo, marks, "logs", run).stdout
    assert log.count("[Write: failed]") == 2, log


def test_S15_the_builtin_agent_reaches_nothing_but_its_lane(tmp_path: Path) -> None:
    """The built-in stage agent runs the attacks through its Bash and tries its Write
    on the setup record and beside its lane: all refused; the results, written in the
    lane, reach the item's branch; the repository and the stop are as they were."""
    _builtin_attacked(tmp_path, _home(), _as_this_caller)


@pytest.mark.root
def test_S15_the_builtin_agent_of_an_unprivileged_callers_run_reaches_nothing_either() -> (
    None
):
    """The same, in a run of uid 1000."""
    with _other_uids_root() as (root, home):
        _builtin_attacked(root, home, _other_uid_runner(root, home))


def test_S15_claude_code_as_the_attacker_reaches_nothing_but_its_lane(
    tmp_path: Path,
) -> None:
    """The real Claude Code CLI, its Bash driven by a stub model, runs the attacks: all
    refused, the results on the item's branch, the repository and the stop unchanged."""
    from tether.testing._agent_server import Move

    need_cli("claude")
    repo = make_repo(tmp_path)
    git(repo, "branch", "tether/keep")
    before = repo_state(repo)
    home = _home()
    plan = tmp_path / "plan.toml"
    script = attack_script(
        tmp_path / "attack.sh", "attack-results", repo=repo, home=home, plan=plan
    )

    def model(body: dict[str, object]) -> Move:
        from tether.testing._agent_server import tool_results

        if not body.get("tools"):
            return Move(text="A title")
        if not tool_results(body):
            return Move(text="trying", calls=(shell_call(body, f"sh {script}"),))
        return Move(text="Done.")

    plan.write_text(
        f'repo = "{repo}"\nlanes = 1\npoll = 0.1\n\n'
        '[[stage]]\nname = "implement"\nagent = "claude"\ntimeout = 300\n\n'
        '[[item]]\nid = "walls"\nbrief = "Try the walls"\n',
        encoding="utf-8",
    )
    with serving("anthropic", model) as server:
        env = preset_env("claude", server, tmp_path / "account") | secrets(
            default_store_path()
        )
        result = tether("run", str(plan), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    _all_refused(outcomes(git(repo, "show", "tether/walls:attack-results")))
    assert repo_state(repo) == before
    _unchanged_stop_and_config(home)
