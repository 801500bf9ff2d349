"""The wall's plan (`host/_wall_plan.py`), in process: what the supervisor decides.

The supervisor (`host/_supervisor.py`) carries these decisions out in a namespace; the
wall tests (test_contain_wall.py, test_wall_s15.py, test_wall_set_ids.py) check the
result there. Here each decision is checked on its inputs alone: the command line the
host builds reads back as it was meant, the copies and mounts come in the order the
wall needs, and the seccomp filter, run by a small classic-BPF interpreter, refuses
exactly what S16 names.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import signal
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.host import _wall_plan as plan
from tether.host._contain import (
    ContainmentKind,
    Network,
    supervisor_argv,
    wall_options,
)

if TYPE_CHECKING:
    from collections.abc import Callable

_SEGMENT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/\x00"),
    min_size=1,
    max_size=8,
)
_PATH = st.lists(_SEGMENT, min_size=1, max_size=4).map(
    lambda parts: "/" + "/".join(parts)
)
_TOKEN = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


def _parse(args: list[str]) -> plan.Invocation:
    return plan.parse(args, supervisor="/opt/t/_supervisor.py", python="/usr/bin/py")


# The command line.


@given(
    kind=st.sampled_from(["namespace", "subreaper"]),
    walls=st.lists(_PATH, max_size=3),
    writable=st.lists(_PATH.map(lambda p: "/no-such-root" + p), max_size=3),
    see=st.lists(_PATH | _TOKEN, max_size=3),
    masks=st.lists(_PATH, max_size=2),
    tmp=st.none() | _PATH,
    network=st.sampled_from(["host", "none"]),
    server=st.none() | st.integers(1, 2**22),
    executable=_TOKEN,
    argv=st.lists(_TOKEN, min_size=1, max_size=4),
)
def test_the_command_line_the_host_builds_reads_back_as_meant(
    kind: ContainmentKind,
    walls: list[str],
    writable: list[str],
    see: list[str],
    masks: list[str],
    tmp: str | None,
    network: Network,
    server: int | None,
    executable: str,
    argv: list[str],
) -> None:
    """What `_contain` writes (and `_mcp` adds for a server) is what the supervisor
    reads: every path, option and argument, `--` and `=` inside them included."""
    options = wall_options(
        writable=[Path(p) for p in writable],
        see=see,
        masks=masks,
        tmp=None if tmp is None else Path(tmp),
        network=network,
    )
    if server is not None:
        options += ["--stdio", f"--parent={server}"]
    line = supervisor_argv(kind, walls, executable, argv, options=options)
    assert line[:3] == [sys.executable, "-I", "-S"]
    call = _parse(line[4:])
    assert (call.mode, call.executable, call.argv) == (kind, executable, argv)
    wall = call.wall
    assert wall.protect == walls
    assert wall.writable == [str(Path(p).resolve()) for p in writable]
    assert wall.see == [p for p in see if p.startswith("/")]
    assert wall.masks == masks
    assert wall.tmp == (str(Path(tmp)) if tmp is not None else "/tmp")
    assert wall.network == network
    assert (wall.stdio, wall.parent) == (
        (False, 0) if server is None else (True, server)
    )
    assert call.orders is (server is None)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], plan.USAGE),
        (["namespace"], plan.USAGE),
        (["namespace", "/p", "--rw=/w"], plan.USAGE),
        (["namespace", "--", "/bin/true"], plan.USAGE),
        (["namespace", "--bogus=1", "--", "/bin/true", "true"], "unknown wall option"),
        (["jail", "--", "/bin/true", "true"], "unknown containment 'jail'"),
    ],
)
def test_a_line_the_supervisor_cannot_take_exits_saying_why(
    args: list[str], said: str
) -> None:
    """No `--`, no command, an option or a containment it does not know: the program
    exits with one line, before anything is started."""
    with pytest.raises(SystemExit, match=re.escape(said)):
        _parse(args)


def test_a_probe_walls_the_program_itself_and_runs_the_interpreter() -> None:
    """`probe` takes the wall options only; its command tries the supervisor's file."""
    call = _parse(["probe", "--rw=/scratch"])
    assert (call.mode, call.executable, call.orders) == ("probe", "/usr/bin/py", False)
    assert call.wall.writable == ["/scratch"]
    assert call.wall.protect == ["/opt/t/_supervisor.py"]
    assert call.wall.see == ["/usr/bin/py"]
    assert call.argv[:4] == ["/usr/bin/py", "-I", "-S", "-c"]


