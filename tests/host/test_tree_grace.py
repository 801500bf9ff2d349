"""The grace window belongs to the whole tree, under both containments (spec 01
PROCESS, S13, S13b).

Driven as the host drives a PROCESS tool: `run_command` with a stop, then a cancellation
when the grace window closes. A TERM handler behind any shell shape gets its whole window
and its output; a real `make -j2` build and a real `git checkout` of a few thousand files
stopped at several moments leave a state the next run completes from (no truncated
object, no `index.lock`), beside the same stopped without tether (SIGTERM to the group,
then wait) as the control; a trap that outlives the window has its lines up to the kill
kept; a kill that left git's locks names them and the command that removes them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import TYPE_CHECKING

import anyio
import attrs
import psutil
import pytest

from tether.host._proctree import CommandOutcome, run_command, stale_git_locks

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HANDLER = 0.5
"""Seconds a TERM handler takes to clean up."""
MARGIN = 1.5
"""Upper slack for a loaded 2-core machine."""
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "gc.auto=0"]

TRAP = (
    "#!/bin/bash\n"
    "trap 'echo got TERM; sleep {handler}; echo cleaned; exit 0' TERM\n"
    "echo building\n"
    "has_reader() {{ for f in /proc/[0-9]*/fd/0; do "
    '[ "$(readlink "$f" 2>/dev/null)" = "$1" ] && return 0; done; return 1; }}\n'
    "# Behind a pipe: ready once the reader's stdin is the pipe (a stop before that\n"
    "# would find no reader to spare).\n"
    'if [ "$1" = pipe ]; then out=$(readlink /proc/$$/fd/1); '
    'until has_reader "$out"; do sleep 0.01; done; fi\n'
    "sleep 30 &\n"
    ": > ready\n"
    "wait\n"
)

SHAPES = {
    "semicolon": "./job; echo done",
    "and": "./job && echo ok",
    "pipe": "./job pipe 2>&1 | tail -n 20",
    "subshell": "(./job)",
    "bash-c-script": "bash -c ./job",
    "sh-c": "sh -c './job; echo sh-done'",
}


@pytest.fixture(params=["namespace", "subreaper"], autouse=True)
def containment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs under both containments."""
    kind = str(request.param)
    monkeypatch.setenv("TETHER_CONTAINMENT", kind)
    return kind


@attrs.define
class Stopped:
    """One command run with a stop."""

    outcome: CommandOutcome | None = None
    printed: str = ""
    settle: float = 0.0
    """Seconds from the stop until the call ended (returned or cancelled)."""
    cancelled: bool = False
    """The grace window closed first: the call was cancelled and the tree killed."""


async def _stop(
    command: str,
    cwd: Path,
    *,
    when: Callable[[], bool],
    grace: float,
) -> Stopped:
    """Run `command` as Bash does; stop once `when()`; cancel after `grace` seconds."""
    chunks: list[str] = []
    stop = anyio.Event()
    got = Stopped()
    scope = anyio.CancelScope()
    done = anyio.Event()

    async def call() -> None:
        with scope:
            got.outcome = await run_command(
                ["bash", "-c", command],
                cwd=cwd,
                env=dict(os.environ),
                stop=stop,
                on_output=chunks.append,
            )
        got.cancelled = scope.cancelled_caught
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(20):
            while not when() and not done.is_set():  # noqa: ASYNC110 - a file or a clock
                await anyio.sleep(0.01)
        stopped_at = anyio.current_time()
        stop.set()
        with anyio.move_on_after(grace):
            await done.wait()
        scope.cancel()  # the host cancels the tool's task when the window closes
        with anyio.fail_after(10):
            await done.wait()
        got.settle = anyio.current_time() - stopped_at
    got.printed = "".join(chunks)
    return got


def _job(cwd: Path, handler: float) -> Path:
    job = cwd / "job"
    job.write_text(TRAP.format(handler=handler), encoding="utf-8")
    job.chmod(0o755)
    return cwd / "ready"


