"""The supervisor of one process tree: a standalone program, run by path.

`python -I -S _supervisor_start.py MODE [PROTECT ...] [--OPTION=VALUE ...] -- EXECUTABLE ARGV0 [ARG ...]`
(`_supervisor_start.py` imports this module from its cached bytecode and calls `main()`)

The options say what a `namespace` tree may write and reach (S15, the wall; the host's
`_contain.py` decides them): `--rw=P` a writable path (repeatable), `--see=P` a path the
tree must reach (its command, `PATH`, `HOME`), `--mask=P` a session socket or its folder
to hide, `--tmp=P` its private temporary directory (a tmpfs over `/tmp` itself or over
an empty folder, or `/dev/shm/<name>`: a folder of the tree's private `/dev/shm`),
`--net=none` loopback only. `--stdio` runs a server that speaks on its standard streams
(an MCP stdio server): the command keeps this program's stdin, stdout and stderr, no
orders are read, only a failure to start is reported (in words, on stderr), and the
tree dies with the host (`--parent=PID`: this program's parent-death signal is armed
for that pid) or when the command exits.

It imports nothing but the standard library (so it starts in milliseconds, whatever the
host's environment) and is started by `tether.host._proctree.ProcessTree`. What it
decides without a system call (its command line, which copies, in which order, with
which attributes, the seccomp filter's bytes, the pipeline readers a stop spares, the
report lines) is `_wall_plan.py`, tested in process; this module makes the system calls.
They stay one file, not split further, because they are one program: the wall is built
and the tree supervised by the same processes across `fork` (the supervisor, the
namespace's first process, the starter), each step handing the next its descriptors,
and every module more is another file to find and load at each tree's start. It spawns
the command with stdin `/dev/null` and stdout and stderr merged into its own stdout,
and obeys one-byte orders on its stdin:

- `T`: SIGTERM to every process of the tree (a pipeline's reader, such as the `tail` of
  `make 2>&1 | tail`, once its writers are gone: see `Supervisor.terminate()`); from
  then on the tree is reaped until every process of it has exited by itself, whatever
  the command (often a shell in front: `make && echo ok`) did;
- `K`, or end of file (the host died): SIGKILL to every process of the tree, reap them
  all, report, exit.

It reports on its stderr, one line each: `pid <n>` once the command started (the pid as
the command itself sees it), `error <errno> <text>` if it could not start it,
`left <n> <k>` when the command exited with `n` processes of its tree still running, `k`
of them killed, and `exit <code>` once the whole tree is gone (negative for a signal, as
`subprocess` says). Without a `T`, when the command exits, what it left running gets
SIGTERM and `LEFTOVER_GRACE` seconds to end by itself (git's handlers remove their lock
files), then SIGKILL, before `exit` is reported.

MODE says how the tree is contained:

- `namespace`: the tree gets its own PID namespace and mount namespace (and a user
  namespace mapping the caller's uid to itself when the caller is not root; a network
  namespace with `--net=none`). This program forks the namespace's first process, which
  builds the wall and supervises: it takes detached copies (`open_tree`) of the
  writable paths, makes every mount read-only at once (`mount_setattr` with
  `AT_RECURSIVE`: the flags the kernel locked stay as they are), mounts a fresh `/proc`
  with its kernel knobs (`/proc/sys`, `/proc/sysrq-trigger`, ...) bound read-only,
  attaches the writable copies (`move_mount`), then private tmpfs mounts on `/dev/shm`,
  the temporary directory and each mask, and binds every PROTECT path read-only on top.
  The command's starter enters one more, nested user namespace and then a mount
  namespace of its own, which locks every mount it inherits: no process of the tree can
  unmount or remount the read-only paths, nor reach the outer `/proc`. The writable
  copies are `nosuid,nodev`, and the starter installs a seccomp filter before it execs
  (`refuse_set_ids`): no process of the tree makes a set-uid or set-gid file, a device
  node or a file capability (S16). When the
  namespace's first process dies (the host ordered it, or this program died and the
  kernel's parent-death signal followed), the kernel kills every process in the
  namespace; none can leave it.

  A root caller's tree never acts as the machine's root (S15). Its nested user
  namespace maps the tree's root to `TREE_UID`, an unprivileged uid outside, with no
  supplementary groups, and the writable copies are idmapped through that namespace
  (`MOUNT_ATTR_IDMAP`), so the tree writes there as if it were root and the files
  belong to root outside. Folders only root may traverse on the way to a writable path
  or the command (`/root`, pytest's `/tmp/pytest-of-root`) are shown read-only the same
  way. The other choice, refusing the namespace as root, was not taken: CI and many
  containers run as root, and they would lose the whole wall to the fallback. Measured
  side by side on the development VM (docs/benchmarks.md, `benchmarks/wall_start.py`),
  this supervisor with the whole wall, idmapping included, costs 1.09x the one that
  walled the stop folders only (both from cached bytecode), and a root caller's Bash
  `true` 1.02x end to end.

- `subreaper`: the fallback where namespaces are refused. This program makes itself a
  child subreaper, so orphans (`setsid`, double forks, `nohup`) are re-parented to it,
  and finds descendants through `/proc`. A command that kills this program escapes it;
  the host then sweeps by the tree's environment marker (see docs/tools-process.md).
- `probe`: start a trivial command in `namespace` mode, protecting this file, and exit
  0 only if the command could not write that file and could write a file in its
  working directory (the host checks that file's owner).

Python 3.11 has no `os.unshare` and `mount` has no wrapper: both are called through
ctypes on libc, and the new mount API (`open_tree`, `move_mount`, `mount_setattr`, Linux
5.12+) through `syscall(2)` by number, here in the supervisor, because only a process
that is about to fork the tree can move it into new namespaces (util-linux `unshare`
would add two program starts per tree and could not lock the mounts between its steps).

Why not bubblewrap: it builds the same wall (bind `/` read-only, writable binds on top,
a fresh `/proc`, tmpfs masks), but it is not installed by default, so this program would
still be needed as the fallback; it would add one program start per tree on top of this
supervisor, which must stay the namespace's first process to obey the host's orders and
report `pid` and `exit`; and it has no idmapped mounts, so a root caller's tree could
not both run as an unprivileged uid and write files the caller owns. The wall is a
dozen system calls here, with no second program to keep in step.

Why no Landlock layer (Codex's Linux sandbox): inside the namespace it would forbid
writes the read-only mounts forbid already, for the same paths, so it adds nothing the
tests could show; its ABI grows by kernel version (5.13+, network rules 6.7+), and a
ruleset the kernel cannot apply would have to fail or degrade in silence. Where it
would help is the `subreaper` fallback, where no mount wall holds (Ubuntu's restriction
on unprivileged user namespaces leaves Landlock on): a Landlock wall for the fallback is
not built yet, and docs/tools-process.md says what the fallback cannot hold.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import sys
import time

TYPE_CHECKING = False  # `typing` is not imported at run time (a tree's start)
if TYPE_CHECKING or __package__:
    from . import _wall_plan as plan
else:  # run by `_supervisor_start.py`: this folder is on `sys.path`
    import _wall_plan as plan

if TYPE_CHECKING:
    from collections.abc import Sequence

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
"""The new mount API's syscall numbers, the same on every architecture."""
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 0x1
OPEN_TREE_CLOEXEC = 0o2000000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
TREE_UID = plan.TREE_UID
"""The unprivileged outer uid (and gid) a root caller's tree runs as: its root inside."""
_refusals = plan.refusals  # the filter, under the name the S16 tests read
LEFTOVER_GRACE = 0.25
"""Seconds the processes a command left running get, after SIGTERM at the command's
exit, to end by themselves (a detached `git gc` removes its `gc.pid` and its locks)
before SIGKILL."""

