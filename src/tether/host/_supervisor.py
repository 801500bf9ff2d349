"""The supervisor of one process tree: a standalone program, run by path.

`python -I -S _supervisor.py MODE [PROTECT ...] -- EXECUTABLE ARGV0 [ARG ...]`

It imports nothing but the standard library (so it starts in milliseconds, whatever the
host's environment) and is started by `tether.host._proctree.ProcessTree`. It spawns
the command with stdin `/dev/null` and stdout and stderr merged into its own stdout,
and obeys one-byte orders on its stdin:

- `T`: SIGTERM to every process of the tree;
- `K`, or end of file (the host died): SIGKILL to every process of the tree, reap them
  all, report, exit.

It reports on its stderr, one line each: `pid <n>` once the command started (the pid as
the command itself sees it), `error <errno> <text>` if it could not start it, and
`exit <code>` once the whole tree is gone (negative for a signal, as `subprocess` says).
When the command exits, what it left running is killed before `exit` is reported.

MODE says how the tree is contained:

- `namespace`: the tree gets its own PID namespace and mount namespace (and a user
  namespace mapping the caller's uid to itself when the caller is not root). This
  program forks the namespace's first process, which mounts a fresh `/proc`, binds every
  PROTECT path read-only onto itself, and supervises. The command's starter enters one
  more, nested user namespace with a mount namespace of its own, which locks every mount
  it inherits: no process of the tree can unmount or remount the read-only paths, nor
  reach the outer `/proc`. When the namespace's first process dies (the host ordered
  it, or this program died and the kernel's parent-death signal followed), the kernel
  kills every process in the namespace; none can leave it.
- `subreaper`: the fallback where namespaces are refused. This program makes itself a
  child subreaper, so orphans (`setsid`, double forks, `nohup`) are re-parented to it,
  and finds descendants through `/proc`. A command that kills this program escapes it;
  the host then sweeps by the tree's environment marker (see docs/tools-process.md).
- `probe`: start a trivial command in `namespace` mode, protecting this file, and exit
  0 only if the command found that file read-only.

Python 3.11 has no `os.unshare` and `mount` has no wrapper: both are called through
ctypes on libc, here in the supervisor, because only a process that is about to fork
the tree can move it into new namespaces (util-linux `unshare` would add two program
starts per tree and could not lock the mounts between its steps).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import sys
from collections.abc import Callable, Sequence

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
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
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
ID_RANGE = 4294967295
"""Every id but the last: a root caller's nested user namespace maps all ids to themselves."""

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
    """unshare(2)."""
    _call("unshare", _libc.unshare(ctypes.c_int(flags)))


def mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    """mount(2) without data."""

    def b(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    result = _libc.mount(
        b(source), b(target), b(fstype), ctypes.c_ulong(flags), ctypes.c_void_p(None)
    )
    _call(f"mount {target}", result)


def prctl(option: int, value: int) -> None:
    """prctl(2) with one argument."""
    _call("prctl", _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0))


def status(line: str) -> None:
    """Write one report line on stderr, the host's status channel."""
    os.write(2, (line + "\n").encode())


def write_file(path: str, text: str) -> None:
    """Write `text` to a /proc control file in one write."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def bind_read_only(path: str) -> None:
    """Bind `path` onto itself and make that bind read-only, keeping its other flags.

    A remount may not clear flags the kernel locked on the mount below (nosuid, nodev,
    noexec, the atime mode), so they are read back and passed again.
    """
    mount(path, path, None, MS_BIND | MS_REC)
    found = os.statvfs(path).f_flag
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
    mount(None, path, None, flags)


def stat_of(pid: int) -> tuple[int, int] | None:
    """(ppid, pgrp) of `pid`, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