@pytest.mark.rule("S13")
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
async def test_a_term_handler_behind_a_shell_gets_its_whole_window(
    shape: str, workspace: Path
) -> None:
    """The shell in front dies of SIGTERM at once; the handler still runs to its end
    (not SIGKILLed 0.01 s later), the call ends when the tree is gone, and every line
    the handler printed is in the output."""
    ready = _job(workspace, HANDLER)
    got = await _stop(shape, workspace, when=ready.exists, grace=5.0)
    assert not got.cancelled
    assert got.outcome is not None
    for seen in (got.outcome.output, got.printed):
        assert "building\ngot TERM\n" in seen
        assert seen.index("got TERM") < seen.index("cleaned\n")
    assert HANDLER - 0.05 <= got.settle <= HANDLER + MARGIN


@pytest.mark.rule("S13")
async def test_a_pipeline_reader_is_terminated_once_its_input_ended(
    workspace: Path,
) -> None:
    """The `tail` spared while its writer cleans up gets SIGTERM too once the writer is
    gone, if it does not end by itself: the call does not wait for the window."""
    ready = _job(workspace, 0.2)
    command = "./job | (trap '' PIPE; cat; trap - TERM; exec sleep 30)"
    got = await _stop(command, workspace, when=ready.exists, grace=5.0)
    assert not got.cancelled
    assert got.outcome is not None
    assert "cleaned" in got.outcome.output
    assert got.settle <= 0.2 + 0.25 + MARGIN


@pytest.mark.rule("S13")
@pytest.mark.rule("S13b")
async def test_a_trap_that_outlives_the_window_keeps_its_lines_up_to_the_kill(
    workspace: Path,
) -> None:
    """The window closes while the trap still prints: what it printed up to the kill
    is streamed (the host's partial output is made of it), none of the tree is left."""
    (workspace / "job").write_text(
        "#!/bin/bash\n"
        "trap 'echo got TERM; for i in $(seq 1 300); do echo cleaning $i; "
        "sleep 0.05; done' TERM\n"
        "echo building\nsleep 30 &\n: > ready\nwait\n",
        encoding="utf-8",
    )
    (workspace / "job").chmod(0o755)
    grace = 0.6
    got = await _stop(
        "./job && echo ok", workspace, when=(workspace / "ready").exists, grace=grace
    )
    assert got.cancelled
    assert "building\ngot TERM\ncleaning 1\ncleaning 2\n" in got.printed
    assert got.settle <= grace + MARGIN


# -- make -j2 ------------------------------------------------------------------------

MAKEFILE = """\
all: s1.txt s2.txt prog

prog: main.o c1.o c2.o
\tgcc -o $@ $^

%.o: %.c
\tgcc -O0 -c -o $@ $<

s%.txt:
\ttrap 'sleep 0.3; exit 1' TERM; \\
\tfor i in $$(seq 1 20); do echo "line $$i of $@"; sleep 0.02; done > $@
"""
"""The shell recipes take 0.3 s to clean up on SIGTERM, as a compiler driver waiting
for its children does: make deletes a half-made target only once they ended."""


def _project(at: Path) -> Path:
    """A C program of three objects and two slow shell-recipe targets."""
    at.mkdir()
    for n in (1, 2):
        body = "\n".join(
            f"int f{n}_{i}(int x) {{ int s = 0; for (int k = 0; k < x; k++) "
            f"s += k * {i} ^ (s >> 3); return s; }}"
            for i in range(150)
        )
        (at / f"c{n}.c").write_text(f"{body}\nint part{n}(void) {{ return {n}; }}\n")
    (at / "main.c").write_text(
        "#include <stdio.h>\nint part1(void); int part2(void);\n"
        'int main(void) { printf("sum %d\\n", part1() + part2()); return 0; }\n'
    )
    (at / "Makefile").write_text(MAKEFILE)
    return at


