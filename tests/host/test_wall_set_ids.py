"""Nothing set-uid, set-gid, file-capable or a device leaves a tree (spec 01 S16).

A root caller's tree writes its writable copies as root (they are idmapped), so without
more it could leave a set-uid-root copy of a program, or one with file capabilities,
that any other uid then runs as root. Each attack here runs in a real walled tree; after
the call a walk finds no such file in the declared folder or the workspace, and a second
uid running each copy outside (through `setpriv`) gets no privilege: a probe says so.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest

from tether.host import run_command
from tether.host._contain import SUPERVISOR, wall_options
from tether.host._supervisor import _refusals

pytestmark = pytest.mark.rule("S16")

_SETPRIV = shutil.which("setpriv")
_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
_ID = shutil.which("id", path="/usr/bin:/bin")

CAPABILITY = (
    # security.capability, revision 2, effective: CAP_SETUID (7) permitted.
    "import os, struct, sys; os.setxattr(sys.argv[1], 'security.capability', "
    "struct.pack('<IIIII', 0x02000001, 1 << 7, 0, 0, 0))"
)


def _attacks(declared: Path) -> str:
    """One line per attempt: `made-NAME` when it worked, `refused-NAME` when not."""
    attempts = {
        "suid-declared": f"cp {_ID} {declared}/id-u && chmod u+s {declared}/id-u",
        "sgid-declared": f"cp {_ID} {declared}/id-g && chmod g+s {declared}/id-g",
        "suid-workspace": f"cp {_ID} id-u && chmod 4755 id-u",
        "sgid-workspace": f"cp {_ID} id-g && chmod 2755 id-g",
        "suid-create": (
            f"python3 -c \"import os; os.open('{declared}/made', "
            'os.O_CREAT | os.O_WRONLY, 0o4755)"'
        ),
        "suid-install": f"install -m 4755 {_ID} {declared}/installed",
        "capability": f'cp {_PYTHON} {declared}/py && {declared}/py -c "{CAPABILITY}" {declared}/py',
        "device-null": f"mknod {declared}/null c 1 3",
        "device-whiteout": f"mknod {declared}/whiteout c 0 0",
        "device-block": "mknod loop0 b 7 0",
    }
    lines = [
        f"if ( {cmd} ) >/dev/null 2>&1; then echo made-{name}; "
        f"else echo refused-{name}; fi"
        for name, cmd in attempts.items()
    ]
    lines.append(
        'python3 -c "import os, sys; f = os.statvfs(sys.argv[1]).f_flag; '
        "print('mounted', f & os.ST_NOSUID and 'nosuid', f & os.ST_NODEV and 'nodev')\" "
        f"{declared}"
    )
    lines.append("echo x > plain && chmod 755 plain && echo plain-chmod-ok")
    return "\n".join(lines)


def _left(roots: list[Path]) -> list[str]:
    """What a walk finds below `roots` that may not leave a tree."""
    found = []
    for root in roots:
        for path in [root, *root.rglob("*")]:
            st = path.lstat()
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                found.append(f"device {path}")
            elif not stat.S_ISDIR(st.st_mode) and st.st_mode & 0o6000:
                found.append(f"set-id {path} {oct(st.st_mode)}")
            if stat.S_ISREG(st.st_mode):
                try:
                    os.getxattr(path, "security.capability", follow_symlinks=False)
                except OSError:
                    continue
                found.append(f"capability {path}")
    return found


def _as_another_uid(program: Path, *args: str) -> str:
    assert _SETPRIV is not None
    return subprocess.run(
        [
            _SETPRIV,
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
            str(program),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout.strip()


def _assert_refused(output: str) -> None:
    made = [w for w in output.split() if w.startswith("made-")]
    assert made == [], output
    assert "refused-device-null" in output.split()
    assert "plain-chmod-ok" in output.split()  # an ordinary chmod still works


async def _walled(script: str, workspace: Path, declared: Path) -> str:
    done = await run_command(
        ["bash", "-c", script],
        cwd=workspace,
        env=dict(os.environ),
        stop=anyio.Event(),
        on_output=lambda _: None,
        writable=[declared],
    )
    return done.output


@pytest.mark.root
@pytest.mark.skipif(
    None in (_SETPRIV, _PYTHON, _ID), reason="needs setpriv, a system python3 and id"
)
def test_S16_a_root_callers_tree_leaves_nothing_set_uid_set_gid_or_a_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_CONTAINMENT", "namespace")
    with tempfile.TemporaryDirectory(prefix="tether-setid-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the second uid must reach the copies
        workspace, declared = root / "ws", root / "declared"
        workspace.mkdir(mode=0o755)
        declared.mkdir(mode=0o755)
        output = anyio.run(_walled, _attacks(declared), workspace, declared)
        _assert_refused(output)
        assert "mounted nosuid nodev" in output  # inside the wall
        assert _left([declared, workspace]) == []
        # The copies are there, owned by root outside; run by uid 1000 they give
        # it nothing: the probe is `id` itself, asked for its effective ids.
        for copy in [declared / "id-u", declared / "id-g", workspace / "id-u"]:
            assert copy.stat().st_uid == 0
            assert _as_another_uid(copy, "-u") == "1000"
            assert _as_another_uid(copy, "-g") == "1000"
        python = declared / "py"
        probe = "import os; os.setuid(0); print('root')"
        assert _as_another_uid(python, "-c", probe) == ""


@pytest.mark.root
@pytest.mark.skipif(
    None in (_SETPRIV, _PYTHON, _ID), reason="needs setpriv, a system python3 and id"
)
def test_S16_an_unprivileged_callers_tree_makes_nothing_set_uid_either() -> None:
    """As uid 1000 through the supervisor program: a set-uid copy would be theirs,
    run by anyone as them."""
    assert _SETPRIV is not None
    assert _PYTHON is not None
    with tempfile.TemporaryDirectory(prefix="tether-setid-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        workspace, declared, private = root / "ws", root / "declared", root / "tmp"
        for path in (workspace, declared, private):
            path.mkdir()
            os.chown(path, 1000, 1000)
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
            *wall_options(writable=[workspace, declared], tmp=private),
            "--",
            "/bin/bash",
            "bash",
            "-c",
            _attacks(declared),
        ]
        with subprocess.Popen(
            argv,
            cwd=workspace,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(workspace)},
        ) as supervisor:
            assert supervisor.stdout is not None
            assert supervisor.stderr is not None
            assert supervisor.stdin is not None
            output = supervisor.stdout.read().decode()
            status = supervisor.stderr.read().decode()
            supervisor.stdin.close()
            assert supervisor.wait(timeout=60) == 0, status
        assert "exit 0" in status.split("\n"), (status, output)
        _assert_refused(output)
        assert "mounted nosuid nodev" in output
        assert _left([declared, workspace]) == []


def test_the_filter_fits_classic_bpf() -> None:
    """Whole instructions, each jump within reach (classic BPF jumps 255 at most)."""
    program = _refusals()
    assert len(program) % 8 == 0
    for at in range(0, len(program), 8):
        code, jt, jf = program[at], program[at + 2], program[at + 3]
        if code & 0x07 == 0x05:  # a jump: its targets are inside the program
            end = len(program) // 8
            assert at // 8 + 1 + max(jt, jf) < end
