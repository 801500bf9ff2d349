"""The wall (S15): what a process tree may write and reach, attacked from real trees.

Each attack runs in a real Bash call (or `run_command` tree) under the `namespace`
containment, as the caller the tests run as (root in CI: then the tree's root is the
unprivileged `TREE_UID` outside), and once more as uid 1000 through the supervisor
program itself (the interpreter the tests run with may not be reachable by another
uid). Every attack must fail and leave its target as it was; the workspace and the
private `TMPDIR` take writes. Under the `subreaper` fallback no wall holds but the
environment scrub, and a test says so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from tests.mounts import mounted

from tether.host import ToolContext, run_command
from tether.host._contain import (
    SUPERVISOR,
    session_masks,
    tree_tmp,
    wall_options,
    wall_paths,
)
from tether.host._supervisor import TREE_UID
from tether.host.tools.bash import Bash

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.rule("S15")

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")


@pytest.fixture(autouse=True)
def namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONTAINMENT", "namespace")


async def _bash(workspace: Path, command: str) -> str:
    ctx = ToolContext(call_id="c", session_id="s", workspace=workspace)
    with anyio.fail_after(30):
        return await Bash().run(ctx, {"command": command})


def _attempts(attempts: dict[str, str]) -> str:
    """One shell line per attempt, printing `changed-NAME` or `refused-NAME`."""
    return "\n".join(
        f"if ( {cmd} ) >/dev/null 2>&1; then echo changed-{name}; "
        f"else echo refused-{name}; fi"
        for name, cmd in attempts.items()
    )


def _refused(output: str, attempts: dict[str, str]) -> None:
    refused = {
        w.removeprefix("refused-") for w in output.split() if w.startswith("refused-")
    }
    assert refused == set(attempts), output


def _digest(root: Path) -> str:
    """Every path, mode and content below `root` (a change anywhere changes it)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        h.update(f"{path.relative_to(root)} {st.st_mode} {st.st_uid}".encode())
        if path.is_file() and not path.is_symlink():
            h.update(path.read_bytes())
    return h.hexdigest()


def _state(home: Path) -> Path:
    state = home / "state"
    for name in ("lanes/run-1", "plans", "logs", "board", "mcp-auth"):
        (state / name).mkdir(parents=True)
    (state / "store.sqlite").write_bytes(b"SQLite format 3\0")
    (state / "plans" / "plan.toml").write_text("[plan]\n")
    (state / "logs" / "lane.log").write_text("log\n")
    return state


def _tether_attempts(home: Path) -> dict[str, str]:
    config, state = home / "config", home / "state"
    return {
        "store": f"echo x >> {state}/store.sqlite",
        "plan": f"echo x > {state}/plans/plan.toml",
        "lane-log": f"echo x >> {state}/logs/lane.log",
        "other-lane": f"touch {state}/lanes/run-1/file",
        "rm-store": f"rm -f {state}/store.sqlite",
        "setup-record": f"mkdir -p {config} && echo '{{}}' > {config}/stop-setup.json",
        "config-toml": f"mkdir -p {config} && echo 'grace = 1' > {config}/config.toml",
    }


@pytest.mark.anyio
async def test_S15_tethers_state_and_config_folders_are_read_only_made_or_not(
    workspace: Path, tether_home: Path
) -> None:
    """The store, plans, lane logs and other lanes cannot be changed, and the config
    folder not made yet cannot be made (no `config/stop-setup.json`)."""
    state = _state(tether_home)
    before = _digest(state)
    attempts = _tether_attempts(tether_home)
    output = await _bash(workspace, _attempts(attempts))
    _refused(output, attempts)
    assert _digest(state) == before
    assert not (tether_home / "config").exists()


