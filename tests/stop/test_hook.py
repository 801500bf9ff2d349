"""`judge_hook_event`: one PreToolUse event and the agent's environment, one answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.stop import judge_hook_event, lift_stop, set_stop


def _event(tool_name: str, tool_input: dict[str, object], cwd: Path) -> bytes:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "tool_name": tool_name,
            "tool_input": tool_input,
            "cwd": str(cwd),
        }
    ).encode()


def test_a_run_agent_call_is_refused_while_a_stop_stands(workspace: Path) -> None:
    """Spec 03, "The stop inside an agent": while a stop stands, a run's agent is told
    that the person stopped the run and that it should end its turn; after the lift
    its calls pass again."""
    read = _event("Read", {"file_path": str(workspace / "notes.txt")}, workspace)
    env = {"TETHER_RUN": "r-1", "TETHER_LANE": "lane-2"}
    assert judge_hook_event(read, environ=env).allowed
    set_stop()
    answer = judge_hook_event(read, environ=env)
    assert not answer.allowed
    assert answer.stopped
    assert "the person stopped this run (run r-1, lane lane-2)" in answer.message
    assert "End your turn" in answer.message
    lift_stop()
    assert judge_hook_event(read, environ=env).allowed


def test_outside_a_run_the_stop_leaves_calls_to_the_guard(workspace: Path) -> None:
    """A tether choice: the stop binds the agents of tether's runs (`TETHER_RUN`); a
    person's own Claude Code session under the hook is judged by the guard alone."""
    set_stop()
    harmless = _event("Bash", {"command": "ls -la"}, workspace)
    assert judge_hook_event(harmless, environ={}).allowed
    lift = _event("Bash", {"command": "tether lift"}, workspace)
    answer = judge_hook_event(lift, environ={})
    assert not answer.allowed
    assert not answer.stopped
    assert answer.message.startswith("tether guard refused this Bash call")


def test_the_guard_still_judges_a_run_agent_call_with_no_stop(workspace: Path) -> None:
    """With no stop standing, a run's agent meets the guard as any agent does."""
    lift = _event("Bash", {"command": "tether lift"}, workspace)
    answer = judge_hook_event(lift, environ={"TETHER_RUN": "r-1"})
    assert not answer.allowed
    assert not answer.stopped
    assert "tether lift" in answer.message


def test_an_empty_run_name_is_no_run(workspace: Path) -> None:
    """`TETHER_RUN=` (set but empty) does not make the hook read the stop."""
    set_stop()
    read = _event("Read", {"file_path": "x"}, workspace)
    assert judge_hook_event(read, environ={"TETHER_RUN": ""}).allowed


def test_an_event_over_4_mib_is_refused_unread() -> None:
    """A hook must answer before its host gives up, so a huge event is refused whole."""
    answer = judge_hook_event(b" " * (4 * 1024 * 1024 + 1), environ={})
    assert not answer.allowed
    assert "larger than 4 MiB" in answer.message


def test_a_broken_setup_leaves_a_run_agent_call_to_the_guard(
    workspace: Path, tether_home: Path
) -> None:
    """A setup record that cannot be read holds the run itself at its next step; the
    hook does not turn it into a stop, and the call still meets the guard."""
    record = tether_home / "config" / "stop-setup.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("not json")
    record.chmod(0o600)
    harmless = _event("Bash", {"command": "ls"}, workspace)
    assert judge_hook_event(harmless, environ={"TETHER_RUN": "r-1"}).allowed


