"""Spec 01 S16 from a preset stage: what the agent leaves for tether is data.

The CLI is a stand-in script (`agent = "claude"` / `"codex"` with `command =` it) that
acts as an attacker would from inside the stage: it plants links where tether writes
(`.tether/`), a FIFO or `/dev/zero` where tether reads (the call record, its session
file), and settings that would run in the person's own CLI. Each test asserts the
victim is unchanged, nothing blocks, and the run or take-over ends within its bound.
"""

from __future__ import annotations

import json
import os
import stat
import textwrap
import time
from pathlib import Path

import pytest
from tests.waiting import wait_until

from tether._config import paths
from tether.host import containment
from tether.stop import lift_stop, set_stop

from .support import git, make_repo, open_default_store, run_id_of, start, tether

pytestmark = [pytest.mark.rule("S16"), pytest.mark.slow]

SESSION = "0f0e0d0c-aaaa-bbbb-cccc-000000000001"
STOP_WAIT = 2.0
"""The stage's `stop_wait`: an agent between calls is ended within it after a stop."""


@pytest.fixture(autouse=True)
def walled() -> None:
    if containment().kind != "namespace":
        pytest.skip(f"the wall needs namespace containment: {containment().reason}")


def _stand_in(root: Path, preset: str, body: str) -> Path:
    """A stand-in CLI: records its arguments, says its session id, then runs `body`."""
    marks = root / "marks"
    marks.mkdir(exist_ok=True)
    session = (
        json.dumps({"type": "system", "session_id": SESSION})
        if preset == "claude"
        else json.dumps({"type": "thread.started", "thread_id": SESSION})
    )
    cli = root / "bin" / f"fake-{preset}"
    cli.parent.mkdir(exist_ok=True)
    cli.write_text(
        "#!/bin/sh\n"
        f'MARKS="{marks}"\n'
        'echo "$*" >> "$MARKS/argv"\n'
        f"echo '{session}'\n" + textwrap.dedent(body),
        encoding="utf-8",
    )
    cli.chmod(0o755)
    return cli


def _plan(
    root: Path, repo: Path, preset: str, cli: Path, *, before: str | None = None
) -> Path:
    """One item; an optional command stage `before`, then the preset stage."""
    parts = [f'repo = "{repo}"', "lanes = 1", "poll = 0.1", ""]
    if before is not None:
        parts += [
            "[[stage]]",
            'name = "plant"',
            f"agent = ['sh', '-c', '''{before}''']",
            # Its plants are left uncommitted: git reading a lane's files at a stage
            # end is the lane git's business; here they wait for the preset stage.
            'commit = "never"',
            "",
        ]
    parts += [
        "[[stage]]",
        'name = "implement"',
        f'agent = "{preset}"',
        f'command = "{cli}"',
        f"stop_wait = {STOP_WAIT}",
        "timeout = 120",
        "",
        "[[item]]",
        'id = "one"',
        'brief = "Work on one"',
        "",
    ]
    plan = root / "plan.toml"
    plan.write_text("\n".join(parts), encoding="utf-8")
    return plan