@pytest.mark.anyio
async def test_S15_tethers_folders_below_the_workspace_are_made_and_walled(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With tether's home inside the workspace, its folders are made first and stay
    read-only, while the rest of the workspace takes writes."""
    home = workspace / "tether-home"
    monkeypatch.setenv("TETHER_HOME", str(home))
    home.mkdir()
    attempts = {
        "setup-record": f"echo '{{}}' > {home}/config/stop-setup.json",
        "config-toml": f"echo 'grace = 1' > {home}/config/config.toml",
        "state": f"touch {home}/state/store.sqlite",
    }
    output = await _bash(workspace, _attempts(attempts) + "\necho ok > made.txt")
    _refused(output, attempts)
    assert sorted(p.name for p in home.iterdir()) == ["config", "state"]
    assert not any((home / "config").iterdir())
    # Only the folders of the board's token and the MCP servers' OAuth tokens, made by
    # tether (empty, 0700) to be masked.
    made = sorted(p.name for p in (home / "state").iterdir())
    assert made == ["board", "mcp-auth"]
    assert not any(any((home / "state" / name).iterdir()) for name in made)
    assert (workspace / "made.txt").read_text() == "ok\n"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


def _repo(where: Path) -> Path:
    repo = where / "person-repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("mine\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def _repo_attempts(repo: Path) -> dict[str, str]:
    git = f"{repo}/.git"
    return {
        "hook": f"printf '#!/bin/sh\\necho pwned\\n' > {git}/hooks/pre-commit",
        "ref": f"echo 0000000000000000000000000000000000000000 > {git}/refs/heads/main",
        "new-ref": f"git -C {repo} branch evil",
        "config": f"echo '[core]\\n\\thooksPath = /tmp' >> {git}/config",
        "git-config": f"git -C {repo} config core.hooksPath /tmp",
        "checkout": f"echo changed > {repo}/README",
        "new-file": f"touch {repo}/new",
        "objects": f"touch {git}/objects/evil",
        "commit": f"git -C {repo} commit -q --allow-empty -m evil",
    }


@pytest.mark.anyio
async def test_S15_a_git_repository_outside_the_workspace_is_read_only(
    workspace: Path, tmp_path: Path
) -> None:
    """Hooks, refs, config, objects and the checkout of the person's repository
    cannot be changed from a tree whose workspace is elsewhere."""
    repo = _repo(tmp_path)
    before = _digest(repo)
    attempts = _repo_attempts(repo)
    output = await _bash(workspace, _attempts(attempts))
    _refused(output, attempts)
    assert _digest(repo) == before


def _machine() -> tuple[bytes, bytes, bool]:
    """What the machine attempts would change: core_pattern, /etc/passwd, cron.d."""
    return (
        CORE_PATTERN.read_bytes(),
        Path("/etc/passwd").read_bytes(),
        Path("/etc/cron.d/tether-wall-probe").exists(),
    )


def _machine_attempts() -> dict[str, str]:
    # Each attempt writes back what is there already: were the wall open, the
    # machine would still be unchanged.
    return {
        "core-pattern": f'v=$(cat {CORE_PATTERN}); printf "%s\\n" "$v" > {CORE_PATTERN}',
        "sysrq": "printf '' > /proc/sysrq-trigger",
        "passwd": "printf '' >> /etc/passwd",
        "cron": "touch /etc/cron.d/tether-wall-probe",
        "sys": "printf '' >> /sys/kernel/uevent_helper",
        "usr": "touch /usr/tether-wall-probe",
    }


@pytest.mark.anyio
async def test_S15_a_tree_never_acts_as_the_machines_root(workspace: Path) -> None:
    """Kernel knobs (`/proc/sys/kernel/core_pattern`, `/proc/sysrq-trigger`, `/sys`)
    and system files (`/etc/passwd`, `/etc/cron.d`) cannot be written; as root, the
    tree's root is the unprivileged `TREE_UID` outside."""
    before = _machine()
    attempts = _machine_attempts()
    output = await _bash(workspace, _attempts(attempts) + "\ncat /proc/self/uid_map")
    _refused(output, attempts)
    assert _machine() == before
    if os.geteuid() == 0:
        assert output.split()[-3:] == ["0", str(TREE_UID), "1"], output


@pytest.mark.root
@pytest.mark.anyio
async def test_S15_a_root_callers_tree_cannot_read_shadow_yet_runs_roots_tools(
    workspace: Path,
) -> None:
    """As root, the tree cannot read `/etc/shadow` (root and `shadow` only) nor write
    root's home, yet runs commands from root's folders on `PATH` (shown read-only as
    the tree's own)."""
    assert os.stat("/etc/shadow").st_mode & 0o004 == 0
    attempts = {"shadow": "cat /etc/shadow", "root-write": "touch ~/.tether-wall-probe"}
    output = await _bash(workspace, _attempts(attempts) + "\npython3 -c 'print(6*7)'")
    _refused(output, attempts)
    assert "42" in output.split()


@pytest.fixture
def session_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Path]]:
    """A tmux socket, an ssh agent socket and a runtime folder with a D-Bus socket,
    listening, named by the session's variables."""
    uid = os.geteuid()
    places = {
        "tmux": tmp_path / "tmuxroot" / f"tmux-{uid}" / "default",
        "ssh": tmp_path / "ssh-agent0" / "agent.1",
        "dbus": tmp_path / "runtime" / "bus",
    }
    listeners = []
    for path in places.values():
        path.parent.mkdir(parents=True)
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
        listener.listen()
        listeners.append(listener)
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path / "tmuxroot"))
    monkeypatch.setenv("TMUX", f"{places['tmux']},4242,0")
    monkeypatch.setenv("TMUX_PANE", "%0")
    monkeypatch.setenv("SSH_AUTH_SOCK", str(places["ssh"]))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(places["dbus"].parent))
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={places['dbus']}")
    yield places
    for listener in listeners:
        listener.close()