def test_a_failure_inside_the_judgment_refuses(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook fails closed: an error while judging is a refusal that says so."""
    from tether.stop import _hook

    def broken(*args: object) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(_hook, "_guarded", broken)
    answer = judge_hook_event(_event("Bash", {"command": "ls"}, workspace))
    assert not answer.allowed
    assert answer.message == (
        "tether guard failed, so the call is blocked: RuntimeError('boom')"
    )


@pytest.mark.rule("agent-stop")
def test_a_run_that_took_a_stop_refuses_its_agents_calls_by_its_mark(
    workspace: Path,
) -> None:
    """Inside a root caller's tree the stop cannot be judged (root's files show as
    nobody's: HOLD); the run's halting mark, read-only there, refuses every call."""
    from tether._channel import halting_mark

    read = _event("Read", {"file_path": str(workspace / "notes.txt")}, workspace)
    env = {"TETHER_RUN": "run_marked", "TETHER_LANE": "lane_1"}
    before = judge_hook_event(read, environ=env)
    assert before.allowed
    mark = Path(halting_mark("run_marked"))
    mark.parent.mkdir(parents=True)
    mark.touch()
    after = judge_hook_event(read, environ=env)
    assert not after.allowed
    assert after.stopped
    assert "the person stopped this run (run run_marked, lane lane_1)" in after.message
    other = judge_hook_event(read, environ={"TETHER_RUN": "run_other"})
    assert other.allowed


@pytest.mark.parametrize(
    "given", ["/etc/tether", "/etc/tether/", "/", "//x", "rel/dir", "tether", "/a/./b"]
)
def test_the_system_dir_text_is_the_resolved_path(given: str) -> None:
    """The hook's system dir is `Path(realpath(parent)) / name` of the given one, as
    the binding reader resolves it."""
    import os

    from tether.stop._locations import system_dir_text

    path = Path(given)
    assert system_dir_text(given) == str(
        Path(os.path.realpath(path.parent)) / path.name
    )


def test_the_binding_reader_runs_wherever_a_binding_may_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook skips the whole binding reader only where, on a local mount, no
    binding file is there; a file (of any kind), or a mount table that is missing or
    not local, sends the look to the reader with every check."""
    from tether.stop import _mounts, _protected

    local = _mounts.MountPlan(crossed=(), skip=frozenset(), local=True)
    monkeypatch.setattr(_mounts, "plan", lambda folder, uid_dir: local)
    system = tmp_path / "etc-tether"
    assert not _protected._may_be_bound(str(system))
    system.mkdir()
    assert not _protected._may_be_bound(str(system))
    (system / "binding.json").symlink_to("nowhere")
    assert _protected._may_be_bound(str(system))
    (system / "binding.json").unlink()
    remote = _mounts.MountPlan(crossed=(), skip=frozenset(), local=False)
    monkeypatch.setattr(_mounts, "plan", lambda folder, uid_dir: remote)
    assert _protected._may_be_bound(str(system))
    monkeypatch.setattr(_mounts, "plan", lambda folder, uid_dir: None)
    assert _protected._may_be_bound(str(system))


def test_protected_texts_are_the_protected_paths(workspace: Path) -> None:
    """The hook's list is `protected_paths()`, each as text, in the same order."""
    from tether.stop import protected_paths
    from tether.stop._protected import protected_texts

    assert protected_texts() == [str(path) for path in protected_paths()]


def _reads_stopped() -> bool:
    from tether.stop import ReadOutcome, StopStore

    try:
        reading = StopStore.from_setup(create=False).read()
    except Exception:
        return False
    return reading.outcome is ReadOutcome.STOPPED


def test_the_hooks_quick_look_finds_every_stop_the_reader_finds(
    tether_home: Path,
) -> None:
    """`stop_may_stand` (a few `lstat`s before the whole reader) answers False only
    where the reader would not say STOPPED: no stop, a lifted one; True for a stop,
    a link or folder in its place, and a setup record it cannot read."""
    from tether.stop._protected import stop_may_stand

    seen: list[tuple[str, bool, bool]] = []

    def look(name: str) -> None:
        seen.append((name, stop_may_stand(), _reads_stopped()))

    look("fresh home")
    set_stop()
    look("stop set")
    [stop_file] = (tether_home / "state" / "stop").glob("*/stop")
    lift_stop()
    look("lifted")
    stop_file.symlink_to("/etc/hostname")
    look("a link in its place")
    stop_file.unlink()
    stop_file.mkdir()
    look("a folder in its place")
    stop_file.rmdir()
    record = tether_home / "config" / "stop-setup.json"
    kept = record.read_bytes() if record.exists() else None
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("not json")
    look("a broken setup record")
    if kept is not None:
        record.write_bytes(kept)
    for name, may, stopped in seen:
        assert may or not stopped, name
    looks = {name: may for name, may, _ in seen}
    assert looks == {
        "fresh home": False,
        "stop set": True,
        "lifted": False,
        "a link in its place": True,
        "a folder in its place": True,
        "a broken setup record": True,
    }
