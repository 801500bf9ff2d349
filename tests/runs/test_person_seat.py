"""The person's seat with two real accounts (spec 03, "The person's seat").

Root binds an agents' account to the person's stop (`tether setup --system`); the agents'
account runs a plan; the person, from their own account, sets the stop and sees the run
halting then halted with every step's time (`tether runs --json`, `tether status
--json`), reads the digest, waits with `tether stop --wait`, and fetches the work into
their own repository with `tether fetch` — while the agents' repository holds a planted
filter, fsmonitor and hooks that never run.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.accounts import LAUNCH, everyones_python, searchable_dir
from tests.pty_run import run_in_pty
from tests.waiting import wait_until

from tether.stop import AGENT_MARKERS

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture
def base() -> Iterator[Path]:
    """A root-owned directory every account can search."""
    with searchable_dir("tether-seat-") as where:
        yield where


@pytest.fixture
def python(base: Path) -> Path:
    """An interpreter every account can run, as the docs' install recipe makes one."""
    return everyones_python(base)


@contextlib.contextmanager
def _account(name: str) -> Iterator[int]:
    """A real account made with useradd, removed afterwards; its ids come from a range
    no other test names (tests chown files to fixed ids such as 1001 and 1002 and read
    those back as unnamed owners)."""
    ids = ["-K", "UID_MIN=61000", "-K", "UID_MAX=61999"]
    ids += ["-K", "GID_MIN=61000", "-K", "GID_MAX=61999"]
    subprocess.run(
        [
            "useradd",
            *ids,
            "--no-create-home",
            "--user-group",
            "--shell",
            "/bin/sh",
            name,
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield pwd.getpwnam(name).pw_uid
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture
def accounts() -> Iterator[tuple[str, str]]:
    """The person and the agents' account (names unique to this test)."""
    tag = os.urandom(3).hex()
    person, agents = f"tp{tag}", f"ta{tag}"
    with _account(person), _account(agents):
        yield person, agents


class Seat:
    """The two accounts, their homes, and the CLI as each."""

    def __init__(self, base: Path, python: Path, person: str, agents: str) -> None:
        self.base = base
        self.python = str(python)
        self.person, self.agents = person, agents
        self.person_uid = pwd.getpwnam(person).pw_uid
        self.agents_uid = pwd.getpwnam(agents).pw_uid
        self.system_dir = base / "etc-tether"
        self.folder = base / "srv" / "tether"
        self.homes = {}
        for uid in (self.person_uid, self.agents_uid):
            home = base / f"home-{uid}"
            home.mkdir(mode=0o700)
            os.chown(home, uid, uid)
            self.homes[uid] = home

    def env(self, uid: int) -> dict[str, str]:
        unset = ("TETHER_HOME", "HOME", "PYTHONPATH", "TETHER_STORE", *AGENT_MARKERS)
        env = {k: v for k, v in os.environ.items() if k not in unset}
        env.update(TETHER_HOME=str(self.homes[uid]), HOME=str(self.homes[uid]))
        return env

    def argv(self, uid: int, *args: str) -> list[str]:
        who = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        return [
            "setpriv",
            *who,
            self.python,
            "-c",
            LAUNCH,
            str(self.system_dir),
            *args,
        ]

    def tether(self, uid: int, *args: str) -> subprocess.CompletedProcess[str]:
        """The CLI as `uid`, with no terminal."""
        return subprocess.run(
            self.argv(uid, *args),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=self.env(uid),
            cwd="/",
            timeout=60,
            check=False,
        )

    def in_pty(self, uid: int | None, *args: str) -> tuple[int, str]:
        """The CLI as `uid` (root when None) with a terminal, as the verbs want."""
        argv = (
            self.argv(uid, *args)
            if uid is not None
            else [self.python, "-c", LAUNCH, str(self.system_dir), *args]
        )
        env = self.env(uid) if uid is not None else dict(os.environ)
        return run_in_pty(argv, env=env, cwd="/", timeout=60)

    def sh(self, uid: int, script: str, cwd: Path) -> str:
        """A shell script as `uid` (its git, its config)."""
        done = subprocess.run(
            [
                "setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "sh",
                "-ec",
                script,
            ],
            capture_output=True,
            text=True,
            env=self.env(uid),
            cwd=cwd,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def runs(self) -> list[dict[str, Any]]:
        done = self.tether(self.person_uid, "runs", "--json")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert isinstance(found, list)
        return found


def _person_repo(seat: Seat) -> Path:
    """The person's repository, and a bundle of it the agents' account clones."""
    mine = seat.base / "person-repo"
    mine.mkdir()
    os.chown(mine, seat.person_uid, seat.person_uid)
    seat.sh(
        seat.person_uid,
        f"""
        git init -q -b main
        git config user.name Person; git config user.email person@example.com
        echo hello > README.md; git add README.md; git commit -qm init
        git bundle create -q {seat.folder}/{seat.person_uid}/project.bundle --all
        """,
        mine,
    )
    return mine


def _agents_repo(seat: Seat, marks: Path) -> Path:
    """The agents' clone, its config holding a planted filter, fsmonitor and hooks."""
    repo = seat.homes[seat.agents_uid] / "project"
    planted = marks / "PLANTED"
    seat.sh(
        seat.agents_uid,
        f"""
        git clone -q {seat.folder}/{seat.person_uid}/project.bundle {repo}
        cd {repo}
        git config user.name Agents; git config user.email agents@example.com
        echo '* filter=plant' > .git/info/attributes
        mkdir .git/planted-hooks
        for h in reference-transaction post-checkout pre-commit post-merge \
                 pre-auto-gc post-rewrite post-update; do
          printf '#!/bin/sh\\ntouch {planted}.$h\\n' > .git/hooks/$h
          chmod +x .git/hooks/$h; cp .git/hooks/$h .git/planted-hooks/$h
        done
        git config filter.plant.clean 'touch {planted}.clean; cat'
        git config filter.plant.smudge 'touch {planted}.smudge; cat'
        git config filter.plant.process 'touch {planted}.process'
        git config core.fsmonitor 'touch {planted}.fsmonitor'
        git config core.hooksPath {repo}/.git/planted-hooks
        """,
        seat.homes[seat.agents_uid],
    )
    return repo


def _plan(seat: Seat, repo: Path, marks: Path) -> Path:
    script = (
        'printf "building \\033[31mred\\033[0m\\n"; '
        'printf "work\\n" > work.txt; git add work.txt; git commit -qm "lane work"; '
        f"touch {marks}/in-call; n=0; "
        f"while [ ! -e {marks}/go ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done"
    )
    plan = seat.base / "plan.toml"
    plan.write_text(
        f'repo = "{repo}"\nlanes = 1\npoll = 0.1\n\n'
        f"[[stage]]\nname = \"build\"\nagent = ['sh', '-c', '''{script}''']\n\n"
        "[[stage]]\nname = \"review\"\nagent = ['true']\n\n"
        '[[item]]\nid = "fix-typo"\nbrief = "Fix the typo"\n',
        encoding="utf-8",
    )
    os.chmod(plan, 0o644)
    return plan


def _at(text: object) -> datetime:
    assert isinstance(text, str), text
    return datetime.fromisoformat(text)


@pytest.mark.rule("digest")
@pytest.mark.rule("status-runs")
@pytest.mark.rule("system-binding")
def test_person_seat_two_accounts_stop_seen_halted_digest_and_work_fetched(
    base: Path, python: Path, accounts: tuple[str, str]
) -> None:
    seat = Seat(base, python, *accounts)
    marks = base / "marks"
    marks.mkdir()
    os.chmod(marks, 0o1777)
    # Root binds the agents' account to the person's stop; the person chooses the folder.
    code, out = seat.in_pty(
        None,
        "setup",
        "--system",
        "--shared-folder",
        str(seat.folder),
        "--person",
        seat.person,
        "--account",
        seat.agents,
    )
    assert code == 0, out
    assert (seat.folder / str(seat.agents_uid)).stat().st_uid == seat.agents_uid
    code, out = seat.in_pty(
        seat.person_uid, "setup", "--shared-folder", str(seat.folder)
    )
    assert code == 0, out
    _person_repo(seat)
    repo = _agents_repo(seat, marks)
    plan = _plan(seat, repo, marks)
    env = {**seat.env(seat.agents_uid), "TETHER_WRITABLE": str(marks)}
    run = subprocess.Popen(
        seat.argv(seat.agents_uid, "run", str(plan)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
    )
    try:
        wait_until(
            lambda: (marks / "in-call").exists() or run.poll() is not None,
            what="the agent in its call",
        )
        if run.poll() is not None:
            out, err = run.communicate()
            logs = seat.tether(seat.agents_uid, "logs", out.split()[1]).stdout
            raise AssertionError(f"the run ended early: {out}{err}{logs}")

        # As the person: the run is seen working, its lane in its stage.
        def in_stage() -> bool:
            (record,) = seat.runs()
            return bool(record["lanes"]) and record["lanes"][0]["stage"] == "build"

        wait_until(in_stage, what="the lane in its stage, as the person reads it")
        working = seat.runs()
        assert [(r["account"], r["state"]) for r in working] == [
            (seat.agents, "running")
        ]

        waited: list[tuple[int, str]] = []
        waiter = threading.Thread(
            target=lambda: waited.append(
                seat.in_pty(seat.person_uid, "stop", "--wait", "--timeout", "60")
            )
        )
        waiter.start()
        # Halting: the stop seen, the agent still in its call.
        wait_until(
            lambda: seat.runs()[0]["state"] == "halting",
            what="the run halting, as the person reads it",
        )
        halting = seat.runs()[0]
        assert halting["stop"]["seen_at"] is not None
        assert halting["stop"]["lanes"][0]["in_call"] is True
        assert halting["stop"]["lanes"][0]["call_ended_at"] is None
        assert halting["stop"]["halted_at"] is None
        assert not waited  # `stop --wait` waits while the run halts
        (marks / "go").touch()
        waiter.join(60)
        assert waited, "tether stop --wait did not return"
        code, out = waited[0]
        assert code == 0, out
        assert f"honoured by the runs of: this account, {seat.agents}" in out
        assert "every run that honours the stop has halted" in out
        assert "call ended" in out
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 3, stdout + stderr
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()

    # Halted, with every step's time, in order.
    (halted,) = seat.runs()
    assert halted["state"] == "halted"
    stop, lane = halted["stop"], halted["stop"]["lanes"][0]
    steps = [
        stop["seen_at"],
        lane["call_ended_at"],
        lane["saved_at"],
        lane["released_at"],
        lane["halted_at"],
        stop["halted_at"],
    ]
    assert all(steps), json.dumps(halted, indent=1)
    times = [_at(s) for s in steps]
    assert times == sorted(times), steps
    status = json.loads(seat.tether(seat.person_uid, "status", "--json").stdout)
    assert status["outcome"] == "STOPPED"
    assert [(r["account"], r["state"]) for r in status["runs"]] == [
        (seat.agents, "halted")
    ]
    show = seat.tether(seat.person_uid, "runs", "show", halted["id"], "--json")
    assert json.loads(show.stdout)["stop"] == stop, show.stderr
    text = seat.tether(seat.person_uid, "status").stdout
    assert "runs: none working; 1 finished" in text
    assert "call ended" in text

    # As the agents' account, under the standing stop: the take-over refusal names who
    # may lift, and a new run is refused with nothing recorded.
    refused = seat.tether(seat.agents_uid, "takeover", halted["id"])
    assert refused.returncode == 2, refused.stderr
    person = f"{seat.person} (uid {seat.person_uid})"
    assert f"only {person} may lift it" in refused.stderr
    again = subprocess.run(
        seat.argv(seat.agents_uid, "run", str(plan)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )
    assert again.returncode == 3, again.stdout + again.stderr
    assert f"not started: a stop set by {person} stands" in again.stdout
    assert [r["id"] for r in seat.runs()] == [halted["id"]]

    # The digest and the lane's lines, read as the person.
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    digest = seat.folder / str(seat.agents_uid) / f"digest-{day}.md"
    text = seat.sh(seat.person_uid, f"cat {digest}", cwd=Path("/"))
    assert f"## run {halted['id']} — halted" in text
    assert "stop observed" in text
    lane_id = halted["lanes"][0]["lane"]
    lines = seat.folder / str(seat.agents_uid) / halted["lanes"][0]["lines"]
    assert lines.name == f"{lane_id}.txt"
    published = seat.tether(seat.person_uid, "logs", halted["id"], "fix-typo").stdout
    assert published == seat.sh(seat.person_uid, f"cat {lines}", cwd=Path("/"))
    assert "building red" in published  # as `tether logs` prints it: no escape
    assert "\x1b" not in published

    # The work, fetched as data into the person's repository.
    mine = seat.base / "person-repo"
    # Git itself refuses the agents' repository to the person, as it should.
    refused = subprocess.run(
        [
            "setpriv",
            f"--reuid={seat.person_uid}",
            f"--regid={seat.person_uid}",
            "--clear-groups",
            "git",
            "-C",
            str(mine),
            "fetch",
            str(repo),
        ],
        capture_output=True,
        text=True,
        env=seat.env(seat.person_uid),
        check=False,
    )
    assert refused.returncode != 0
    done = seat.tether(seat.person_uid, "fetch", "--into", str(mine), "--json")
    assert done.returncode == 0, done.stderr
    refs = {row["ref"]: row["commit"] for row in json.loads(done.stdout)}
    # The bundle holds the lane's work past the history both seats share.
    init = seat.sh(seat.person_uid, "git rev-parse main", mine).strip()
    assert halted["lanes"][0]["bundle"]["base"] == init
    branch = f"refs/remotes/tether/{seat.agents}/fix-typo"
    assert branch in refs
    log = seat.sh(seat.person_uid, f"git log --format=%s {branch}", mine)
    assert log.split("\n")[0] == "lane work"
    view = next(
        ref for ref in refs if ref.startswith(f"refs/tether/saved/{seat.agents}/")
    )
    assert seat.sh(seat.person_uid, f"git show {view}:work.txt", mine) == "work\n"
    # Reviewed, it merges as any branch does.
    seat.sh(
        seat.person_uid, f"git merge -q --ff-only tether/{seat.agents}/fix-typo", mine
    )
    assert (mine / "work.txt").read_text(encoding="utf-8") == "work\n"
    assert not list(marks.glob("PLANTED*")), list(marks.glob("PLANTED*"))
    # The plants are live: the agents' own git in that repository runs them.
    seat.sh(seat.agents_uid, "git checkout -q -b probe || :; git status -s || :", repo)
    fired = {p.name for p in marks.glob("PLANTED*")}
    assert "PLANTED.fsmonitor" in fired, fired
    assert fired & {"PLANTED.process", "PLANTED.clean", "PLANTED.smudge"}, fired