@pytest.mark.anyio
async def test_S15_the_sessions_sockets_and_variables_do_not_reach_a_tree(
    workspace: Path, session_sockets: dict[str, Path]
) -> None:
    """`TMUX`, `TMUX_PANE`, `SSH_AUTH_SOCK`, `XDG_RUNTIME_DIR` and the D-Bus address
    are not passed, and the sockets they name cannot be reached by path either."""
    names = (
        "TMUX",
        "TMUX_PANE",
        "SSH_AUTH_SOCK",
        "XDG_RUNTIME_DIR",
        "DBUS_SESSION_BUS_ADDRESS",
    )
    lines = [f'echo "{n}=${{{n}-unset}}"' for n in names]
    attempts = {
        name: f"python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{path}\")'"
        for name, path in session_sockets.items()
    }
    attempts["tmux-new-window"] = "tmux new-window true"
    output = await _bash(workspace, "\n".join(lines) + "\n" + _attempts(attempts))
    for name in names:
        assert f"{name}=unset" in output.split(), output
    _refused(output, attempts)
    # The host still reaches them: the sockets were live all along.
    probe = socket.socket(socket.AF_UNIX)
    probe.connect(str(session_sockets["ssh"]))
    probe.close()


@pytest.mark.anyio
async def test_S15_under_the_fallback_the_variables_go_but_the_sockets_stay_open(
    workspace: Path, session_sockets: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `subreaper` the session's variables are still withheld, but the sockets
    are reachable by path (docs/tools-process.md says so)."""
    monkeypatch.setenv("TETHER_CONTAINMENT", "subreaper")
    path = session_sockets["ssh"]
    output = await _bash(
        workspace,
        'echo "SSH_AUTH_SOCK=${SSH_AUTH_SOCK-unset}"\n'
        f"python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{path}\")'"
        " && echo reached",
    )
    assert "SSH_AUTH_SOCK=unset" in output.split()
    assert "reached" in output.split()


SECRETS = {
    "TETHER_MODEL_KEY": "sk-tether-model-key",
    "TETHER_STORE": "postgresql://tether:s3cret-password@127.0.0.1/tether",
    "TETHER_STORE_URL": "postgresql://tether:s3cret-password@127.0.0.1/claims",
    "OPENAI_API_KEY": "sk-openai-key",
}


@pytest.mark.parametrize("kind", ["namespace", "subreaper"])
@pytest.mark.anyio
async def test_S15_tethers_secrets_are_not_passed_unless_named(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Under either containment, the model keys and the store URLs (with the store's
    password) are withheld from a tree; a tool names the one it needs (`pass_env`)."""
    monkeypatch.setenv("TETHER_CONTAINMENT", kind)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    output = await _bash(workspace, "env")
    for value in SECRETS.values():
        assert value not in output
    assert "s3cret" not in output
    done = await run_command(
        ["env"],
        cwd=workspace,
        env=dict(os.environ),
        stop=anyio.Event(),
        on_output=lambda _: None,
        pass_env=["TETHER_MODEL_KEY"],
    )
    assert f"TETHER_MODEL_KEY={SECRETS['TETHER_MODEL_KEY']}" in done.output.split()
    assert "s3cret" not in done.output


@pytest.mark.anyio
async def test_S15_the_workspace_and_a_private_tmpdir_take_writes(
    workspace: Path,
) -> None:
    """The workspace takes writes (files belong to the caller outside), `TMPDIR` is a
    private tmpfs of the tree's own (gone with it), `/dev/null` and `/dev/shm` work."""
    script = (
        "echo ws > made.txt && mkdir -p sub/deeper && echo x > sub/deeper/f\n"
        'echo tmp > "$TMPDIR/t.txt" && cat "$TMPDIR/t.txt"\n'
        'echo "tmpdir=$TMPDIR"\n'
        "echo null > /dev/null && echo null-ok\n"
        "echo shm > /dev/shm/s && echo shm-ok\n"
    )
    output = await _bash(workspace, script)
    words = output.split()
    assert [w for w in words if w in ("tmp", "null-ok", "shm-ok")] == [
        "tmp",
        "null-ok",
        "shm-ok",
    ]
    tmpdir = next(w for w in words if w.startswith("tmpdir=")).removeprefix("tmpdir=")
    _written_by_the_caller(workspace, Path(tmpdir))


def _written_by_the_caller(workspace: Path, tmpdir: Path) -> None:
    assert (workspace / "made.txt").read_text() == "ws\n"
    assert (workspace / "made.txt").stat().st_uid == os.geteuid()
    assert (workspace / "sub" / "deeper" / "f").stat().st_uid == os.geteuid()
    assert not (tmpdir / "t.txt").exists()


@pytest.mark.anyio
async def test_S15_a_declared_writable_path_takes_writes_and_no_other(
    workspace: Path, tmp_path: Path
) -> None:
    """A path named in `writable` (an agent CLI's config dir, say) takes writes; a
    sibling not named stays read-only."""
    declared, sibling = tmp_path / "cli-config", tmp_path / "other"
    sibling.mkdir()
    done = await run_command(
        ["bash", "-c", f"touch {declared}/a && echo declared-ok; touch {sibling}/b"],
        cwd=workspace,
        env=dict(os.environ),
        stop=anyio.Event(),
        on_output=lambda _: None,
        writable=[declared],
    )
    assert "declared-ok" in done.output
    assert (declared / "a").stat().st_uid == os.geteuid()
    assert not (sibling / "b").exists()
    assert done.returncode != 0


@pytest.mark.anyio
async def test_S15_network_none_gives_loopback_only(workspace: Path) -> None:
    """`network="none"`: loopback works, any other address is unreachable."""
    code = (
        "import socket\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "socket.create_connection(s.getsockname()).close(); print('loopback-ok')\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
        "except OSError as exc:\n"
        "    print('outside', exc.errno)\n"
    )
    done = await run_command(
        ["python3", "-c", code],
        cwd=workspace,
        env=dict(os.environ),
        stop=anyio.Event(),
        on_output=lambda _: None,
        network="none",
    )
    assert "loopback-ok" in done.output.split(), done.output
    assert "outside 101" in done.output, done.output  # ENETUNREACH


@pytest.mark.anyio
async def test_S15_under_the_fallback_no_wall_holds(
    workspace: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `subreaper` a tree writes tether's state like any process of the account
    (what docs/tools-process.md says), and `network="none"` is refused, not ignored."""
    monkeypatch.setenv("TETHER_CONTAINMENT", "subreaper")
    state = _state(tether_home)
    await _bash(workspace, f"echo x >> {state}/logs/lane.log")
    assert (state / "logs" / "lane.log").read_text() == "log\nx\n"
    with pytest.raises(OSError, match="network 'none' needs the namespace"):
        await run_command(
            ["true"],
            cwd=workspace,
            env=dict(os.environ),
            stop=anyio.Event(),
            on_output=lambda _: None,
            network="none",
        )


_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
_SETPRIV = shutil.which("setpriv")


@pytest.mark.root
@pytest.mark.skipif(
    _PYTHON is None or _SETPRIV is None or shutil.which("git") is None,
    reason="needs a system python3, util-linux setpriv and git to run as another uid",
)
def test_S15_the_wall_holds_for_an_unprivileged_caller() -> None:
    """As uid 1000, with its own tether folders (config not made yet), its own git
    repository and the session's tmux socket: every attack fails, targets unchanged."""
    with tempfile.TemporaryDirectory(prefix="tether-s15-") as tmp:
        _as_1000(Path(tmp))


def _as_1000(root: Path) -> None:
    assert _PYTHON is not None
    assert _SETPRIV is not None
    root.chmod(0o755)
    home = root / "home"
    home.mkdir()
    state = _state(home)
    workspace, private = root / "ws", root / "tmp"
    workspace.mkdir()
    private.mkdir()
    repo = _repo(root)
    tmux = root / "tmuxroot" / "tmux-1000"
    tmux.mkdir(parents=True)
    for path in [root / "tmuxroot", *root.rglob("*")]:
        os.lchown(path, 1000, 1000)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmux / "default"))
    listener.listen()
    os.chown(tmux / "default", 1000, 1000)
    before = {"state": _digest(state), "repo": _digest(repo)}
    machine = _machine()
    session = {"TMUX": f"{tmux / 'default'},1,0", "TMUX_TMPDIR": str(root / "tmuxroot")}
    masks = session_masks([session], uid=1000, writable=[workspace])
    assert str(tmux) in masks
    attempts = {
        **_tether_attempts(home),
        **_repo_attempts(repo),
        **_machine_attempts(),
        "tmux-socket": f"python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{tmux}/default\")'",
    }
    script = _attempts(attempts) + (
        '\necho ws > made.txt && echo t > "$TMPDIR/t" && echo writes-ok'
    )
    walls = wall_paths(
        [state / "stop"], workspace=workspace, roots=[home / "config", state]
    )
    argv = [
        _SETPRIV,
        "--reuid=1000",
        "--regid=1000",
        "--clear-groups",
        _PYTHON,
        "-I",
        "-S",
        str(SUPERVISOR),
        "namespace",
        *walls,
        *wall_options(writable=[workspace], masks=masks, tmp=private),
        "--",
        "/bin/bash",
        "bash",
        "-c",
        script,
    ]
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "TMPDIR": str(private),
        "HOME": str(home),
    }
    try:
        # The supervisor kills the tree at the end of its stdin: hold it open until
        # the command's output ends.
        with subprocess.Popen(
            argv,
            cwd=workspace,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        ) as supervisor:
            assert supervisor.stdout is not None
            assert supervisor.stderr is not None
            assert supervisor.stdin is not None
            output = supervisor.stdout.read().decode()
            status = supervisor.stderr.read().decode()
            supervisor.stdin.close()
            assert supervisor.wait(timeout=60) == 0, status
    finally:
        listener.close()
    assert "exit 0" in status.split("\n"), (status, output)
    _refused(output, attempts)
    assert "writes-ok" in output.split()
    assert (workspace / "made.txt").stat().st_uid == 1000
    assert not (private / "t").exists()
    assert _digest(state) == before["state"]
    assert _digest(repo) == before["repo"]
    assert not (home / "config").exists()
    assert _machine() == machine
    assert tree_tmp([workspace]) is not None  # below /tmp: a folder of its own