_RESET = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGCHLD,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
)
"""Signals whose disposition the command gets back at their defaults."""

_libc = ctypes.CDLL(None, use_errno=True)


def _call(what: str, result: int) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def unshare(flags: int) -> None:
    """The `unshare` system call: `flags` says what this process stops sharing."""
    _call("unshare", _libc.unshare(ctypes.c_int(flags)))


def mount(
    source: str | None,
    target: str,
    fstype: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    """The `mount` system call; the `OSError` of a failure names `target`."""

    def b(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    result = _libc.mount(
        b(source), b(target), b(fstype), ctypes.c_ulong(flags), b(data)
    )
    _call(f"mount {target}", result)


def prctl(option: int, value: int) -> None:
    """The `prctl` system call with one argument."""
    _call("prctl", _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0))


_QUIET = False
"""`--stdio`: stderr is the server's own, so only failures are written there."""


def status(line: str) -> None:
    """Write one report line on stderr, the host's status channel."""
    said = plan.quiet_line(line) if _QUIET else line
    if said is not None:
        os.write(2, (said + "\n").encode())


def write_file(path: str, text: str) -> None:
    """Write `text` to a /proc control file in one write."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def bind_read_only(path: str) -> None:
    """Bind `path` onto itself and make that bind read-only, keeping its other flags."""
    mount(path, path, None, plan.MS_BIND | plan.MS_REC)
    mount(None, path, None, plan.remount_flags(os.statvfs(path).f_flag))


def _syscall(what: str, number: int, *args: object) -> int:
    _libc.syscall.restype = ctypes.c_long
    result = int(_libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def open_tree(path: str, *, recursive: bool) -> int:
    """A detached copy of the mount at `path`: `open_tree` with `OPEN_TREE_CLONE`."""
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (AT_RECURSIVE if recursive else 0)
    return _syscall(
        f"open_tree {path}",
        SYS_OPEN_TREE,
        ctypes.c_int(AT_FDCWD),
        os.fsencode(path),
        ctypes.c_uint(flags),
    )


def mount_setattr(
    fd: int,
    path: str,
    *,
    recursive: bool,
    set_: int = 0,
    clear: int = 0,
    userns: int = 0,
) -> None:
    """Call `mount_setattr` on `path` (relative to `fd`; "" for the mount `fd` is)."""
    flags = (AT_RECURSIVE if recursive else 0) | (AT_EMPTY_PATH if not path else 0)
    # struct mount_attr: attr_set, attr_clr, propagation, userns_fd (all __u64).
    attr = (ctypes.c_uint64 * 4)(set_, clear, 0, userns)
    _syscall(
        f"mount_setattr {path or fd}",
        SYS_MOUNT_SETATTR,
        ctypes.c_int(fd),
        os.fsencode(path),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )


def move_mount(fd: int, target: str) -> None:
    """Attach the detached mount `fd` at `target`: the `move_mount` system call."""
    _syscall(
        f"move_mount {target}",
        SYS_MOVE_MOUNT,
        ctypes.c_int(fd),
        b"",
        ctypes.c_int(AT_FDCWD),
        os.fsencode(target),
        ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH),
    )


def loopback_up() -> None:
    """Bring `lo` up in a new network namespace (SIOCSIFFLAGS, no `ip` needed)."""
    import fcntl
    import socket
    import struct

    iff_up, iff_loopback, iff_running = 0x1, 0x8, 0x40
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", iff_up | iff_loopback | iff_running)
        fcntl.ioctl(sock.fileno(), 0x8914, request)  # SIOCSIFFLAGS


def refuse_set_ids() -> None:
    """Install the filter that refuses set-uid, set-gid, devices and xattr writes.

    Without `CAP_SYS_ADMIN` in this user namespace, `no_new_privs` is set first (the
    kernel's condition). Inherited by every process of the tree; none can remove it.
    """
    import struct

    raw = plan.refusals()
    program = ctypes.create_string_buffer(raw, len(raw))
    # struct sock_fprog: the count of instructions, then a pointer to them.
    fprog = ctypes.create_string_buffer(
        struct.pack("@HP", len(raw) // 8, ctypes.addressof(program))
    )
    arg = ctypes.c_ulong(ctypes.addressof(fprog))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, arg, 0, 0) == 0:
        return
    if ctypes.get_errno() != errno.EACCES:
        _call("seccomp", -1)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    _call("seccomp", _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, arg, 0, 0))


Clone = tuple[str, int, bool, int]
"""A detached copy taken before `/` is made read-only: (path, copy, read-only, a copy
of the path without its submounts or -1)."""


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace (`/proc/self/mountinfo`)."""
    with open("/proc/self/mountinfo", "rb") as f:
        return plan.mount_points(f.read())


def _copies(path: str, read_only: bool, points: Sequence[str]) -> Clone:
    """A root caller's copies of `path`: with its submounts, or alone when it has none.

    With submounts there is also a copy without them, for idmapping where a
    submount's file system cannot.
    """
    if plan.has_submounts(path, points):
        whole = open_tree(path, recursive=True)
        return (path, whole, read_only, open_tree(path, recursive=False))
    return (path, open_tree(path, recursive=False), read_only, -1)


def _tmpfs(target: str, options: str, flags: int = 0) -> None:
    mount("tmpfs", target, "tmpfs", plan.MS_NOSUID | plan.MS_NODEV | flags, options)


def machine_root() -> bool:
    """Whether this process is the machine's root, not just a container's uid 0.

    The machine's root is uid 0 of the initial user namespace; uid 0 of a container's
    own user namespace is some unprivileged outer uid.
    """
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map", "rb") as f:
            return plan.initial_uid_map(f.read())
    except OSError:
        return False


def build_wall(wall: plan.Wall, root: bool) -> list[Clone]:
    """In the namespace's first process: everything read-only but what `wall` opens.

    The writable paths are copied (detached) first, `/` is then made read-only
    recursively, a fresh `/proc` gets its kernel knobs read-only, and private
    tmpfs mounts take `/dev/shm`, the temporary directory and the masks. The copies
    (returned) are attached later, by `attach_writable()`, once the starter's user
    namespace exists (a root caller's copies are idmapped through it).
    """
    ancestors: list[str] = []
    if root:
        ancestors = plan.closed_on_the_way(
            wall,
            real_see=[os.path.realpath(p) for p in wall.see],
            mode_of=lambda p: os.stat(p).st_mode,
        )
    # A root caller's copies are idmapped: with their submounts where those allow it,
    # else without (a copy of the path alone is kept for that).
    below = _mount_points() if root else []
    clones = [
        _copies(path, read_only, below)
        if root
        else (path, open_tree(path, recursive=True), False, -1)
        for path, read_only in plan.copies(ancestors, wall.writable)
    ]
    mount_setattr(AT_FDCWD, "/", recursive=True, set_=plan.MOUNT_ATTR_RDONLY)
    mount("proc", "/proc", "proc", plan.MS_NOSUID | plan.MS_NODEV | plan.MS_NOEXEC)
    for name in plan.PROC_READ_ONLY:
        if os.path.exists(f"/proc/{name}"):
            bind_read_only(f"/proc/{name}")
    if wall.network == "none":
        loopback_up()
    return clones


def _submounts_on_the_way(
    wall: plan.Wall, path: str, userns: int
) -> list[tuple[str, int]]:
    """Read-only copies of the mounts below `path` that hold a writable or seen path.

    Each is idmapped where its file system allows (`plan.submounts_on_the_way()`).
    """
    found: list[tuple[str, int]] = []
    wanted = [*wall.writable, *wall.see]
    for point in plan.submounts_on_the_way(path, _mount_points(), wanted):
        copy = open_tree(point, recursive=False)
        try:
            mount_setattr(
                copy,
                "",
                recursive=False,
                set_=plan.MOUNT_ATTR_IDMAP | plan.MOUNT_ATTR_RDONLY,
                userns=userns,
            )
        except OSError:
            mount_setattr(copy, "", recursive=False, set_=plan.MOUNT_ATTR_RDONLY)
        found.append((point, copy))
    return found


def attach_writable(wall: plan.Wall, clones: list[Clone], userns: int | None) -> None:
    """Attach the copies, mount the private tmpfs mounts and the masks.

    The copies are idmapped through `userns` for a root caller (the tree's root
    writes files the caller owns). Last, the protect paths are walled.
    """
    for path, fd, read_only, alone in clones:
        on_way: list[tuple[str, int]] = []
        attrs = plan.copy_attrs(read_only=read_only, idmapped=userns is not None)
        if userns is not None:
            try:
                try:
                    mount_setattr(
                        fd, "", recursive=alone >= 0, set_=attrs, userns=userns
                    )
                except OSError:
                    if alone < 0:
                        raise
                    # A submount's file system has no idmapped mounts: without them,
                    # but those on the way to what the tree must reach come along,
                    # each alone (idmapped where it allows it).
                    on_way = _submounts_on_the_way(wall, path, userns)
                    os.close(fd)
                    fd, alone = alone, -1
                    mount_setattr(fd, "", recursive=False, set_=attrs, userns=userns)
            except OSError as exc:
                why = plan.not_idmapped(path, str(exc.strerror))
                raise OSError(exc.errno, why) from None
        elif attrs:
            mount_setattr(fd, "", recursive=True, set_=attrs)
        move_mount(fd, path)
        os.close(fd)
        if alone >= 0:
            os.close(alone)
        for point, copy in on_way:
            move_mount(copy, point)
            os.close(copy)
    clones.clear()
    # Private tmpfs mounts last: nothing attached above may cover them.
    mounts, folder = plan.private_tmpfs(
        wall, shm_is_dir=os.path.isdir(plan.SHM), idmapped=userns is not None
    )
    for target, options in mounts:
        _tmpfs(target, options)
    if folder is not None:
        os.mkdir(folder, 0o700)
        if userns is not None:
            os.chown(folder, plan.TREE_UID, plan.TREE_UID)
    for path in wall.masks:
        if os.path.isdir(path):
            _tmpfs(path, "mode=0755,size=4k", plan.MS_RDONLY | plan.MS_NOEXEC)
        elif os.path.exists(path):
            mount("/dev/null", path, None, plan.MS_BIND)
            mount(None, path, None, plan.MS_BIND | plan.MS_REMOUNT | plan.MS_RDONLY)
    for path in wall.protect:
        # One the private `/tmp` hides needs no wall: the tree cannot reach it.
        if os.path.lexists(path):
            bind_read_only(path)


def stat_of(pid: int) -> tuple[int, int] | None:
    """(ppid, pgrp) of `pid`, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return plan.parse_stat(f.read())
    except OSError:
        return None


def running(pids: Sequence[int]) -> list[int]:
    """The pids among `pids` of processes that still run (neither gone nor zombies)."""
    out: list[int] = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z":
            out.append(pid)
    return out


def _pipe(pid: int, fd: str) -> str | None:
    """The pipe `fd` of `pid` is, as `pipe:[inode]`, or None."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    return target if target.startswith("pipe:") else None


def pipe_writers(pids: Sequence[int]) -> dict[str, set[int]]:
    """The processes among `pids` holding each pipe's write end, by pipe."""
    found: dict[str, set[int]] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            pipe = _pipe(pid, fd)
            if pipe is None:
                continue
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
                    info = f.read()
            except OSError:
                continue
            if plan.writes(info):
                found.setdefault(pipe, set()).add(pid)
    return found


def pipeline_readers(pids: Sequence[int]) -> dict[int, str]:
    """The processes among `pids` reading a pipe another of them writes, and the pipe.

    Only stdin counts: the downstream stages of a pipeline (`| tail`, `| tee`).
    """
    readers = {pid: pipe for pid in pids if (pipe := _pipe(pid, "0")) is not None}
    if not readers:
        return {}
    return plan.live_readers(readers, pipe_writers(pids))


class Supervisor:
    """Spawns the command, reaps what reaches it, obeys the host's orders."""

    def __init__(self, executable: str, argv: Sequence[str]) -> None:
        self.executable = executable
        self.argv = list(argv)
        self.me = os.getpid()
        self.child = 0
        self.code: int | None = None
        self.readers = plan.SparedReaders({})

    # What differs between containments.

    def spawn(self) -> int:
        """Start the command; return its pid."""
        raise NotImplementedError

    def kill_round(self) -> None:
        """SIGKILL to every process of the tree once."""
        raise NotImplementedError

    # What is shared.

    def reap(self, block: bool) -> bool:
        """Reap children; False once none is left."""
        while True:
            try:
                pid, st = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return False
            except InterruptedError:
                continue
            if pid == 0:
                return True
            if pid == self.child:
                self.code = os.waitstatus_to_exitcode(st)
            if block:
                return True

    def kill_all(self) -> None:
        """SIGKILL the tree again and again until no child is left to reap."""
        while True:
            self.kill_round()
            if not self.reap(True):
                return

    # The stop: SIGTERM to the tree, then its grace window is the whole tree's.

    def members(self) -> list[int]:
        """The pids of every process of the tree (this one left out)."""
        raise NotImplementedError

    def send_one(self, pid: int, sig: int, members: set[int]) -> None:
        """Signal one process of the tree (`members`: the tree as last found)."""
        raise NotImplementedError

    def signal_all(self, sig: int) -> None:
        """Signal every process of the tree at once."""
        raise NotImplementedError

    def terminate(self) -> None:
        """SIGTERM to every process of the tree but the readers of a live pipeline.

        A process whose stdin is a pipe another process of the tree still writes (the
        `tail` of `make 2>&1 | tail`) is spared: it ends at the end of its input, and
        the writer's clean-up output reaches the host through it rather than killing
        the writer with SIGPIPE. `release_readers()` gives it SIGTERM once its writers
        are gone and it has had `READER_GRACE` seconds to finish.
        """
        found = self.members()
        self.readers = plan.SparedReaders(pipeline_readers(found))
        if not self.readers.spared:
            self.signal_all(signal.SIGTERM)
            return
        # One pass over the tree as found: a process forked since is a TERM handler's
        # own work (its `sleep`, its `rm`) and must not be signalled.
        members = {*found, self.me}
        for pid in found:
            if pid not in self.readers.spared:
                self.send_one(pid, signal.SIGTERM, members)

    def release_readers(self) -> float | None:
        """SIGTERM to each spared reader whose input ended `READER_GRACE` s ago.

        Returns:
            Seconds until the next one is due, or None when none waits.
        """
        if not self.readers.spared:
            return None
        found = self.members()
        due, wait = self.readers.release(found, pipe_writers(found), time.monotonic())
        for pid in due:
            self.send_one(pid, signal.SIGTERM, {*found, self.me})
        return wait

    def run(self, *, orders: bool = True) -> None:
        """Spawn the command and supervise it until the tree is gone.

        With `orders`, the host's orders are read from stdin (end of file kills).
        Without a stop, the command's exit ends the tree: what it left running is
        ended (`end_leftovers()`). After a `T` order, the tree is reaped until every
        process of it has exited by itself (the shell in front of a command ending
        changes nothing), or until the host's `K` (its grace window closed).
        """
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        quit_on = self.quit_signals()
        for sig in quit_on:
            signal.signal(sig, lambda *_: None)
        try:
            self.child = self.spawn()
        except OSError as exc:
            status(f"error {exc.errno or 0} {exc.strerror or exc}")
            return
        status(f"pid {self.child}")
        watched = [0, rfd] if orders else [rfd]
        terminated = False
        left = True
        wait: float | None = None
        while self.code is None or (terminated and left):
            ready = select.select(watched, [], [], wait)[0]
            if rfd in ready and self.woken_to_quit(rfd, quit_on):
                break
            left = self.reap(False)
            if 0 in ready:
                said = plan.order(os.read(0, 64))
                if said == "kill":
                    break
                if said == "terminate" and not terminated:
                    terminated = True
                    self.terminate()
                    left = self.reap(False)
            if terminated:
                wait = self.release_readers()
        else:
            if left and not terminated:
                self.end_leftovers(watched, rfd, quit_on)
        self.kill_all()
        status(plan.exit_line(self.code))

    def woken_to_quit(self, rfd: int, quit_on: Sequence[int]) -> bool:
        """Read the signal wake-up pipe; True when a quit signal came."""
        try:
            woken = os.read(rfd, 512)
        except BlockingIOError:
            return False
        return any(sig in woken for sig in quit_on)

    def end_leftovers(
        self, watched: Sequence[int], rfd: int, quit_on: Sequence[int]
    ) -> None:
        """SIGTERM to what the exited command left running; `LEFTOVER_GRACE` s to end.

        What is left then is for `kill_all()`.

        SIGKILL lands where a program's clean-up cannot run: a detached `git gc`
        killed outright leaves `gc.pid` naming its pid and `gc.log.lock`, and git
        refuses to gc until someone removes them. A `K` order, the end of the orders
        or a quit signal cuts the wait short. Reports `left <n> <k>`.
        """
        found = self.members()
        if not found:
            return
        self.signal_leftovers(found)
        deadline = time.monotonic() + LEFTOVER_GRACE
        while self.reap(False):
            wait = deadline - time.monotonic()
            if wait <= 0:
                break
            ready = select.select(watched, [], [], wait)[0]
            if rfd in ready and self.woken_to_quit(rfd, quit_on):
                break
            if 0 in ready and plan.order(os.read(0, 64)) == "kill":
                break
        self.reap(False)
        status(f"left {len(found)} {len(running(self.members()))}")

    def signal_leftovers(self, found: Sequence[int]) -> None:
        """SIGTERM to the processes `found` left by the exited command."""
        members = {*found, self.me}
        for pid in found:
            self.send_one(pid, signal.SIGTERM, members)

    def quit_signals(self) -> tuple[int, ...]:
        """Signals that make the supervisor kill the tree and exit."""
        return (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class SubreaperSupervisor(Supervisor):
    """The fallback: a child subreaper that finds its descendants through `/proc`."""

    def __init__(self, executable: str, argv: Sequence[str]) -> None:
        super().__init__(executable, argv)
        # Not Linux: children are still found while their parents live.
        with contextlib.suppress(OSError):
            prctl(PR_SET_CHILD_SUBREAPER, 1)
        me = self.me
        self.have_children_file = os.path.exists(f"/proc/{me}/task/{me}/children")
        self.have_pidfd = hasattr(os, "pidfd_open")

    def spawn(self) -> int:
        """posix_spawn the command in a process group of its own."""
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
        return os.posix_spawn(
            self.executable,
            self.argv,
            os.environ,
            file_actions=actions,
            setpgroup=0,
            setsigdef=_RESET,
            setsigmask=(),
        )

    def children(self, pid: int) -> list[int]:
        """The children of `pid` from /proc/<pid>/task/<tid>/children."""
        out: list[int] = []
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    out.extend(int(x) for x in f.read().split())
            except (OSError, ValueError):
                pass
        return out

    def descendants(self) -> list[int]:
        """Every descendant of the supervisor."""
        if self.have_children_file:
            return plan.descendants(self.me, self.children)
        parents: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = stat_of(int(name))
                if st is not None:
                    parents.setdefault(st[0], []).append(int(name))
        return plan.descendants(self.me, lambda pid: parents.get(pid, []))

    def send(self, pid: int, sig: int, tree: set[int]) -> None:
        """Signal `pid` only if it is still a member of the tree (no recycled pid)."""
        if self.have_pidfd:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                return
            try:
                st = stat_of(pid)
                if st is not None and st[0] in tree:
                    signal.pidfd_send_signal(fd, sig)
            except OSError:
                pass
            finally:
                os.close(fd)
            return
        st = stat_of(pid)
        if st is not None and st[0] in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def members(self) -> list[int]:
        """Every descendant found now."""
        return self.descendants()

    def send_one(self, pid: int, sig: int, members: set[int]) -> None:
        """Signal `pid` if it is still a member of the tree."""
        self.send(pid, sig, members)

    def signal_all(self, sig: int) -> None:
        """`sig` to the command's group and to every descendant outside it."""
        with contextlib.suppress(OSError):
            os.killpg(self.child, sig)
        tree = self.descendants()
        members = {*tree, self.me}
        for pid in tree:
            st = stat_of(pid)
            if st is not None and st[1] != self.child:
                self.send(pid, sig, members)

    def kill_round(self) -> None:
        """SIGKILL to every descendant found now."""
        tree = self.descendants()
        members = {*tree, self.me}
        for pid in tree:
            self.send(pid, signal.SIGKILL, members)


class NamespaceSupervisor(Supervisor):
    """The first process of the tree's PID namespace: every process there is its own."""

    def __init__(
        self,
        executable: str,
        argv: Sequence[str],
        *,
        wall: plan.Wall,
        inside: Inside,
    ) -> None:
        super().__init__(executable, argv)
        self.wall = wall
        self.inside = inside

    def quit_signals(self) -> tuple[int, ...]:
        """None: the host orders through the pipe, and the tree may not signal us."""
        return ()

    def spawn(self) -> int:
        """Fork the starter, give it its nested user namespace, let it exec."""
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        fail_r, fail_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the starter
            os.close(ready_r)
            os.close(go_w)
            os.close(fail_r)
            self.exec_walled(ready_w, go_r, fail_w)
        os.close(ready_w)
        os.close(go_r)
        os.close(fail_w)
        try:
            said = os.read(ready_r, 512)
            if said == b"u":
                try:
                    self.map_ids(pid)
                    self.attach(pid)
                except OSError as exc:
                    os.close(go_w)
                    os.waitpid(pid, 0)
                    raise exc from None
                os.write(go_w, b"g")
                said = b""
            os.close(go_w)
            said += os.read(fail_r, 512)
        finally:
            os.close(ready_r)
            os.close(fail_r)
        if said:
            os.waitpid(pid, 0)
            raise OSError(*plan.read_failure(said))
        return pid

    def map_ids(self, pid: int) -> None:
        """Map the starter's ids (`plan.starter_maps()`)."""
        inside = self.inside
        for name, text in plan.starter_maps(inside.root, inside.uid, inside.gid):
            write_file(f"/proc/{pid}/{name}", text)

    def attach(self, pid: int) -> None:
        """Attach the writable paths while the starter still shares our mounts."""
        if not self.inside.root:
            attach_writable(self.wall, self.inside.clones, None)
            return
        userns = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        try:
            attach_writable(self.wall, self.inside.clones, userns)
        finally:
            os.close(userns)

    def exec_walled(self, ready_w: int, go_r: int, fail_w: int) -> None:
        """In the starter: enter the nested namespaces, wait for the map, exec."""
        try:
            if not self.wall.stdio:
                # A server stays in the host's group: the MCP client's SIGTERM to
                # that group at shutdown must reach it.
                os.setpgid(0, 0)
            if self.inside.root:
                os.setgroups([])  # root's supplementary groups stay outside
            for _, fd, _, alone in self.inside.clones:
                os.close(fd)
                if alone >= 0:
                    os.close(alone)
            unshare(plan.CLONE_NEWUSER)
            os.write(ready_w, b"u")
            os.close(ready_w)
            if os.read(go_r, 1) != b"g":
                os._exit(127)
            os.close(go_r)
            # A mount namespace owned by the new user namespace: every mount copied
            # into it is locked, the read-only ones included.
            unshare(plan.CLONE_NEWNS)
            if self.inside.root:
                os.setresgid(0, 0, 0)
                os.setresuid(0, 0, 0)
            os.chdir(self.inside.cwd)
            if not self.wall.stdio:
                null = os.open("/dev/null", os.O_RDONLY)
                os.dup2(null, 0)
                os.close(null)
                os.dup2(1, 2)
            signal.set_wakeup_fd(-1)
            for sig in _RESET:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            refuse_set_ids()
            os.execve(self.executable, self.argv, os.environ)
        except OSError as exc:
            os.write(fail_w, plan.failure(exc))
        finally:
            os._exit(127)

    def members(self) -> list[int]:
        """Every process of the namespace but this one (its own `/proc`)."""
        return [
            int(name) for name in os.listdir("/proc") if name.isdigit() and name != "1"
        ]

    def send_one(self, pid: int, sig: int, members: set[int]) -> None:
        """Signal `pid`: in the namespace, a pid names a process of the tree."""
        del members
        with contextlib.suppress(OSError):
            os.kill(pid, sig)

    def signal_all(self, sig: int) -> None:
        """`sig` to every process of the namespace but this one."""
        with contextlib.suppress(OSError):
            os.kill(-1, sig)

    def signal_leftovers(self, found: Sequence[int]) -> None:
        """SIGTERM to every process of the namespace but this one."""
        del found
        self.signal_all(signal.SIGTERM)

    def kill_round(self) -> None:
        """SIGKILL to every process of the namespace but this one."""
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)


class Inside:
    """What the namespace's first process knows once its wall is built."""

    def __init__(
        self, *, uid: int, gid: int, root: bool, cwd: str, clones: list[Clone]
    ) -> None:
        self.uid = uid
        self.gid = gid
        """The caller's (effective) ids."""
        self.root = root
        """Whether the caller is the machine's root (`machine_root()`)."""
        self.cwd = cwd
        """The command's working directory."""
        self.clones = clones
        """The detached copies `build_wall()` took, not attached yet."""


def enter_namespace(wall: plan.Wall, cwd: str) -> Inside:
    """Move into new namespaces and fork the first process of the new PID namespace.

    Returns in that first process only, once it has built the wall; this process
    waits for it and exits with it. Raises OSError (in this process) when the kernel
    refuses the namespaces.
    """
    uid, gid = os.geteuid(), os.getegid()
    root = machine_root()
    unshare(plan.namespace_flags(uid, wall.network))
    if uid != 0:
        for name, text in plan.own_maps(uid, gid):
            write_file(f"/proc/self/{name}", text)
    # Nothing mounted here may reach the host's mount namespace.
    mount(None, "/", None, plan.MS_REC | plan.MS_PRIVATE)
    alive_r, alive_w = os.pipe()
    fail_r, fail_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        os.close(fail_r)
        # The host kills this program to kill the tree: take the namespace with it.
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([alive_r], [], [], 0)[0]:
            os._exit(1)  # this program died before the death signal was armed
        os.close(alive_r)
        try:
            clones = build_wall(wall, root)
        except OSError as exc:
            os.write(fail_w, plan.failure(exc))
            os._exit(1)
        os.close(fail_w)
        return Inside(uid=uid, gid=gid, root=root, cwd=cwd, clones=clones)
    os.close(alive_r)
    os.close(fail_w)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    failed = os.read(fail_r, 512)
    os.close(fail_r)
    if failed:
        # The wall could not be built: say why, as a start error.
        os.waitpid(pid, 0)
        number, text = plan.read_failure(failed)
        status(f"error {number} {text}")
        os._exit(1)
    while True:
        try:
            _, st = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        os._exit(plan.exit_status(os.waitstatus_to_exitcode(st)))


def main() -> None:
    """Run one tree in the containment its command line names."""
    call = plan.parse(
        sys.argv[1:], supervisor=os.path.abspath(__file__), python=sys.executable
    )
    cwd = os.getcwd()
    if call.mode == "subreaper":
        SubreaperSupervisor(call.executable, call.argv).run()
        # The tree is gone and reported: skip the interpreter's teardown (milliseconds
        # the host would wait for).
        os._exit(0)
    wall = call.wall
    if wall.stdio:
        global _QUIET
        _QUIET = True
        if wall.parent:
            # No order pipe: the host's death must reach the tree another way.
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != wall.parent:
                raise SystemExit(1)  # the host died before the signal was armed
    try:
        inside = enter_namespace(wall, cwd)
    except OSError as exc:
        status(f"refused {exc.errno or errno.EPERM} {exc.strerror or exc}")
        raise SystemExit(1) from None
    NamespaceSupervisor(call.executable, call.argv, wall=wall, inside=inside).run(
        orders=call.orders
    )
    os._exit(0)


if __name__ == "__main__":
    main()