class Supervisor:
    """Spawns the command, reaps what reaches it, obeys the host's orders."""

    def __init__(self, executable: str, argv: Sequence[str]) -> None:
        self.executable = executable
        self.argv = list(argv)
        self.me = os.getpid()
        self.child = 0
        self.code: int | None = None

    # What differs between containments.

    def spawn(self) -> int:
        """Start the command; return its pid."""
        raise NotImplementedError

    def terminate(self) -> None:
        """SIGTERM to every process of the tree."""
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

    def run(self, *, orders: bool = True) -> None:
        """Spawn the command and supervise it until the tree is gone.

        With `orders`, the host's orders are read from stdin (end of file kills).
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
        while self.code is None:
            ready = select.select(watched, [], [])[0]
            if rfd in ready:
                try:
                    woken = os.read(rfd, 512)
                except BlockingIOError:
                    woken = b""
                if any(sig in woken for sig in quit_on):
                    break
            self.reap(False)
            if 0 in ready:
                order = os.read(0, 64)
                if not order or b"K" in order:
                    break
                if b"T" in order:
                    self.terminate()
        self.kill_all()
        code = self.code if self.code is not None else -signal.SIGKILL
        status(f"exit {code}")

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
            kids_of: Callable[[int], list[int]] = self.children
        else:
            parents: dict[int, list[int]] = {}
            for name in os.listdir("/proc"):
                if name.isdigit():
                    st = stat_of(int(name))
                    if st is not None:
                        parents.setdefault(st[0], []).append(int(name))

            def kids_of(pid: int) -> list[int]:
                return parents.get(pid, [])

        found: list[int] = []
        todo = [self.me]
        while todo:
            kids = kids_of(todo.pop())
            found.extend(kids)
            todo.extend(kids)
        return found

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

    def terminate(self) -> None:
        """SIGTERM to the command's group and to every descendant outside it."""
        with contextlib.suppress(OSError):
            os.killpg(self.child, signal.SIGTERM)
        tree = self.descendants()
        members = {*tree, self.me}
        for pid in tree:
            st = stat_of(pid)
            if st is not None and st[1] != self.child:
                self.send(pid, signal.SIGTERM, members)

    def kill_round(self) -> None:
        """SIGKILL to every descendant found now."""
        tree = self.descendants()
        members = {*tree, self.me}
        for pid in tree:
            self.send(pid, signal.SIGKILL, members)


class NamespaceSupervisor(Supervisor):
    """The first process of the tree's PID namespace: every process there is its own."""

    def __init__(
        self, executable: str, argv: Sequence[str], *, uid: int, gid: int
    ) -> None:
        super().__init__(executable, argv)
        self.uid = uid
        self.gid = gid

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
                self.map_ids(pid)
                os.write(go_w, b"g")
                said = b""
            os.close(go_w)
            said += os.read(fail_r, 512)
        finally:
            os.close(ready_r)
            os.close(fail_r)
        if said:
            os.waitpid(pid, 0)
            number, _, text = said.decode(errors="replace").partition(" ")
            raise OSError(int(number) if number.isdigit() else 0, text)
        return pid

    def map_ids(self, pid: int) -> None:
        """Map the starter's ids to themselves (all of them for a root caller)."""
        if self.uid == 0:
            write_file(f"/proc/{pid}/uid_map", f"0 0 {ID_RANGE}\n")
            write_file(f"/proc/{pid}/gid_map", f"0 0 {ID_RANGE}\n")
        else:
            write_file(f"/proc/{pid}/uid_map", f"{self.uid} {self.uid} 1\n")
            write_file(f"/proc/{pid}/gid_map", f"{self.gid} {self.gid} 1\n")

    def exec_walled(self, ready_w: int, go_r: int, fail_w: int) -> None:
        """In the starter: enter the nested namespaces, wait for the map, exec."""
        try:
            os.setpgid(0, 0)
            # A new user namespace with its own mount namespace: every mount copied
            # into it is locked, the read-only binds included.
            unshare(CLONE_NEWUSER | CLONE_NEWNS)
            os.write(ready_w, b"u")
            os.close(ready_w)
            if os.read(go_r, 1) != b"g":
                os._exit(127)
            os.close(go_r)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.dup2(1, 2)
            signal.set_wakeup_fd(-1)
            for sig in _RESET:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.execve(self.executable, self.argv, os.environ)
        except OSError as exc:
            os.write(fail_w, f"{exc.errno or 0} {exc.strerror or exc}".encode())
        finally:
            os._exit(127)

    def terminate(self) -> None:
        """SIGTERM to every process of the namespace but this one."""
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGTERM)

    def kill_round(self) -> None:
        """SIGKILL to every process of the namespace but this one."""
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)