@pytest.mark.anyio
async def test_S15_a_custom_tool_declares_what_its_program_may_write(
    workspace: Path, tmp_path: Path
) -> None:
    """`ctx.run_process(writable=[...])`: the declared folder and the workspace take
    writes, from a subfolder as working directory too."""
    declared = tmp_path / "tool-cache"
    sub = workspace / "sub"
    sub.mkdir()
    ctx = ToolContext(call_id="c", session_id="s", workspace=workspace)
    script = f"touch {declared}/a ../top.txt && echo both-ok"
    with anyio.fail_after(30):
        done = await ctx.run_process(
            ["bash", "-c", script], cwd=sub, writable=[declared]
        )
    assert "both-ok" in done.output.split(), done.output


@pytest.fixture
def shared_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB tmpfs, unmounted afterwards."""
    with mounted(tmp_path / "shared", options="size=1m,mode=0755") as shared:
        yield shared


@pytest.mark.root
@pytest.mark.anyio
async def test_S15_a_tree_that_fills_the_shared_file_system_cannot_keep_the_stop_out(
    shared_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The account's home and the workspace on one small file system: a Bash call fills
    it to the last block; the person's stop is still set, with its reason (the reserve
    a run's start made), and read STOPPED."""
    from tether.stop import ReadOutcome, StopStore, set_stop

    home = shared_fs / "home"
    home.mkdir()
    monkeypatch.setenv("TETHER_HOME", str(home))
    StopStore.from_setup()  # what a run does first: its stop's place and reserve
    work = shared_fs / "work"
    work.mkdir()
    output = await _bash(work, "cat /dev/zero > fill; df -k . | tail -1")
    assert "No space left" in output, output
    reading = set_stop("stopped on a full disk")
    assert reading.outcome is ReadOutcome.STOPPED
    assert StopStore.from_setup(create=False).read().outcome is ReadOutcome.STOPPED
    assert b"stopped on a full disk" in reading.stop_path.read_bytes()


@pytest.fixture
def closed_with_mounts(tmp_path: Path) -> Iterator[Path]:
    """A folder only root may traverse, holding a ramfs (no idmapped mounts) and a
    tmpfs; both unmounted afterwards."""
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    with mounted(closed / "ram", "ramfs"), mounted(closed / "shared"):
        yield closed


@pytest.mark.root
@pytest.mark.anyio
async def test_S15_a_workspace_on_a_mount_below_a_root_only_folder_is_reached(
    closed_with_mounts: Path,
) -> None:
    """A root caller's folder only root may traverse is shown to the tree idmapped;
    where one of its submounts cannot be (ramfs), it is shown without them, and the
    mount that holds the workspace is brought along: the tree still writes there."""
    work = closed_with_mounts / "shared" / "work"
    work.mkdir()
    output = await _bash(work, "echo made > made.txt && cat made.txt")
    assert "made" in output, output
    assert (work / "made.txt").stat().st_uid == os.geteuid()
