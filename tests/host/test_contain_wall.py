"""The wall around the stop: inside every tree the stop folders are read-only, locked.

Under the namespace containment no command form can change the stop: not `rm`, `mv`,
`touch` or an interpreter writing the file, not `umount` or a read-write remount, not
a bind of the filesystem root, not the outer `/proc`. Other writes work and keep the
caller's uid. Tested as root through the Bash tool, and as an unprivileged uid through
the supervisor program itself (the interpreter tests run with may not be reachable by
another uid).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest

from tether.host import ToolContext
from tether.host._contain import SUPERVISOR, wall_options, wall_paths
from tether.host.tools.bash import Bash
from tether.stop import protected_paths

ATTEMPTS = {
    "rm": "rm -f {stop}/stop.json",
    "mv": "mv {stop}/stop.json {stop}/moved.json",
    "touch": "touch {stop}/new.json",
    "python": 'python3 -c \'open("{stop}/stop.json", "w").write("gone")\'',
    "umount": "umount {stop}",
    "umount-lazy": "umount -l {stop}",
    "remount-rw": "mount -o remount,rw {stop}",
    "remount-rw-bind": "mount -o remount,bind,rw {stop}",
    "bind-root": "mkdir -p m && mount --bind / m && touch m{stop}/new.json",
    "outer-proc": "touch /proc/1/root{stop}/new.json",
    "nested-userns": "unshare -Urm sh -c 'umount {stop} || mount -o remount,rw {stop}; touch {stop}/new.json'",
    "rmdir": "rm -rf {stop}",
}
"""Every way tried to change the stop; each must fail."""


def _script(stop: Path) -> str:
    lines = []
    for name, attempt in ATTEMPTS.items():
        lines.append(
            f"if ( {attempt.format(stop=stop)} ) >/dev/null 2>&1; "
            f"then echo changed-{name}; else echo refused-{name}; fi"
        )
    lines.append("echo written > made.txt && stat -c 'owner %u' made.txt")
    return "\n".join(lines)


def _check(output: str, stop: Path, uid: int) -> None:
    refused = {
        line.removeprefix("refused-")
        for line in output.split()
        if line.startswith("refused-")
    }
    assert refused == set(ATTEMPTS), output
    assert f"owner {uid}" in output
    assert (stop / "stop.json").read_text() == "STOP"
    assert sorted(p.name for p in stop.iterdir()) == ["stop.json"]


def _stop_folder() -> Path:
    stop = next(p for p in protected_paths() if p.name == "stop")
    stop.mkdir(parents=True)
    (stop / "stop.json").write_text("STOP")
    return stop


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_no_command_form_changes_the_stop_folder(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the caller (root here), every attempt on the stop fails; the workspace takes writes."""
    monkeypatch.setenv("TETHER_CONTAINMENT", "namespace")
    stop = _stop_folder()
    chunks: list[str] = []
    ctx = ToolContext(
        call_id="c", session_id="s", workspace=workspace, on_progress=chunks.append
    )
    with anyio.fail_after(30):
        output = await Bash().run(ctx, {"command": _script(stop)})
    _check(output, stop, os.geteuid())
    assert (workspace / "made.txt").stat().st_uid == os.geteuid()


_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
_SETPRIV = shutil.which("setpriv")


@pytest.mark.rule("S13")
@pytest.mark.root
@pytest.mark.skipif(
    _PYTHON is None or _SETPRIV is None,
    reason="needs a system python3 and util-linux setpriv to run as another uid",
)
def test_s13_the_wall_holds_for_an_unprivileged_caller() -> None:
    """As uid 1001 (a user namespace of its own), every attempt on the stop fails too,
    and a file written in the workspace belongs to uid 1001."""
    # pytest's own temporary folders are closed to other uids.
    with tempfile.TemporaryDirectory(prefix="tether-wall-") as tmp:
        _wall_as_1001(Path(tmp))


def _wall_as_1001(tmp_path: Path) -> None:
    assert _PYTHON is not None
    assert _SETPRIV is not None
    tmp_path.chmod(0o755)
    stop = tmp_path / "state" / "stop"
    stop.mkdir(parents=True)
    (stop / "stop.json").write_text("STOP")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    private = tmp_path / "tmp"
    private.mkdir()
    for path in (tmp_path / "state", stop, stop / "stop.json", workspace, private):
        os.chown(path, 1001, 1001)
    walls = wall_paths([stop], workspace=workspace)
    assert walls == [str(stop)]
    argv = [
        _SETPRIV,
        "--reuid=1001",
        "--regid=1001",
        "--clear-groups",
        _PYTHON,
        "-I",
        "-S",
        str(SUPERVISOR),
        "namespace",
        *walls,
        *wall_options(writable=[workspace], tmp=private),
        "--",
        "/bin/bash",
        "bash",
        "-c",
        _script(stop),
    ]
    with subprocess.Popen(
        argv,
        cwd=workspace,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    ) as supervisor:
        assert supervisor.stdout is not None
        assert supervisor.stderr is not None
        output = supervisor.stdout.read().decode()
        status = supervisor.stderr.read().decode()
        assert supervisor.stdin is not None
        supervisor.stdin.close()
        assert supervisor.wait(timeout=30) == 0, status
    assert "exit 0" in status.split("\n"), status
    _check(output, stop, 1001)
    assert (workspace / "made.txt").stat().st_uid == 1001


def test_wall_paths_wall_what_exists_and_the_nearest_tether_folder_of_what_does_not(
    tmp_path: Path,
) -> None:
    """A missing stop path is walled through its nearest existing folder while that is
    one of tether's own; a path holding the workspace is left out; nested paths once."""
    config, state = tmp_path / "home" / "config", tmp_path / "home" / "state"
    (state / "stop" / "0").mkdir(parents=True)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    roots = [config, state]
    found = wall_paths(
        [
            state / "stop",
            state / "stop" / "0",  # below a walled folder
            config / "stop-setup.json",  # no config folder yet: nothing to wall
            tmp_path / "shared" / "stop",  # missing, outside tether's folders
            tmp_path,  # holds the workspace
        ],
        workspace=workspace,
        roots=roots,
    )
    assert found == [str(state / "stop")]
    config.mkdir()
    found = wall_paths([config / "stop-setup.json"], workspace=workspace, roots=roots)
    assert found == [str(config)]
    found = wall_paths([state / "stop" / "1"], workspace=workspace, roots=roots)
    assert found == [str(state / "stop")]