def enter_namespace(protect: Sequence[str]) -> tuple[int, int]:
    """Move into new namespaces and fork the first process of the new PID namespace.

    Returns in that first process only, with the caller's (uid, gid); this process
    waits for it and exits with it. Raises OSError (in this process) when the kernel
    refuses the namespaces.
    """
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWPID
    if uid != 0:
        flags |= CLONE_NEWUSER
    unshare(flags)
    if uid != 0:
        write_file("/proc/self/setgroups", "deny")
        write_file("/proc/self/uid_map", f"{uid} {uid} 1\n")
        write_file("/proc/self/gid_map", f"{gid} {gid} 1\n")
    # Nothing mounted here may reach the host's mount namespace.
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        # The host kills this program to kill the tree: take the namespace with it.
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([alive_r], [], [], 0)[0]:
            os._exit(1)  # this program died before the death signal was armed
        os.close(alive_r)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for path in protect:
            bind_read_only(path)
        return uid, gid
    os.close(alive_r)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, st = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        code = os.waitstatus_to_exitcode(st)
        os._exit(code if code >= 0 else 128 - code)


def parse(args: Sequence[str]) -> tuple[str, list[str], str, list[str]]:
    """MODE [PROTECT ...] -- EXECUTABLE ARGV0 [ARG ...] -> its four parts."""
    if len(args) < 1:
        raise SystemExit(
            "usage: _supervisor.py MODE [PROTECT ...] -- EXECUTABLE ARGV..."
        )
    mode, rest = args[0], list(args[1:])
    if mode == "probe":
        return mode, [os.path.abspath(__file__)], sys.executable, _probe_argv()
    if "--" not in rest or len(rest) < rest.index("--") + 3:
        raise SystemExit(
            "usage: _supervisor.py MODE [PROTECT ...] -- EXECUTABLE ARGV..."
        )
    cut = rest.index("--")
    return mode, rest[:cut], rest[cut + 1], rest[cut + 2 :]


def _probe_argv() -> list[str]:
    target = os.path.abspath(__file__)
    code = (
        "import errno, sys\n"
        "try:\n"
        f"    open({target!r}, 'ab')\n"
        "except OSError as exc:\n"
        "    sys.exit(0 if exc.errno == errno.EROFS else 3)\n"
        "sys.exit(4)\n"
    )
    return [sys.executable, "-I", "-S", "-c", code]


def main() -> None:
    """Run one tree in the containment MODE names."""
    mode, protect, executable, argv = parse(sys.argv[1:])
    if mode == "subreaper":
        SubreaperSupervisor(executable, argv).run()
        # The tree is gone and reported: skip the interpreter's teardown (milliseconds
        # the host would wait for).
        os._exit(0)
    if mode not in ("namespace", "probe"):
        raise SystemExit(f"unknown containment {mode!r}: namespace, subreaper or probe")
    try:
        uid, gid = enter_namespace(protect)
    except OSError as exc:
        status(f"refused {exc.errno or errno.EPERM} {exc.strerror or exc}")
        raise SystemExit(1) from None
    supervisor = NamespaceSupervisor(executable, argv, uid=uid, gid=gid)
    # A probe has no host on its stdin to give orders.
    supervisor.run(orders=mode != "probe")
    os._exit(0)


if __name__ == "__main__":
    main()