def _snapshot(root: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every entry below `root` (itself included): mode, owner, content or link target."""
    found: dict[str, tuple[int, int, bytes | str]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            what: bytes | str = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            what = path.read_bytes()
        else:
            what = ""
        found[str(path.relative_to(root))] = (st.st_mode, st.st_uid, what)
    return found


def _logs() -> str:
    """Every lane log of every run of this test's account."""
    lanes = paths().state_dir / "lanes"
    return "".join(p.read_text(encoding="utf-8") for p in sorted(lanes.glob("*/*.log")))


def _victims(root: Path, owner: int) -> Path:
    """A folder of files that are not the lane's: a `.gitignore` and a file of data."""
    victim = root / "victim"
    victim.mkdir()
    (victim / ".gitignore").write_text("mine\n", encoding="utf-8")
    (victim / "data").write_text("precious\n", encoding="utf-8")
    for path in [victim, *victim.iterdir()]:
        os.lchown(path, owner, owner)
    return victim


PLANTS = {
    # `.tether` itself a link to the victim folder.
    "folder-link": "ln -s {victim} .tether",
    # `.tether/.gitignore` and this stage's call record links to victim files.
    "file-links": (
        "mkdir -p .tether && ln -s {victim}/.gitignore .tether/.gitignore && "
        'ln -s {victim}/data ".tether/calls-$TETHER_LANE-implement"'
    ),
    # A FIFO at the `.gitignore`, `/dev/zero` at the call record.
    "fifo-and-device": (
        "mkdir -p .tether && mkfifo .tether/.gitignore && "
        'ln -s /dev/zero ".tether/calls-$TETHER_LANE-implement"'
    ),
}


@pytest.mark.parametrize("owner", [0, 1000], ids=["caller", "second-uid"])
@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_S16_links_planted_in_dot_tether_are_replaced_never_followed(
    tmp_path: Path, plant: str, owner: int
) -> None:
    """A stage before the preset plants links (and a FIFO, `/dev/zero`) where the
    preset's preparation writes: the victim files (the caller's, or a second uid's)
    are unchanged, `.tether/` and the call record are tether's own, the stage runs."""
    if owner and os.geteuid() != 0:
        pytest.skip("needs root to chown files to a second uid")
    repo = make_repo(tmp_path)
    victim = _victims(tmp_path, owner)
    before = _snapshot(victim)
    cli = _stand_in(
        tmp_path,
        "claude",
        """\
        if [ -d .tether ] && [ ! -L .tether ] && [ -f "$TETHER_CALLS" ] \\
            && [ ! -L "$TETHER_CALLS" ]; then touch "$MARKS/own-record"; fi
        echo "pre c1 Bash" >> "$TETHER_CALLS"; echo "post c1" >> "$TETHER_CALLS"
        echo done > work.txt
        """,
    )
    plan = _plan(
        tmp_path, repo, "claude", cli, before=PLANTS[plant].format(victim=victim)
    )
    result = tether("run", str(plan), env={"MARKS": str(tmp_path / "marks")})
    assert result.returncode == 0, result.stdout + result.stderr + _logs()
    assert _snapshot(victim) == before
    assert (tmp_path / "marks" / "own-record").exists()
    assert git(repo, "show", "tether/one:work.txt") == "done"
    log = _logs()
    if plant == "folder-link":
        assert "tether: .tether was a symlink: replaced by a folder" in log


@pytest.mark.parametrize("record", ["fifo", "dev-zero", "huge"])
def test_S16_a_call_record_tether_cannot_read_never_blocks_the_stop(
    tmp_path: Path, record: str
) -> None:
    """The agent swaps its call record for a FIFO, a link to `/dev/zero` or a sparse
    8 GiB file, then idles: tether ends it within `stop_wait` of the stop (an agent
    whose calls are unknown is ended as one between calls) and the run halts, the log
    and the receipt say the calls are unknown, and the take-over of the halted run
    completes too."""
    swap = {
        "fifo": 'rm -f "$TETHER_CALLS"; mkfifo "$TETHER_CALLS"',
        "dev-zero": 'rm -f "$TETHER_CALLS"; ln -s /dev/zero "$TETHER_CALLS"',
        "huge": 'truncate -s 8G "$TETHER_CALLS"',
    }[record]
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    cli = _stand_in(
        tmp_path,
        "claude",
        f"""\
        if [ -e "$MARKS/started" ]; then echo later > later.txt; exit 0; fi
        {swap}
        trap 'touch "$MARKS/ended"; exit 143' TERM
        touch "$MARKS/started"
        sleep 600 &
        wait
        """,
    )
    plan = _plan(tmp_path, repo, "claude", cli)
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(lambda: (marks / "started").exists(), what="the swap", bound=60)
    set_stop("test")
    stopped = time.time()
    proc.wait(timeout=60)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 3, out + _logs()
    # docs/runs.md: an agent between calls is ended (SIGTERM to its tree, which its
    # shell's trap marks) before `stop_wait` runs out after the stop, a reserve kept
    # for the CLI's exit and the save; the run's own record says it halted after.
    ended = (marks / "ended").stat().st_mtime
    store = open_default_store()
    (halted,) = [e.at for e in store.events(run) if e.kind == "halted"]
    print(f"stop -> ended {ended - stopped:.2f} s, halted {halted - stopped:.2f} s")
    assert ended - stopped <= STOP_WAIT, ended - stopped
    assert ended <= halted
    (receipt,) = store.receipts(run)
    assert "stopped at the person's stop after an unknown number of tool calls" in (
        receipt.log_tail
    )
    assert "the call record could not be read" in _logs()
    lift_stop()
    started = time.monotonic()
    result = tether("takeover", run, env={"MARKS": str(marks)})
    assert result.returncode == 0, result.stdout + result.stderr + _logs()
    assert time.monotonic() - started < 60
    assert git(repo, "show", "tether/one:later.txt") == "later"


SESSION_ATTACKS = {
    "regular": 'echo "{{}}" > "$here/{session}.jsonl"',
    "fifo": 'mkfifo "$here/{session}.jsonl"',
    "dev-zero": 'ln -s /dev/zero "$here/{session}.jsonl"',
    "huge": 'truncate -s 2G "$here/{session}.jsonl"',
    "linked-project": 'rmdir "$here"; ln -s {victim} "$here"',
    "linked-projects": (
        'rmdir "$here"; rmdir "$CLAUDE_CONFIG_DIR/projects"; '
        'ln -s {victim} "$CLAUDE_CONFIG_DIR/projects"'
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(SESSION_ATTACKS))
def test_S16_a_takeover_carries_a_session_file_only_as_data(
    tmp_path: Path, attack: str
) -> None:
    """The stage leaves its session file as a FIFO, a link to `/dev/zero`, a sparse
    2 GiB file, or its project folder (or `projects/`) a link to a folder of the
    person's holding a file of the session's name: the take-over completes, writes
    nothing outside tether's folders, and starts the stage over with a note; a regular
    session file is carried into the new lane's CLI folder and resumed."""
    repo = make_repo(tmp_path)
    victim = _victims(tmp_path, 0)
    (victim / f"{SESSION}.jsonl").write_text("not the session\n", encoding="utf-8")
    before = _snapshot(victim)
    home = tmp_path / "person"
    (home / ".claude" / "projects").mkdir(parents=True)
    home_before = _snapshot(home)
    marks = tmp_path / "marks"
    plant = SESSION_ATTACKS[attack].format(session=SESSION, victim=victim)
    cli = _stand_in(
        tmp_path,
        "claude",
        f"""\
        if [ -e "$MARKS/started" ]; then
            echo "$CLAUDE_CONFIG_DIR" > "$MARKS/second-folder"
            echo later > later.txt; exit 0
        fi
        here="$CLAUDE_CONFIG_DIR/projects/$(pwd -P | sed 's/[^A-Za-z0-9]/-/g')"
        mkdir -p "$here"
        {plant}
        touch "$MARKS/started"
        sleep 600
        """,
    )
    plan = _plan(tmp_path, repo, "claude", cli)
    env = {"MARKS": str(marks), "HOME": str(home)}
    proc = start("run", str(plan), env=env)
    run = run_id_of(proc)
    wait_until(lambda: (marks / "started").exists(), what="the plant", bound=60)
    set_stop("test")
    proc.wait(timeout=60)
    assert proc.returncode == 3, _logs()
    lift_stop()
    started = time.monotonic()
    result = tether("takeover", run, env=env)
    took = time.monotonic() - started
    print(f"take-over: {took:.2f} s")
    assert result.returncode == 0, result.stdout + result.stderr + _logs()
    assert took < 60, took
    assert _snapshot(victim) == before
    assert git(repo, "show", "tether/one:later.txt") == "later"
    first, second = (marks / "argv").read_text(encoding="utf-8").splitlines()
    assert "--resume" not in first
    log = _logs()
    if attack == "regular":
        assert f"--resume {SESSION}" in second
        folder = Path((marks / "second-folder").read_text(encoding="utf-8").strip())
        assert list(folder.glob(f"projects/*/{SESSION}.jsonl"))
    else:
        assert "--resume" not in second
        assert "the stage starts over with its brief" in log
    # Nothing of the session went to the person's own CLI folder.
    assert _snapshot(home) == home_before


PERSIST = {
    "claude": """\
        cp "$CLAUDE_CONFIG_DIR/.credentials.json" "$MARKS/seen-credentials"
        cp "$CLAUDE_CONFIG_DIR/.claude.json" "$MARKS/seen-account"
        echo '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/pwned"}]}]}}' \\
            > "$CLAUDE_CONFIG_DIR/settings.json" && touch "$MARKS/wrote-copy"
        echo '{"hooks":{}}' > "$HOME/.claude/settings.json" 2>/dev/null \\
            && touch "$MARKS/wrote-person"
        echo '{"mcpServers":{"x":{"command":"sh"}}}' > "$HOME/.claude.json" 2>/dev/null \\
            && touch "$MARKS/wrote-person"
        """,
    "codex": """\
        cp "$CODEX_HOME/auth.json" "$MARKS/seen-credentials"
        cp "$CODEX_HOME/config.toml" "$MARKS/seen-config"
        printf '[mcp_servers.x]\\ncommand = "sh"\\n' >> "$CODEX_HOME/config.toml" \\
            && touch "$MARKS/wrote-copy"
        printf '[mcp_servers.x]\\ncommand = "sh"\\n' >> "$PERSON/config.toml" 2>/dev/null \\
            && touch "$MARKS/wrote-person"
        """,
}


@pytest.mark.parametrize("preset", ["claude", "codex"])
def test_S16_what_a_stage_writes_in_its_cli_folder_never_reaches_the_persons(
    tmp_path: Path, preset: str
) -> None:
    """The stand-in CLI writes hooks into its `CLAUDE_CONFIG_DIR` settings or an MCP
    server into its `CODEX_HOME` config, and tries the person's own: it got a copy of
    the person's credentials (for Claude Code, only the account fields of
    `.claude.json`), its writes went into the copy, and the person's folders are
    byte for byte as they were."""
    home = tmp_path / "person"
    home.mkdir()
    if preset == "claude":
        person = home / ".claude"
        person.mkdir()
        (person / ".credentials.json").write_text('{"claudeAiOauth":"tok"}')
        (person / "settings.json").write_text('{"model":"mine"}')
        (home / ".claude.json").write_text(
            json.dumps(
                {
                    "oauthAccount": {"emailAddress": "p@example.com"},
                    "projects": {"/secret/path": {}},
                    "mcpServers": {"mine": {"command": "true"}},
                }
            )
        )
        env = {"HOME": str(home)}
    else:
        person = home / "codex"
        person.mkdir()
        (person / "auth.json").write_text('{"OPENAI_API_KEY":"sk-person"}')
        (person / "config.toml").write_text('model = "mine"\n')
        env = {"HOME": str(home), "CODEX_HOME": str(person)}
    before = _snapshot(home)
    repo = make_repo(tmp_path)
    cli = _stand_in(
        tmp_path,
        preset,
        PERSIST[preset].replace("$PERSON", str(person)) + "echo done > work.txt\n",
    )
    plan = _plan(tmp_path, repo, preset, cli)
    marks = tmp_path / "marks"
    result = tether("run", str(plan), env={"MARKS": str(marks), **env})
    assert result.returncode == 0, result.stdout + result.stderr + _logs()
    assert (marks / "wrote-copy").exists()
    assert not (marks / "wrote-person").exists()
    assert _snapshot(home) == before
    if preset == "claude":
        assert (marks / "seen-credentials").read_text() == '{"claudeAiOauth":"tok"}'
        account = json.loads((marks / "seen-account").read_text())
        assert account == {"oauthAccount": {"emailAddress": "p@example.com"}}
    else:
        assert (
            marks / "seen-credentials"
        ).read_text() == '{"OPENAI_API_KEY":"sk-person"}'
        assert (marks / "seen-config").read_text() == 'model = "mine"\n'
    # Only a Claude Code stage gets a settings file (Codex takes its hooks on its
    # command line).
    settings = list(paths().state_dir.glob("lanes/*/*.agent/claude-settings-*.json"))
    assert len(settings) == (1 if preset == "claude" else 0), settings


@pytest.mark.root
@pytest.mark.parametrize("plant", ["folder-link", "file-links"])
def test_S16_links_in_dot_tether_of_an_unprivileged_callers_run_are_replaced_too(
    plant: str,
) -> None:
    """The same plants in a run of uid 1000, against that account's own files."""
    from .test_wall_attacks import OTHER_UID, _other_uid_runner, _other_uids_root

    with _other_uids_root() as (root, home):
        repo = make_repo(root)
        victim = _victims(root, OTHER_UID)
        cli = _stand_in(
            root,
            "claude",
            """\
            if [ -d .tether ] && [ ! -L .tether ] && [ -f "$TETHER_CALLS" ] \\
                && [ ! -L "$TETHER_CALLS" ]; then touch "$MARKS/own-record"; fi
            echo done > work.txt
            """,
        )
        plan = _plan(
            root, repo, "claude", cli, before=PLANTS[plant].format(victim=victim)
        )
        marks = root / "marks"
        run_tether = _other_uid_runner(root, home)
        run_tether(repo, marks)  # every file of `root` becomes uid 1000's
        before = _snapshot(victim)
        result = run_tether(repo, marks, "run", str(plan))
        assert result.returncode == 0, result.stdout + result.stderr
        assert _snapshot(victim) == before
        assert (marks / "own-record").exists()
        said = git(repo, "-c", "safe.directory=*", "show", "tether/one:work.txt")
        assert said == "done"
