"""What a tree's supervisor does, decided without a system call: the wall's plan.

`_supervisor.py` is the kernel wall itself (S15, S16): a standalone program that makes
the namespaces, mounts, maps ids, installs the seccomp filter and supervises the tree.
Everything it decides from what it was given or has read lives here, as functions of
their inputs: its command line as a typed `Invocation`; which folders a root caller's
tree is shown read-only, which copies are taken and in what order, which submounts
come along on the way to a writable path; the mount attributes and remount flags; the
private tmpfs mounts; the id maps and namespace flags; the seccomp filter's bytes
(`refusals()`); `/proc` records parsed; which pipeline readers a stop spares and when
each is released; the report lines and exit codes. Nothing here makes a system call,
so it is tested in process, without a namespace.

Like the supervisor, it imports nothing but the standard library, and nothing that
costs a tree's start (not even `typing`): the supervisor runs as `python -I -S`, where
`_supervisor_start.py` puts this folder on `sys.path` and the supervisor imports this module
by its bare name, from its cached bytecode.
"""

from __future__ import annotations

import errno
import os
import signal

TYPE_CHECKING = False  # `typing` is not imported at run time (a tree's start)
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
    from typing import Literal

    Order = Literal["kill", "terminate", "none"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_STRICTATIME = 0x1000000
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x100000
WRITABLE_ATTRS = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
"""Every writable copy: no set-uid, set-gid or file capability acts from it, no device
opens through it (S16)."""
TREE_UID = 2147483646
"""The unprivileged outer uid (and gid) a root caller's tree runs as: its root inside."""
SHM = "/dev/shm"
"""Gets a private tmpfs in every tree; `--tmp=/dev/shm/<name>` is a folder of it."""
READER_GRACE = 0.25
"""Seconds a pipeline's reader spared by a stop gets, once its input ended, to finish
(print what it holds) before it gets SIGTERM too."""
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
"""Kernel knobs under `/proc` bound read-only (container runtimes' read-only paths)."""
MODES = ("namespace", "subreaper", "probe")
USAGE = (
    "usage: _supervisor.py MODE [PROTECT | --OPTION=VALUE ...] -- EXECUTABLE ARGV..."
)


class Wall:
    """What a `namespace` tree may write and reach (S15), from the command line.

    Everything is read-only inside but the `writable` paths, a private temporary
    directory (`tmp`, a tmpfs) and a private `/dev/shm`; the `protect` paths are
    read-only even below a writable path; each `mask` (the session's sockets) is
    hidden under an empty read-only tmpfs; `network` `none` is loopback only.
    """

    def __init__(self) -> None:
        self.protect: list[str] = []
        self.writable: list[str] = []
        self.see: list[str] = []
        self.masks: list[str] = []
        self.tmp: str | None = None
        self.network = "host"
        self.stdio = False
        self.parent = 0

    def take(self, token: str) -> None:
        """Take one option or a protect path.

        The options are `--rw=P`, `--see=P`, `--mask=P`, `--tmp=P`, `--net=none`,
        `--stdio` and `--parent=PID`.
        """
        name, _, value = token.partition("=")
        if name == "--rw":
            self.writable.append(value)
        elif name == "--see":
            self.see.append(value)
        elif name == "--mask":
            self.masks.append(value)
        elif name == "--tmp":
            self.tmp = value
        elif name == "--net":
            self.network = value
        elif token == "--stdio":
            self.stdio = True
        elif name == "--parent":
            self.parent = int(value)
        elif token.startswith("--"):
            raise SystemExit(f"unknown wall option {token!r}")
        else:
            self.protect.append(token)


class Invocation:
    """One supervisor's command line: the containment, the wall and the command."""

    def __init__(self, mode: str, wall: Wall, executable: str, argv: list[str]) -> None:
        self.mode = mode
        """`namespace`, `subreaper` or `probe`."""
        self.wall = wall
        self.executable = executable
        self.argv = argv
        """The command's argument vector, its `argv[0]` first."""

    @property
    def orders(self) -> bool:
        """Whether the host gives orders on stdin (not to a probe nor a server)."""
        return self.mode != "probe" and not self.wall.stdio


def parse(args: Sequence[str], *, supervisor: str, python: str) -> Invocation:
    """MODE [PROTECT ...] [--rw=P ...] -- EXECUTABLE ARGV0 [ARG ...] -> its parts.

    A probe's command is `python` trying to write `supervisor` (the program's own
    file, walled) and then a file in its working directory.

    Raises:
        SystemExit: the line is not one the supervisor takes (the reason, in words).
    """
    if len(args) < 1:
        raise SystemExit(USAGE)
    mode, rest = args[0], list(args[1:])
    wall = Wall()
    if mode == "probe":
        for token in rest:
            wall.take(token)
        wall.protect.append(supervisor)
        wall.see.append(python)
        return Invocation(mode, wall, python, probe_argv(supervisor, python))
    if "--" not in rest or len(rest) < rest.index("--") + 3:
        raise SystemExit(USAGE)
    cut = rest.index("--")
    for token in rest[:cut]:
        wall.take(token)
    if mode not in MODES:
        raise SystemExit(f"unknown containment {mode!r}: namespace, subreaper or probe")
    return Invocation(mode, wall, rest[cut + 1], rest[cut + 2 :])


def probe_argv(target: str, python: str) -> list[str]:
    """The probe's command: exit 0 if `target` is read-only and the cwd writable."""
    code = (
        "import errno, os, sys\n"
        "try:\n"
        f"    open({target!r}, 'ab')\n"
        "except OSError as exc:\n"
        "    if exc.errno not in (errno.EROFS, errno.EACCES):\n"
        "        sys.exit(3)\n"
        "else:\n"
        "    sys.exit(4)\n"
        "open('probe-written', 'w').close()\n"
        "sys.exit(0)\n"
    )
    return [python, "-I", "-S", "-c", code]


# The namespaces and the ids.


def namespace_flags(uid: int, network: str) -> int:
    """The `unshare` flags of the supervisor: a user namespace unless it is root."""
    flags = CLONE_NEWNS | CLONE_NEWPID
    if uid != 0:
        flags |= CLONE_NEWUSER
    if network == "none":
        flags |= CLONE_NEWNET
    return flags


def own_maps(uid: int, gid: int) -> list[tuple[str, str]]:
    """The supervisor's id maps, its `/proc/self` file and text: the caller's ids."""
    return [
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1\n"),
        ("gid_map", f"{gid} {gid} 1\n"),
    ]


def starter_maps(root: bool, uid: int, gid: int) -> list[tuple[str, str]]:
    """The starter's id maps, in order: the caller's to themselves, unless it is root.

    For a root caller, the tree's root maps to the unprivileged `TREE_UID` (S15:
    never the machine's root).
    """
    if root:
        return [
            ("uid_map", f"0 {TREE_UID} 1\n"),
            ("setgroups", "deny"),
            ("gid_map", f"0 {TREE_UID} 1\n"),
        ]
    return [("uid_map", f"{uid} {uid} 1\n"), ("gid_map", f"{gid} {gid} 1\n")]


def initial_uid_map(raw: bytes) -> bool:
    """Whether `/proc/self/uid_map` says the initial user namespace (all ids, as is)."""
    return raw.split() == [b"0", b"0", b"4294967295"]


# The wall: what is copied, in which order, with which attributes.


def inside(outer: str, inner: str) -> bool:
    """Whether `inner` is `outer` or below it (both absolute, normalized)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def closed_ancestor(
    path: str, *, itself: bool, mode_of: Callable[[str], int]
) -> str | None:
    """The highest folder on the way to `path` that others may not traverse (no `o+x`).

    With `itself`, `path` counts as on the way. `mode_of` is `os.stat`'s `st_mode`
    (an `OSError`: nothing is found from there on).
    """
    parts = path.strip("/").split("/")
    for n in range(1, len(parts) + (1 if itself else 0)):
        here = "/" + "/".join(parts[:n])
        try:
            if not mode_of(here) & 0o001:
                return here
        except OSError:
            return None
    return None


def closed_on_the_way(
    wall: Wall, *, real_see: Sequence[str], mode_of: Callable[[str], int]
) -> list[str]:
    """For a root caller: the folders to show read-only, on the way to what it reaches.

    The tree's uid is not root's: a folder only root may traverse on the way to a
    writable path, the command or `PATH` (`real_see`: each `see` path resolved;
    typically `/root`) is shown read-only, idmapped so that root's files there look
    like the tree's own. One below a writable path, or below another shown, is not.
    """
    wanted = [(p, False) for p in wall.writable]
    wanted += [(p, True) for p in real_see]
    wanted += [(p, True) for p in wall.see]
    ancestors: list[str] = []
    for path, itself in wanted:
        closed = closed_ancestor(path, itself=itself, mode_of=mode_of)
        if closed is None or any(inside(w, closed) for w in wall.writable):
            continue
        if not any(inside(a, closed) for a in ancestors):
            ancestors = [a for a in ancestors if not inside(closed, a)]
            ancestors.append(closed)
    return ancestors


def copies(ancestors: Iterable[str], writable: Iterable[str]) -> list[tuple[str, bool]]:
    """The detached copies to take, in attach order, each with whether it is read-only.

    The folders shown read-only first, shortest first, then the writable paths: a
    writable path below such a folder is attached over its copy.
    """
    found = [(p, True) for p in sorted(ancestors, key=len)]
    return found + [(p, False) for p in writable]


def has_submounts(path: str, points: Iterable[str]) -> bool:
    """Whether a mount point other than `path` lies below it."""
    return any(p != path and inside(path, p) for p in points)


def submounts_on_the_way(
    path: str, points: Iterable[str], wanted: Sequence[str]
) -> list[str]:
    """The mount points below `path` that hold a `wanted` path, shortest first.

    Read-only copies of them, attached over a copy of `path` made without its
    submounts, keep the way to those paths (a writable path on a file system mounted
    below a folder only root may traverse).
    """
    return [
        point
        for point in sorted(set(points), key=len)
        if point != path
        and inside(path, point)
        and any(inside(point, w) for w in wanted)
    ]


def copy_attrs(*, read_only: bool, idmapped: bool) -> int:
    """The mount attributes a copy gets (0: none to set).

    Idmapped (a root caller's): read-only, or writable without set-ids nor devices;
    a caller's own writable copy: `WRITABLE_ATTRS`.
    """
    if idmapped:
        return MOUNT_ATTR_IDMAP | (MOUNT_ATTR_RDONLY if read_only else WRITABLE_ATTRS)
    return 0 if read_only else WRITABLE_ATTRS


def not_idmapped(path: str, why: str) -> str:
    """Why a root caller's tree cannot start: `path` refuses idmapping, and what to do."""
    return (
        f"{path} cannot be idmapped ({why}): as root, the writable paths must be on a "
        "file system with idmapped mounts (ext4, xfs, btrfs, tmpfs); or run tether as "
        "an unprivileged user"
    )


def remount_flags(found: int) -> int:
    """The read-only remount's flags for a mount whose `statvfs` flags are `found`.

    A remount may not clear flags the kernel locked on the mount below (nosuid, nodev,
    noexec, the atime mode), so they are passed again.
    """
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY
    for st, ms in (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NODIRATIME, MS_NODIRATIME),
    ):
        if found & st:
            flags |= ms
    if found & os.ST_NOATIME:
        flags |= MS_NOATIME
    elif not found & os.ST_RELATIME:
        flags |= MS_STRICTATIME
    return flags


def private_tmpfs(
    wall: Wall, *, shm_is_dir: bool, idmapped: bool
) -> tuple[list[tuple[str, str]], str | None]:
    """The private tmpfs mounts (target, options) in order, and a folder to make.

    `/dev/shm` gets its own unless a writable path lies below it; the temporary
    directory is a tmpfs of its own, or a folder (the second value) of that private
    `/dev/shm`. An idmapped tree's root owns them.

    Raises:
        OSError: the temporary directory is in `/dev/shm`, which is not private.
    """
    owner = f",uid={TREE_UID},gid={TREE_UID}" if idmapped else ""
    mounts: list[tuple[str, str]] = []
    private_shm = shm_is_dir and not any(inside(SHM, w) for w in wall.writable)
    if private_shm:
        mounts.append((SHM, f"mode=1777{owner}"))
    if wall.tmp is not None and os.path.dirname(wall.tmp) == SHM:
        # A folder of the private /dev/shm: nothing to make or remove outside.
        if not private_shm:
            raise OSError(errno.EBUSY, f"no private {SHM} for the temporary directory")
        return mounts, wall.tmp
    if wall.tmp is not None:
        mode = "1777" if wall.tmp == "/tmp" else "0700"
        mounts.append((wall.tmp, f"mode={mode}{owner}"))
    return mounts, None


def mount_points(mountinfo: bytes) -> list[str]:
    """Every mount point `/proc/self/mountinfo` lists, in its order."""
    found = []
    for line in mountinfo.splitlines():
        raw = line.split(b" ", 5)[4]
        # The kernel writes a space, tab, newline or backslash as an octal escape.
        parts = raw.split(b"\\")
        point = parts[0] + b"".join(
            bytes([int(p[:3], 8)]) + p[3:] if p[:3].isdigit() else b"\\" + p
            for p in parts[1:]
        )
        found.append(os.fsdecode(point))
    return found


# What no tree may make (S16): a set-uid or set-gid file, a device node, a file
# capability. The kernel's own checks let a tree's root do all three on its writable
# copies (they are idmapped to the caller's ids), so a seccomp filter refuses the system
# calls that would: any mode with S_ISUID or S_ISGID (`chmod`, `fchmod`, `fchmodat`,
# `fchmodat2`, `open`, `openat`, `creat`, `mknod`, `mknodat`), a character or block
# device (`mknod`, `mknodat`; even 0:0, the overlay whiteout a user namespace may make),
# and every extended attribute write (`setxattr` and kin; `security.capability` cannot be
# told apart by a filter), with EPERM, EPERM and EOPNOTSUPP. Calls whose mode a filter
# cannot see are refused with ENOSYS, as if the kernel had none, so programs fall back:
# `openat2` (its mode is behind a pointer) and `io_uring_setup` (its ring opens files
# unseen). Per architecture: x86-64 (its i386 calls by their own numbers, x32 refused),
# i386, aarch64; any other (arm32 on aarch64) is refused whole.
_MODE = "mode"  # refused when argument N (the mode) has S_ISUID or S_ISGID
_MKNOD = "mknod"  # that, or a character or block device
_NOSYS = "nosys"  # always refused: ENOSYS
_NOXATTR = "noxattr"  # always refused: EOPNOTSUPP
CALLS: dict[int, tuple[tuple[int, str, int], ...]] = {
    # AUDIT_ARCH_X86_64
    0xC000003E: (
        (2, _MODE, 2),  # open
        (85, _MODE, 1),  # creat
        (90, _MODE, 1),  # chmod
        (91, _MODE, 1),  # fchmod
        (133, _MKNOD, 1),  # mknod
        (257, _MODE, 3),  # openat
        (259, _MKNOD, 2),  # mknodat
        (268, _MODE, 2),  # fchmodat
        (452, _MODE, 2),  # fchmodat2
        (188, _NOXATTR, 0),  # setxattr
        (189, _NOXATTR, 0),  # lsetxattr
        (190, _NOXATTR, 0),  # fsetxattr
        (463, _NOXATTR, 0),  # setxattrat
        (437, _NOSYS, 0),  # openat2
        (425, _NOSYS, 0),  # io_uring_setup
    ),
    # AUDIT_ARCH_I386
    0x40000003: (
        (5, _MODE, 2),
        (8, _MODE, 1),
        (15, _MODE, 1),
        (94, _MODE, 1),
        (14, _MKNOD, 1),
        (295, _MODE, 3),
        (297, _MKNOD, 2),
        (306, _MODE, 2),
        (452, _MODE, 2),
        (226, _NOXATTR, 0),
        (227, _NOXATTR, 0),
        (228, _NOXATTR, 0),
        (463, _NOXATTR, 0),
        (437, _NOSYS, 0),
        (425, _NOSYS, 0),
    ),
    # AUDIT_ARCH_AARCH64
    0xC00000B7: (
        (56, _MODE, 3),  # openat
        (52, _MODE, 1),  # fchmod
        (53, _MODE, 2),  # fchmodat
        (452, _MODE, 2),
        (33, _MKNOD, 2),  # mknodat
        (5, _NOXATTR, 0),
        (6, _NOXATTR, 0),
        (7, _NOXATTR, 0),
        (463, _NOXATTR, 0),
        (437, _NOSYS, 0),
        (425, _NOSYS, 0),
    ),
}
"""The calls the filter judges, per audit architecture: (number, rule, mode argument)."""
_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35
_JSET = 0x45
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_SET_ID_BITS = 0o6000


def refusals() -> bytes:
    """The tree's seccomp filter (classic BPF), as the kernel takes it."""
    import struct

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
        return (code, jt, jf, k)

    deny = op(_RET, _ERRNO | errno.EPERM)
    nosys = op(_RET, _ERRNO | errno.ENOSYS)
    allow = op(_RET, _ALLOW)
    program: list[tuple[int, int, int, int]] = [op(_LD_ABS, 4)]  # arch
    for arch, calls in CALLS.items():
        block = [op(_LD_ABS, 0)]  # nr
        if arch == _X86_64:
            block += [op(_JGE, _X32_BIT, 0, 1), nosys]
        for number, rule, arg in calls:
            if rule == _NOSYS:
                body = [nosys]
            elif rule == _NOXATTR:
                body = [op(_RET, _ERRNO | errno.EOPNOTSUPP)]
            else:
                body = [op(_LD_ABS, 16 + 8 * arg), op(_JSET, _SET_ID_BITS, 0, 1), deny]
                if rule == _MKNOD:
                    body += [
                        op(_AND, 0o170000),
                        op(_JEQ, 0o020000, 0, 1),
                        deny,
                        op(_JEQ, 0o060000, 0, 1),
                        deny,
                    ]
                body.append(allow)
            block += [op(_JEQ, number, 0, len(body)), *body]
        block.append(allow)
        program += [op(_JEQ, arch, 0, len(block)), *block]
    program.append(nosys)  # an architecture not named: nothing runs
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


# The tree's processes, as `/proc` shows them.


def parse_stat(raw: bytes) -> tuple[int, int] | None:
    """(ppid, pgrp) from `/proc/<pid>/stat`, or None when it cannot be read."""
    try:
        fields = raw.rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def writes(fdinfo: bytes) -> bool:
    """Whether `/proc/<pid>/fdinfo/<fd>` says a descriptor open for writing."""
    try:
        flags = int(fdinfo.split(b"flags:", 1)[1].split()[0], 8)
    except (IndexError, ValueError):
        return False
    return flags & os.O_ACCMODE != os.O_RDONLY


def descendants(root: int, kids_of: Callable[[int], list[int]]) -> list[int]:
    """Every descendant of `root`, a parent's children before theirs (`kids_of`)."""
    found: list[int] = []
    todo = [root]
    while todo:
        kids = kids_of(todo.pop())
        found.extend(kids)
        todo.extend(kids)
    return found


def live_readers(
    stdin: Mapping[int, str], writers: Mapping[str, set[int]]
) -> dict[int, str]:
    """The processes whose stdin pipe (`stdin`) another process still writes.

    The downstream stages of a pipeline (`| tail`, `| tee`), by their pipe.
    """
    return {
        pid: pipe for pid, pipe in stdin.items() if writers.get(pipe, set()) - {pid}
    }


class SparedReaders:
    """The pipeline readers a stop spared, and when each one's input ended.

    A reader is released (given SIGTERM) `READER_GRACE` seconds after it was first
    seen with no writer left; one whose writers are back starts again.
    """

    def __init__(self, spared: dict[int, str]) -> None:
        self.spared = spared
        """Pipeline readers the stop has not signalled yet, with their stdin pipe."""
        self.input_ended: dict[int, float] = {}
        """When each spared reader was first seen with no writer left."""

    def release(
        self, found: Collection[int], writers: Mapping[str, set[int]], now: float
    ) -> tuple[list[int], float | None]:
        """The readers due now (no longer spared), and seconds until the next one.

        `found` is the tree now, `writers` its pipes' writers, `now` monotonic time;
        a reader not found any more is forgotten. The seconds are None when no reader
        waits for its grace to end.
        """
        due: list[int] = []
        wait: float | None = None
        for pid, pipe in list(self.spared.items()):
            if pid not in found:
                del self.spared[pid]
                continue
            if writers.get(pipe, set()) - {pid}:
                self.input_ended.pop(pid, None)
                continue
            since = self.input_ended.setdefault(pid, now)
            left = since + READER_GRACE - now
            if left <= 0:
                del self.spared[pid]
                due.append(pid)
            else:
                wait = left if wait is None else min(wait, left)
        return due, wait


# What the host reads: orders in, report lines and failures out.


def order(chunk: bytes) -> Order:
    """The host's order in `chunk` read from stdin: end of file or `K` kills."""
    if not chunk or b"K" in chunk:
        return "kill"
    return "terminate" if b"T" in chunk else "none"


def quiet_line(line: str) -> str | None:
    """A report line as a server's supervisor writes it (`--stdio`), or None.

    A server's stderr is its own: only a failure to start is written, in words.
    """
    kind, _, rest = line.partition(" ")
    if kind not in ("error", "refused"):
        return None
    return f"tether: the server could not start in its wall: {rest.partition(' ')[2]}"


def failure(exc: OSError) -> bytes:
    """`exc` as one process tells another through a pipe: `<errno> <text>`."""
    return f"{exc.errno or 0} {exc.strerror or exc}".encode()


def read_failure(said: bytes) -> tuple[int, str]:
    """(errno, text) from what `failure()` wrote (0 when no number came)."""
    number, _, text = said.decode(errors="replace").partition(" ")
    return (int(number) if number.isdigit() else 0), text


def exit_line(code: int | None) -> str:
    """The report of a tree gone: its command's exit code, `SIGKILL`'s when unseen."""
    return f"exit {code if code is not None else -signal.SIGKILL}"


def exit_status(code: int) -> int:
    """The status a process exits with to pass on `code` (a signal's as a shell's)."""
    return code if code >= 0 else 128 - code