def _rebuilds_cleanly(project: Path) -> None:
    """The next build, without tether, succeeds and its outputs are whole."""
    build = subprocess.run(
        ["make", "-j2"], cwd=project, capture_output=True, text=True, check=False
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert subprocess.run(["make", "-q"], cwd=project, check=False).returncode == 0
    ran = subprocess.run([project / "prog"], capture_output=True, text=True, check=True)
    assert ran.stdout == "sum 3\n"
    for n in (1, 2):
        lines = (project / f"s{n}.txt").read_text().splitlines()
        assert lines == [f"line {i} of s{n}.txt" for i in range(1, 21)]


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` is still running (zombies do not count)."""
    for pid in psutil.pids():
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if os.getpgid(pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
    return False


def _control(command: str, cwd: Path, after: float) -> None:
    """The same stopped without tether: SIGTERM to the group, then wait for the group.

    The shell in front dies of SIGTERM at once; the control waits for every process of
    the group (as a terminal's user waits for the prompt), not for the shell alone.
    """
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(after)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)
    deadline = time.monotonic() + 20
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    # What the group left (none should be) goes too, before the next run.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


MOMENTS = [0.15, 0.4, 1.0]
"""Seconds into the run at which it is stopped: any moment must leave a sound state."""


@pytest.mark.rule("S13")
@pytest.mark.parametrize("after", MOMENTS)
async def test_a_make_build_stopped_mid_way_rebuilds_cleanly(
    after: float, workspace: Path
) -> None:
    """`make -j2 && echo BUILD-OK` stopped mid-build: make gets its window (it deletes
    the targets it was making), so the next build succeeds with whole outputs; as the
    control does, stopped without tether."""
    control = _project(workspace / "control")
    _control("make -j2 && echo BUILD-OK", control, after)
    _rebuilds_cleanly(control)

    project = _project(workspace / "project")
    start = time.monotonic()
    got = await _stop(
        "make -j2 && echo BUILD-OK",
        project,
        when=lambda: time.monotonic() - start >= after,
        grace=10.0,
    )
    assert not got.cancelled, got.printed
    _rebuilds_cleanly(project)


# -- git checkout --------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository of 2000 files whose branches `a` and `b` differ in every file."""
    repo = tmp_path_factory.mktemp("git") / "repo"
    repo.mkdir()
    subprocess.run([*GIT, "init", "-q", "-b", "a"], cwd=repo, check=True)
    for branch in ("a", "b"):
        if branch == "b":
            subprocess.run([*GIT, "checkout", "-qb", "b"], cwd=repo, check=True)
        for d in range(20):
            (repo / f"d{d}").mkdir(exist_ok=True)
            for f in range(100):
                text = f"{branch} {d} {f}\n" * 40
                (repo / f"d{d}" / f"f{f}.txt").write_text(text)
        subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
        subprocess.run([*GIT, "commit", "-qm", branch], cwd=repo, check=True)
    subprocess.run([*GIT, "checkout", "-q", "a"], cwd=repo, check=True)
    subprocess.run([*GIT, "repack", "-adq"], cwd=repo, check=True)
    subprocess.run([*GIT, "prune"], cwd=repo, check=True)
    return repo


def _checks_out_cleanly(repo: Path, said: str | None) -> None:
    """No lock is left, or the one left is named in `said` with the `rm -f` that removes
    it; then the next `git checkout b` (without tether) completes.

    git opens `index.lock` a moment before it installs the handler that removes it on
    SIGTERM: a SIGTERM landing there leaves the lock, with tether or without. tether
    cannot close git's window; it names the lock, and the person removes it (done here
    with the command given). `said` is None for the control, which reports nothing.
    """
    lock = repo / ".git" / "index.lock"
    if lock.exists():
        if said is not None:
            assert f"left git lock files in {lock.parent}: index.lock" in said, said
            command = said.rsplit("remove them with: ", 1)[1].split("]", 1)[0]
            assert command == f"rm -f {lock}", said
        lock.unlink()
    status = subprocess.run(
        [*GIT, "status", "--porcelain"], cwd=repo, capture_output=True, check=False
    )
    assert status.returncode == 0, status.stderr
    redo = subprocess.run(
        [*GIT, "checkout", "-f", "-q", "b"], cwd=repo, capture_output=True, check=False
    )
    assert redo.returncode == 0, redo.stderr
    assert subprocess.run([*GIT, "diff", "--quiet", "HEAD"], cwd=repo).returncode == 0
    assert (repo / "d19" / "f99.txt").read_text() == "b 19 99\n" * 40


def _copy(repo: Path, to: Path) -> None:
    subprocess.run(["cp", "-a", repo, to], check=True)


GIT_MOMENTS = [0.05, 0.15, 0.3]


@pytest.mark.rule("S13")
@pytest.mark.parametrize("after", GIT_MOMENTS)
async def test_a_git_checkout_stopped_mid_way_leaves_no_lock(
    after: float, big_repo: Path, workspace: Path
) -> None:
    """`git checkout b` of 2000 files stopped mid-way: git gets its window (it removes
    `index.lock` on SIGTERM), so the next git command works; as the control does."""
    control = workspace / "control"
    _copy(big_repo, control)
    _control("git checkout -q b && echo done", control, after)
    _checks_out_cleanly(control, None)

    repo = workspace / "repo"
    _copy(big_repo, repo)
    start = time.monotonic()
    got = await _stop(
        f"{' '.join(GIT)} checkout -q b && echo done",
        repo,
        when=lambda: time.monotonic() - start >= after,
        grace=10.0,
    )
    assert not got.cancelled, got.printed
    assert got.outcome is not None
    _checks_out_cleanly(repo, got.outcome.output)


# -- git's locks after a kill --------------------------------------------------------


@pytest.mark.rule("S13")
async def test_a_kill_that_left_git_locks_names_them_and_how_to_remove_them(
    workspace: Path,
) -> None:
    """A command holding `index.lock` and `gc.pid` that ignores SIGTERM is killed when
    the window closes: the output names both with `rm -f`; neither is removed."""
    subprocess.run([*GIT, "init", "-q"], cwd=workspace, check=True)  # noqa: ASYNC221
    command = (
        "trap '' TERM; : > .git/index.lock; echo \"$$ host\" > .git/gc.pid; "
        ": > ready; sleep 30"
    )
    got = await _stop(command, workspace, when=(workspace / "ready").exists, grace=0.3)
    assert got.cancelled
    git = workspace / ".git"
    assert f"[the kill left git lock files in {git}: index.lock, gc.pid" in got.printed
    assert f"rm -f {git / 'index.lock'} {git / 'gc.pid'}]" in got.printed
    assert (git / "index.lock").exists()
    assert (git / "gc.pid").exists()


STOPPED_IN_GITS_WINDOW = (
    ": > .git/index.lock; trap 'exit 143' TERM; : > ready; sleep 30 & wait"
)
"""A command stopped as git is between `open(index.lock)` and its handlers: it dies of
SIGTERM with the lock left (made deterministic by a trap that leaves it)."""


@pytest.mark.rule("S13")
async def test_a_stopped_command_that_left_a_git_lock_names_it(
    workspace: Path,
) -> None:
    """A stop that the command did not survive cleanly (exit not 0) with `index.lock`
    left: the result names it with `rm -f`; the lock is not removed."""
    subprocess.run([*GIT, "init", "-q"], cwd=workspace, check=True)  # noqa: ASYNC221
    got = await _stop(
        STOPPED_IN_GITS_WINDOW, workspace, when=(workspace / "ready").exists, grace=5.0
    )
    assert not got.cancelled
    assert got.outcome is not None
    assert got.outcome.stopped
    git = workspace / ".git"
    for said in (got.outcome.output, got.printed):
        assert f"[the stop left git lock files in {git}: index.lock." in said
        assert f"remove them with: rm -f {git / 'index.lock'}]" in said
    assert (git / "index.lock").exists()


@pytest.mark.rule("S13")
async def test_a_stopped_command_that_cleaned_up_or_exited_0_names_no_lock(
    workspace: Path,
) -> None:
    """No note when the handler removed the lock, nor when the command exited 0 (a
    lock it keeps on purpose, or another git's, is not the stop's)."""
    subprocess.run([*GIT, "init", "-q"], cwd=workspace, check=True)  # noqa: ASYNC221
    cleaned = STOPPED_IN_GITS_WINDOW.replace(
        "'exit 143'", "'rm .git/index.lock; exit 143'"
    )
    got = await _stop(cleaned, workspace, when=(workspace / "ready").exists, grace=5.0)
    assert got.outcome is not None
    assert got.outcome.returncode != 0
    assert "lock" not in got.outcome.output
    (workspace / "ready").unlink()
    kept = STOPPED_IN_GITS_WINDOW.replace("'exit 143'", "'exit 0'")
    got = await _stop(kept, workspace, when=(workspace / "ready").exists, grace=5.0)
    assert got.outcome is not None
    assert got.outcome.returncode == 0
    assert "lock" not in got.outcome.output
    assert (workspace / ".git" / "index.lock").exists()


async def _run(command: str, cwd: Path) -> CommandOutcome:
    """Run `command` as Bash does, with no stop."""
    return await run_command(
        ["bash", "-c", command],
        cwd=cwd,
        env=dict(os.environ),
        stop=anyio.Event(),
        on_output=lambda _text: None,
    )


def _two_packs(repo: Path) -> None:
    """A repository of two packs: with `gc.autoPackLimit=1`, a commit starts a gc."""
    subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    for n in range(2):
        for f in range(30):
            (repo / f"f{f}.txt").write_text(f"{n} {f}\n")
        subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
        subprocess.run([*GIT, "commit", "-qm", str(n)], cwd=repo, check=True)
        subprocess.run([*GIT, "repack", "-q"], cwd=repo, check=True)


@pytest.mark.rule("S13")
async def test_a_detached_git_gc_the_command_left_running_removes_its_locks(
    workspace: Path,
) -> None:
    """`git commit` starts `git gc --auto` in the background and exits while the gc
    holds `gc.pid` (naming its pid in the tree) and `gc.log.lock`: ended at the
    command's exit with SIGTERM, the gc removes them, and the next `git gc` works
    (killed outright, it left both and `git gc` refused: "gc is already running")."""
    _two_packs(workspace)
    command = (
        "git -c user.name=t -c user.email=t@t -c gc.autoPackLimit=1 "
        "-c gc.autoDetach=true "
        "commit -q --allow-empty -m gc 2>/dev/null; "
        "for i in $(seq 1 2000); do [ -e .git/gc.pid ] && break; sleep 0.005; done; "
        "[ -e .git/gc.pid ] && echo gc running"
    )
    got = await _run(command, workspace)
    assert got.returncode == 0
    assert got.output == "gc running\n"  # and no note: nothing was left
    git = workspace / ".git"
    assert not (git / "gc.pid").exists()
    assert not (git / "gc.log.lock").exists()
    gc = subprocess.run(  # noqa: ASYNC221
        [*GIT, "gc", "-q"], cwd=workspace, capture_output=True, text=True, check=False
    )
    assert gc.returncode == 0, gc.stderr


@pytest.mark.rule("S13")
async def test_a_kill_of_what_the_command_left_running_names_the_locks_left(
    workspace: Path,
) -> None:
    """A process the command left running ignores SIGTERM while it holds `gc.pid`
    and `gc.log.lock`: killed once its window closed, the output names both with the
    `rm -f` that removes them; neither is removed."""
    subprocess.run([*GIT, "init", "-q"], cwd=workspace, check=True)  # noqa: ASYNC221
    command = (
        "(trap '' TERM; echo \"$BASHPID vm\" > .git/gc.pid; : > .git/gc.log.lock; "
        "exec sleep 30) & "
        "until [ -e .git/gc.log.lock ]; do sleep 0.005; done; echo committed"
    )
    got = await _run(command, workspace)
    assert got.returncode == 0
    git = workspace / ".git"
    assert got.output.startswith("committed\n")
    assert (
        f"[ending what the command left running (at its exit) left git lock files in "
        f"{git}: gc.pid, gc.log.lock; gc.pid names a process of the ended tree"
    ) in got.output
    assert f"rm -f {git / 'gc.pid'} {git / 'gc.log.lock'}]" in got.output
    assert (git / "gc.pid").exists()
    assert (git / "gc.log.lock").exists()


def test_stale_git_locks_looks_only_at_the_cwd_repository_and_recent_files(
    tmp_path: Path,
) -> None:
    """Only the nearest `.git` directory (from a subfolder too), only locks changed
    since the call began; a `.git` file or link is not followed."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    lock = repo / ".git" / "index.lock"
    lock.touch()
    assert "index.lock" in stale_git_locks(repo / "sub", since=time.time())
    os.utime(lock, (time.time() - 60, time.time() - 60))
    assert stale_git_locks(repo, since=time.time()) == ""
    os.utime(lock)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".git").symlink_to(repo / ".git")
    assert stale_git_locks(linked, since=time.time()) == ""
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    assert stale_git_locks(worktree, since=time.time()) == ""
    assert stale_git_locks(tmp_path, since=time.time()) == ""