@pytest.mark.parametrize(
    ("refusal", "code", "written"),
    [(errno.EROFS, 0, True), (errno.ENOENT, 3, False), (None, 4, False)],
)
def test_the_probe_passes_only_when_the_program_is_read_only(
    refusal: int | None,
    code: int,
    written: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe's code exits 0 and leaves its file when the supervisor's file is
    read-only, 3 on another error, 4 when it could be opened for writing."""
    target = "/opt/t/_supervisor.py"
    source = plan.probe_argv(target, "/usr/bin/py")[-1]
    monkeypatch.chdir(tmp_path)

    def fake_open(path: str, mode: str = "r") -> object:
        if path == target and refusal is not None:
            raise OSError(refusal, os.strerror(refusal))
        if path != target:
            return open(path, mode)
        with open(os.devnull, mode) as written:  # the probe leaves it open
            return written

    with pytest.raises(SystemExit) as ended:
        exec(source, {"open": fake_open})
    assert ended.value.code == code
    assert (tmp_path / "probe-written").exists() is written


# The namespaces and the ids.


@pytest.mark.parametrize(
    ("uid", "network", "flags"),
    [
        (0, "host", plan.CLONE_NEWNS | plan.CLONE_NEWPID),
        (0, "none", plan.CLONE_NEWNS | plan.CLONE_NEWPID | plan.CLONE_NEWNET),
        (1000, "host", plan.CLONE_NEWNS | plan.CLONE_NEWPID | plan.CLONE_NEWUSER),
    ],
)
def test_a_user_namespace_only_for_an_unprivileged_caller(
    uid: int, network: str, flags: int
) -> None:
    """Root needs no user namespace to make the others; `none` adds a network one."""
    assert plan.namespace_flags(uid, network) == flags


def test_a_root_callers_tree_maps_its_root_to_the_unprivileged_tree_uid() -> None:
    """S15: a root caller's tree is never the machine's root; another caller's ids
    map to themselves, inside the supervisor's namespace as in the starter's."""
    assert plan.starter_maps(True, 0, 0) == [
        ("uid_map", f"0 {plan.TREE_UID} 1\n"),
        ("setgroups", "deny"),
        ("gid_map", f"0 {plan.TREE_UID} 1\n"),
    ]
    assert plan.starter_maps(False, 1000, 100) == [
        ("uid_map", "1000 1000 1\n"),
        ("gid_map", "100 100 1\n"),
    ]
    assert plan.own_maps(1000, 100) == [
        ("setgroups", "deny"),
        ("uid_map", "1000 1000 1\n"),
        ("gid_map", "100 100 1\n"),
    ]


def test_only_the_initial_user_namespace_makes_the_machines_root() -> None:
    """A container's uid 0 maps to some outer uid: it is not the machine's root."""
    assert plan.initial_uid_map(b"         0          0 4294967295\n")
    assert not plan.initial_uid_map(b"         0     100000      65536\n")


# The wall.


def _modes(
    closed: set[str], missing: frozenset[str] = frozenset()
) -> Callable[[str], int]:
    def mode_of(path: str) -> int:
        if path in missing:
            raise FileNotFoundError(errno.ENOENT, path)
        return 0o40700 if path in closed else 0o40755

    return mode_of


def test_inside_is_by_whole_path_segments() -> None:
    """`/a` holds `/a/b` and itself, not `/ab`; `/` holds everything."""
    assert plan.inside("/a", "/a/b")
    assert plan.inside("/a", "/a")
    assert not plan.inside("/a", "/ab")
    assert plan.inside("/", "/x")


def test_the_highest_closed_folder_on_the_way_is_found() -> None:
    """The path itself counts only when asked (the command, not a writable path); a
    folder that cannot be read ends the search with nothing found."""
    modes = _modes({"/root", "/root/deep", "/srv/app"})
    assert plan.closed_ancestor("/root/deep/x", itself=False, mode_of=modes) == "/root"
    assert plan.closed_ancestor("/srv/app", itself=False, mode_of=modes) is None
    assert plan.closed_ancestor("/srv/app", itself=True, mode_of=modes) == "/srv/app"
    gone = _modes(set(), missing=frozenset({"/gone"}))
    assert plan.closed_ancestor("/gone/x/y", itself=True, mode_of=gone) is None


def test_a_root_callers_tree_sees_each_closed_folder_on_its_way_once() -> None:
    """The shortest closed folder wins over one below it, whichever comes first; one
    at or below a writable path is not shown (the writable copy shows it)."""
    wall = plan.Wall()
    wall.writable = ["/root/ws/lane", "/home/me"]
    wall.see = ["/usr/bin/py", "/home/me/.local/bin/tool", "/srv/a/b/tool"]
    modes = _modes({"/root", "/srv/a/b", "/srv/a", "/home/me/.local"})
    found = plan.closed_on_the_way(
        wall, real_see=["/opt/py/bin/py", *wall.see[1:]], mode_of=modes
    )
    assert found == ["/root", "/srv/a"]
    assert plan.copies(["/srv/a/b/c", "/root"], wall.writable) == [
        ("/root", True),
        ("/srv/a/b/c", True),
        ("/root/ws/lane", False),
        ("/home/me", False),
    ]


def test_the_submounts_on_the_way_are_those_holding_what_the_tree_reaches() -> None:
    """Shortest first, each once, never the path itself; a submount holding nothing
    the tree writes or sees is left behind."""
    points = ["/", "/root", "/root/cache", "/root/data", "/root/data/x", "/root/data"]
    assert plan.has_submounts("/root", points)
    assert not plan.has_submounts("/root/cache", points)
    wanted = ["/root/data/x/ws", "/usr/bin/py"]
    assert plan.submounts_on_the_way("/root", points, wanted) == [
        "/root/data",
        "/root/data/x",
    ]


def test_writable_copies_never_let_set_ids_or_devices_act() -> None:
    """S16: every writable copy is nosuid and nodev; an idmapped one is idmapped."""
    idmap, ro = plan.MOUNT_ATTR_IDMAP, plan.MOUNT_ATTR_RDONLY
    assert plan.copy_attrs(read_only=False, idmapped=False) == plan.WRITABLE_ATTRS
    assert plan.copy_attrs(read_only=True, idmapped=False) == 0
    assert plan.copy_attrs(read_only=True, idmapped=True) == idmap | ro
    assert plan.copy_attrs(read_only=False, idmapped=True) == (
        idmap | plan.WRITABLE_ATTRS
    )
    said = plan.not_idmapped("/srv/w", "Invalid argument")
    assert said.startswith("/srv/w cannot be idmapped (Invalid argument): as root")


def test_a_read_only_remount_keeps_every_flag_the_kernel_locked() -> None:
    """A remount may not clear nosuid, nodev, noexec or the atime mode: each found on
    the mount is passed again, and only those (every combination tried)."""
    flags = {
        "nosuid": (os.ST_NOSUID, plan.MS_NOSUID),
        "nodev": (os.ST_NODEV, plan.MS_NODEV),
        "noexec": (os.ST_NOEXEC, plan.MS_NOEXEC),
        "nodiratime": (os.ST_NODIRATIME, plan.MS_NODIRATIME),
    }
    atimes = [
        (os.ST_NOATIME, plan.MS_NOATIME),
        (os.ST_RELATIME, 0),
        (0, plan.MS_STRICTATIME),
    ]
    base = plan.MS_BIND | plan.MS_REMOUNT | plan.MS_RDONLY
    for count in range(len(flags) + 1):
        for kept in itertools.combinations(flags.values(), count):
            for atime in atimes:
                found = sum(st_flag for st_flag, _ in (*kept, atime))
                wanted = sum(ms_flag for _, ms_flag in (*kept, atime))
                assert plan.remount_flags(found) == base | wanted


def _wall(tmp: str | None, writable: tuple[str, ...] = ()) -> plan.Wall:
    wall = plan.Wall()
    wall.tmp = tmp
    wall.writable = list(writable)
    return wall


def test_the_private_tmpfs_mounts() -> None:
    """`/dev/shm` is private unless a writable path lies in it; `/tmp` is shared by
    the tree's processes, another temporary directory is the tree's root's alone."""
    owner = f",uid={plan.TREE_UID},gid={plan.TREE_UID}"
    shm = plan.private_tmpfs(_wall("/tmp"), shm_is_dir=True, idmapped=True)
    assert shm == (
        [(plan.SHM, f"mode=1777{owner}"), ("/tmp", f"mode=1777{owner}")],
        None,
    )
    own = plan.private_tmpfs(
        _wall("/w/tmp", ("/dev/shm/w",)), shm_is_dir=True, idmapped=False
    )
    assert own == ([("/w/tmp", "mode=0700")], None)
    assert plan.private_tmpfs(_wall(None), shm_is_dir=False, idmapped=False) == (
        [],
        None,
    )


def test_a_temporary_directory_in_dev_shm_needs_a_private_dev_shm() -> None:
    """`--tmp=/dev/shm/tmp` is a folder of the private `/dev/shm`: nothing is made
    outside; without a private one the tree does not start (EBUSY, in words)."""
    mounts, folder = plan.private_tmpfs(
        _wall("/dev/shm/tmp"), shm_is_dir=True, idmapped=False
    )
    assert (mounts, folder) == ([(plan.SHM, "mode=1777")], "/dev/shm/tmp")
    for wall, is_dir in (
        (_wall("/dev/shm/tmp"), False),
        (_wall("/dev/shm/tmp", ("/dev/shm",)), True),
    ):
        with pytest.raises(OSError, match="no private /dev/shm") as refused:
            plan.private_tmpfs(wall, shm_is_dir=is_dir, idmapped=False)
        assert refused.value.errno == errno.EBUSY


def test_mount_points_are_read_with_the_kernels_escapes_undone() -> None:
    """A space, tab, newline or backslash in a mount point is written as an octal
    escape; a backslash before anything else is kept."""
    info = (
        b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        b"30 22 0:5 / /mnt/my\\040disk rw - tmpfs tmpfs rw\n"
        b"31 22 0:6 / /mnt/a\\134b\\011c rw - tmpfs tmpfs rw\n"
        b"32 22 0:7 / /mnt/odd\\x rw - tmpfs tmpfs rw\n"
    )
    assert plan.mount_points(info) == [
        "/",
        "/mnt/my disk",
        "/mnt/a\\b\tc",
        "/mnt/odd\\x",
    ]


# The seccomp filter (S16), run by a classic BPF interpreter.


def _run_filter(program: bytes, nr: int, arch: int, args: tuple[int, ...]) -> int:
    """The filter's verdict on one system call (`struct seccomp_data`)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    insns = [
        struct.unpack_from("=HBBI", program, at) for at in range(0, len(program), 8)
    ]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # and #k
            acc &= k
        elif code == 0x06:  # ret #k
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf


_ALLOW = 0x7FFF0000


def _errno(number: int) -> int:
    return 0x00050000 | number


_RULED = [
    (arch, number, rule, arg)
    for arch, calls in plan.CALLS.items()
    for number, rule, arg in calls
]


@given(st.sampled_from(_RULED), st.integers(0, 0o177777))
def test_the_filter_refuses_set_ids_devices_and_xattrs_and_nothing_else(
    ruled: tuple[int, int, str, int], mode: int
) -> None:
    """For every call it judges, on every architecture: a mode with set-uid or
    set-gid is EPERM, as is a character or block device for mknod; every xattr
    write is EOPNOTSUPP; `openat2` and `io_uring_setup` are ENOSYS; else allowed."""
    arch, number, rule, arg = ruled
    args = tuple(mode if n == arg else 0o6777 for n in range(6))
    verdict = _run_filter(plan.refusals(), number, arch, args)
    kind = mode & 0o170000
    if rule == "nosys":
        assert verdict == _errno(errno.ENOSYS)
    elif rule == "noxattr":
        assert verdict == _errno(errno.EOPNOTSUPP)
    elif mode & 0o6000 or (rule == "mknod" and kind in (0o020000, 0o060000)):
        assert verdict == _errno(errno.EPERM)
    else:
        assert verdict == _ALLOW


def test_the_filter_allows_other_calls_and_refuses_unknown_abis() -> None:
    """A call it does not judge runs; x32 calls on x86-64 and any other architecture
    (arm32 on aarch64) are refused whole, with ENOSYS."""
    program = plan.refusals()
    for arch in plan.CALLS:
        assert _run_filter(program, 1, arch, (0o4755,)) == _ALLOW
    x86_64 = 0xC000003E
    assert _run_filter(program, 0x40000000 | 90, x86_64, ()) == _errno(errno.ENOSYS)
    assert _run_filter(program, 15, 0x40000028, (0o755,)) == _errno(errno.ENOSYS)


# The tree's processes.


def test_proc_records_are_read_or_judged_unreadable() -> None:
    """A command's name may hold `)` and spaces; a record cut short reads as none."""
    assert plan.parse_stat(b"42 (a) b) c) S 7 42 42 0 -1") == (7, 42)
    assert plan.parse_stat(b"42 (cut") is None
    assert plan.parse_stat(b"42 (x) S seven 1") is None
    assert plan.writes(b"pos:\t0\nflags:\t01\nmnt_id:\t15\n")
    assert plan.writes(b"pos:\t0\nflags:\t0100002\n")
    assert not plan.writes(b"pos:\t0\nflags:\t0100000\n")
    assert not plan.writes(b"pos:\t0\n")


def test_descendants_are_every_process_below() -> None:
    """Children, theirs, and so on; the walk ends at processes with none."""
    tree = {1: [2, 3], 3: [4], 4: [5]}
    assert sorted(plan.descendants(1, lambda pid: tree.get(pid, []))) == [2, 3, 4, 5]
    assert plan.descendants(9, lambda pid: tree.get(pid, [])) == []


def test_a_reader_is_spared_only_while_another_process_writes_its_pipe() -> None:
    """The `tail` of `make | tail` is spared; a process reading its own pipe is not."""
    stdin = {10: "pipe:[1]", 11: "pipe:[2]", 12: "pipe:[3]"}
    writers = {"pipe:[1]": {9}, "pipe:[2]": {11}}
    assert plan.live_readers(stdin, writers) == {10: "pipe:[1]"}


def test_a_spared_reader_is_released_a_grace_after_its_writers_are_gone() -> None:
    """Each reader's grace starts when it is first seen without a writer and starts
    again if a writer is back; a reader gone is forgotten; the wait is the nearest."""
    grace = plan.READER_GRACE
    readers = plan.SparedReaders({10: "pipe:[1]", 20: "pipe:[2]", 30: "pipe:[3]"})
    writers = {"pipe:[1]": {9}}
    steps: list[
        tuple[list[int], dict[str, set[int]], float, list[int], float | None]
    ] = [
        ([10, 20], writers, 100.0, [], grace),  # 30 is gone; 20's input has ended
        ([10, 20], {}, 100.1, [], grace - 0.1),  # and now 10's
        ([10, 20], writers, 100.2, [], grace - 0.2),  # 10's writer is back
        ([10, 20], {}, 100.0 + grace, [20], grace),  # 20 is due; 10 starts again
        ([10], {}, 100.0 + 2 * grace, [10], None),
    ]
    for found, now_writing, now, due, wait in steps:
        released, left = readers.release(found, now_writing, now)
        assert released == due
        assert left == (None if wait is None else pytest.approx(wait))
        assert 30 not in readers.spared
    assert readers.spared == {}


# What the host reads.


@pytest.mark.parametrize(
    ("chunk", "said"),
    [
        (b"", "kill"),
        (b"K", "kill"),
        (b"TK", "kill"),
        (b"T", "terminate"),
        (b"x", "none"),
    ],
)
def test_the_hosts_orders(chunk: bytes, said: str) -> None:
    """End of file (the host died) and `K` kill, whatever came with them; `T` stops."""
    assert plan.order(chunk) == said


def test_a_servers_supervisor_says_only_why_it_could_not_start() -> None:
    """`--stdio`: stderr is the server's own; a failure is one line in words."""
    assert plan.quiet_line("pid 4") is None
    assert plan.quiet_line("exit 0") is None
    start = "tether: the server could not start in its wall: "
    assert plan.quiet_line("error 2 No such file") == start + "No such file"
    assert plan.quiet_line("refused 1 Operation not permitted") == (
        start + "Operation not permitted"
    )


@given(st.integers(0, 4095), _TOKEN.filter(bool))
def test_a_failure_crosses_the_pipe_whole(number: int, text: str) -> None:
    """The starter's or the first process's `OSError` reaches the supervisor with its
    number and words."""
    assert plan.read_failure(plan.failure(OSError(number, text))) == (number, text)


def test_a_failure_without_a_number_reads_as_zero() -> None:
    """An error the kernel gave no number still crosses, with its words."""
    said = plan.failure(OSError("no map"))
    assert said == b"0 no map"
    assert plan.read_failure(b"x no map") == (0, "no map")


def test_exit_codes() -> None:
    """The command's code as `subprocess` says it (SIGKILL's when never seen); the
    first process passes a signal on as a shell does, 128 + its number."""
    assert plan.exit_line(3) == "exit 3"
    assert plan.exit_line(None) == f"exit {-signal.SIGKILL}"
    assert plan.exit_status(0) == 0
    assert plan.exit_status(-signal.SIGTERM) == 128 + signal.SIGTERM
