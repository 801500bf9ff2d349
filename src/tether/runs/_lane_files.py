"""A lane's files as data: tether's own walk, and their tree in tether's git dir (S16).

The walk reads the lane below a descriptor it holds, one folder at a time
(`O_NOFOLLOW | O_DIRECTORY`), and `lstat`s every entry, following no link:

- a regular file is read by descriptor (`_untrusted.open_regular_at`: type-checked,
  `O_NONBLOCK`) and becomes a blob (mode 100755 when its owner may run it, else 100644);
  a file whose apparent size is absurd for its blocks (a sparse file) is refused with a
  reason, never hashed;
- a symlink becomes a link entry (its target, as git keeps one), never followed;
- a FIFO, socket or device is skipped and noted; so is a `.git` in a subfolder (a git
  tree cannot hold one): it stays in the lossless save;
- `.gitignore` files (and the lane's `.git/info/exclude`) are read as data
  (`pathspec`), bounded; one that is not a regular file is noted and not honoured.

Blobs, trees and the commit are written by `git fast-import` into tether's git dir:
no filter, attribute, hook or work tree is involved. What tether last made of the lane
(its tree's entries, and for each file the (inode, size, mtime, ctime) its blob id was
read at) is kept in that git dir, in one file read once per process and kept once per
walk: a walk reads only the files that changed since the last one and sends only the
entries that changed. The lane's own index is never trusted for a blob id (the agent
writes it); the index tether writes into the lane holds the walk's stat data, so the
agent's own git in the next stage does not read every file again either.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import struct
import threading
import time
from typing import TYPE_CHECKING, Final, final

import anyio
import attrs
import pathspec

from .._threads import in_thread
from .._untrusted import dir_beneath, kind_words, open_regular_at, read_regular_at
from ..host._spawn import PIPE, start_process
from ._own_git import (
    GIT_BOUND,
    OWN_OPTIONS,
    GitFailed,
    LaneUnreadable,
    clean_env,
    kill_group,
    tgit,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = (
    "SPARSE_SLACK",
    "Last",
    "Snapshot",
    "commit_files",
    "keep_last",
    "load_last",
    "seed_cache",
)

SPARSE_SLACK: Final = 64 << 20
"""A file whose apparent size passes its blocks by more than this is refused (sparse)."""
_IGNORE_LIMIT: Final = 1 << 20
_CHUNK: Final = 1 << 20
_RACY_NS: Final = 100_000_000
"""A file changed this close to the walk is not cached: a write in the same tick of the
kernel's coarse clock would leave its times as they were. (A stage end walks a lane
whose agent is gone, so nothing writes it during the walk.)"""

Key = tuple[int, int, int, int]
"""(inode, size, mtime_ns, ctime_ns) of a file."""
Entry = tuple[str, str, Key | None]
"""(mode, blob id, the file's key when the id was read) of a path in a tree."""


@final
@attrs.frozen
class Snapshot:
    """What a walk of a lane made."""

    commit: str
    """The commit made in tether's git dir."""
    tree: str
    """Its tree."""
    base_tree: str
    """Its first parent's tree ("" when tether's git cannot name it)."""
    notes: tuple[str, ...]
    """What was left out and why (a FIFO, a `.git` in a subfolder, ...)."""
    index: bytes = b""
    """With `commit_files(index=True)` and a tree not its parent's: an index of `tree`
    holding the walk's stat data, to write into the lane."""


@attrs.define
class _Rules:
    """`.gitignore` files in reach of one folder: (base parts, spec), deepest last."""

    files: tuple[tuple[tuple[str, ...], pathspec.GitIgnoreSpec], ...] = ()

    def ignored(self, parts: tuple[str, ...], *, is_dir: bool) -> bool:
        for base, spec in reversed(self.files):
            rel = "/".join(parts[len(base) :])
            result = spec.check_file(rel + "/" if is_dir else rel)
            if result.include is not None:
                return bool(result.include)
        return False


def _spec(data: bytes) -> pathspec.GitIgnoreSpec | None:
    lines = os.fsdecode(data).splitlines()
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    return spec if len(spec) else None


@attrs.define
class _Walk:
    """One walk's state (runs in a worker thread)."""

    last: dict[str, Entry]
    """What tether last made of the lane: a file whose key is the same is not read."""
    send: _Sender
    started: int
    tracked: frozenset[str] = frozenset()
    """Paths git tracks (HEAD's and the index's): kept even where ignored."""
    entries: dict[str, Entry] = attrs.field(factory=dict)
    """path -> entry, in walk order (a key only where it may be trusted next time)."""
    stats: list[tuple[str, os.stat_result]] = attrs.field(factory=list)
    """(path, lstat) of each entry, for the index."""
    notes: list[str] = attrs.field(factory=list)
    _tracked_dirs: frozenset[str] | None = None

    def tracked_dir(self, path: str) -> bool:
        if self._tracked_dirs is None:
            self._tracked_dirs = frozenset(
                p[:n] for p in self.tracked for n, c in enumerate(p) if c == "/"
            )
        return path in self._tracked_dirs

    def run(self, lane: Path) -> None:
        with dir_beneath(lane) as root:
            rules = _Rules()
            try:
                exclude = read_regular_at_path(root, (".git", "info"), "exclude")
            except OSError:
                exclude = None
            if exclude is not None:
                spec = _spec(exclude)
                if spec is not None:
                    rules = _Rules((((), spec),))
            self._folder(root, (), "", rules)

    def _folder(
        self, fd: int, parts: tuple[str, ...], prefix: str, rules: _Rules
    ) -> None:
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        try:
            with os.scandir(listing) as it:
                names = sorted([e.name for e in it])
        finally:
            os.close(listing)
        if ".gitignore" in names:
            try:
                data = read_regular_at(fd, ".gitignore", _IGNORE_LIMIT)
            except OSError as exc:
                self.notes.append(f"{prefix}.gitignore: not honoured: {exc}")
            else:
                spec = _spec(data)
                if spec is not None:
                    rules = _Rules((*rules.files, (parts, spec)))
        for name in names:
            if name == ".git":
                if parts:
                    self.notes.append(f"{prefix}{name}: a nested .git, left out")
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            mode = st.st_mode
            path = prefix + name
            if stat.S_ISREG(mode):
                if (
                    rules.files
                    and path not in self.tracked
                    and rules.ignored((*parts, name), is_dir=False)
                ):
                    continue
                self._file(fd, name, path, st)
                continue
            if stat.S_ISDIR(mode):
                if (
                    rules.files
                    and rules.ignored((*parts, name), is_dir=True)
                    and not self.tracked_dir(path)
                ):
                    continue
                try:
                    with dir_beneath(fd, name) as sub:
                        self._folder(sub, (*parts, name), path + "/", rules)
                except OSError as exc:
                    if exc.errno in (errno.EACCES, errno.EPERM):
                        self.notes.append(f"{path}: unreadable, left out")
                        continue
                    raise
                continue
            if not stat.S_ISLNK(mode):
                if not rules.files or not rules.ignored((*parts, name), is_dir=False):
                    self.notes.append(f"{path}: {kind_words(mode)}, left out")
                continue
            if (
                rules.files
                and path not in self.tracked
                and rules.ignored((*parts, name), is_dir=False)
            ):
                continue
            target = os.readlink(os.fsencode(name), dir_fd=fd)
            self.entries[path] = ("120000", self.send.blob(target), None)
            self.stats.append((path, st))

    def _file(self, fd: int, name: str, path: str, st: os.stat_result) -> None:
        if st.st_size > st.st_blocks * 512 + SPARSE_SLACK:
            raise LaneUnreadable(
                f"{path} is sparse: {st.st_size} bytes apparent in "
                f"{st.st_blocks * 512} on disk; tether does not hash it (remove it "
                "or make it whole)"
            )
        exe = "100755" if st.st_mode & stat.S_IXUSR else "100644"
        key: Key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self.last.get(path)
        if known is not None and known[2] == key:
            sha = known[1]
        else:
            try:
                file_fd = open_regular_at(fd, name)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM):
                    self.notes.append(f"{path}: unreadable, left out")
                    return
                raise
            try:
                sha = self.send.stream(file_fd, st.st_size, path)
            finally:
                os.close(file_fd)
        trusted = max(st.st_mtime_ns, st.st_ctime_ns) < self.started - _RACY_NS
        self.entries[path] = (exe, sha, key if trusted else None)
        self.stats.append((path, st))


def read_regular_at_path(root: int, folder: Sequence[str], name: str) -> bytes:
    """A small regular file below `root`, by descriptor (`_untrusted`)."""
    with dir_beneath(root, "/".join(folder)) as fd:
        return read_regular_at(fd, name, _IGNORE_LIMIT)


def _show(parts: tuple[str, ...], name: str) -> str:
    return "/".join((*parts, name))


@attrs.define
class _Sender:
    """Writes blobs into `git fast-import`'s stdin, each under the id git gives it.

    The pipe is a blocking one, written from the walk's thread.
    """

    fd: int
    known: set[str] = attrs.field(factory=set)

    def _write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def blob(self, data: bytes) -> str:
        sha = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if sha not in self.known:
            self._write(b"blob\ndata %d\n" % len(data) + data + b"\n")
            self.known.add(sha)
        return sha

    def stream(self, fd: int, size: int, path: str) -> str:
        """Send the `size` bytes of the open file `fd` as a blob; its id."""
        digest = hashlib.sha1(b"blob %d\0" % size)
        self._write(b"blob\ndata %d\n" % size)
        left = size
        while left:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                raise LaneUnreadable(f"{path} shrank while it was read")
            digest.update(chunk)
            self._write(chunk)
            left -= len(chunk)
        self._write(b"\n")
        sha = digest.hexdigest()
        self.known.add(sha)
        return sha


def _quote(path: bytes) -> bytes:
    """A path as fast-import reads it (C-style quoted when it must be)."""
    if not any(c in path for c in (b'"', b"\n", b"\\")) and not path.startswith(b'"'):
        return path
    out = path.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
    return b'"' + out + b'"'


_STATE: Final = "tether-lane.json"
"""What tether last made of the lane (`Last`), in its git dir."""
_MEMO: dict[Path, tuple[tuple[int, int, int], Last]] = {}
"""`Last` of the lanes this process read or kept lately, by the state file's (inode,
size, mtime): each is a new file, renamed into place (which changes its ctime)."""
_MEMO_SIZE: Final = 16
_MEMO_LOCK: Final = threading.Lock()


@final
@attrs.frozen
class Last:
    """The last tree tether made of a lane, as kept in its git dir (never mutated)."""

    tree: str = ""
    entries: dict[str, Entry] = attrs.field(factory=dict)
    """path -> entry of `tree` (with the file's key where its blob id may be reused)."""
    commits: frozenset[str] = frozenset()
    """Commits in tether's git dir whose tree is `tree` (the one made, its parent when
    nothing changed): a lane whose HEAD is one of them needs no fetch or lookup."""
    index: str = ""
    """sha1 of the index tether last wrote into the lane (its entries are `tree`'s)."""


def _file_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def load_last(own: Path) -> Last:
    """What tether kept of the last tree it made of the lane (empty when none).

    Read once per process: a later call finds it in memory while the file is the same.
    """
    try:
        fd = os.open(own / _STATE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return Last()
    try:
        key = _file_key(os.fstat(fd))
        memo = _MEMO.get(own)
        if memo is not None and memo[0] == key:
            return memo[1]
        with open(fd, "rb", closefd=False) as f:
            raw = f.read()
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
        entries: dict[str, Entry] = {
            row[0]: (row[1], row[2], tuple(row[3:7]) if len(row) == 7 else None)
            for row in data["entries"]
        }
        last = Last(
            tree=str(data["tree"]),
            entries=entries,
            commits=frozenset(str(c) for c in data.get("commits", ())),
            index=str(data.get("index", "")),
        )
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return Last()
    _remember(own, key, last)
    return last


def _remember(own: Path, key: tuple[int, int, int], last: Last) -> None:
    with _MEMO_LOCK:  # lanes' walks run in threads of their own
        _MEMO.pop(own, None)
        while len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)), None)
        _MEMO[own] = (key, last)


def entry_rows(entries: dict[str, Entry]) -> bytes:
    """`entries` as `keep_last` writes them (JSON)."""
    rows = [
        [path, mode, sha, *key] if key is not None else [path, mode, sha]
        for path, (mode, sha, key) in entries.items()
    ]
    return json.dumps(rows, separators=(",", ":")).encode()


def keep_last(own: Path, last: Last, rows: bytes | None = None) -> None:
    """Keep what tether made of the lane (see `Last`) in its git dir.

    `rows`: `entry_rows(last.entries)`, when the caller made them already.
    """
    head = json.dumps(
        {"tree": last.tree, "commits": sorted(last.commits), "index": last.index},
        separators=(",", ":"),
    ).encode()
    if rows is None:
        rows = entry_rows(last.entries)
    data = head[:-1] + b',"entries":' + rows + b"}"
    tmp = own / f"{_STATE}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        key = _file_key(os.fstat(fd))
    finally:
        os.close(fd)
    os.rename(tmp, own / _STATE)
    _remember(own, key, last)


_LS_FILES = re.compile(
    rb"(\d{6}) ([0-9a-f]{40}) 0\t([^\0]*)\0"
    rb"  ctime: (\d+):(\d+)\n  mtime: (\d+):(\d+)\n"
    rb"  dev: \d+\tino: (\d+)\n  uid: \d+\tgid: \d+\n  size: (\d+)\tflags: [0-9a-f]+\n"
)


def seed_cache(
    own: Path, listing: bytes, lane: Path, tree: str, *, base: str, index: bytes
) -> None:
    """Seed what tether knows of a lane from `git ls-files -s --debug -z` of it.

    The lane is a checkout tether has just made: nothing but tether has written it, so
    its index's times are the files'. Nothing but tether has written the lane yet: its index's times are the files'.
    """
    entries: dict[str, Entry] = {}
    for m in _LS_FILES.finditer(listing):
        path = os.fsdecode(m.group(3))
        mode, sha = m.group(1).decode(), m.group(2).decode()
        key: Key | None = None
        try:
            st = os.stat(lane / path, follow_symlinks=False)
        except OSError:
            st = None
        ctime = int(m.group(4)) * 10**9 + int(m.group(5))
        mtime = int(m.group(6)) * 10**9 + int(m.group(7))
        if (
            st is not None
            and stat.S_ISREG(st.st_mode)
            and st.st_ctime_ns == ctime
            and st.st_mtime_ns == mtime
            and st.st_ino == int(m.group(8))
            and st.st_size == int(m.group(9))
        ):
            key = (st.st_ino, st.st_size, mtime, ctime)
        entries[path] = (mode, sha, key)
    keep_last(
        own,
        Last(
            tree=tree,
            entries=entries,
            commits=frozenset({base}),
            index=hashlib.sha1(index).hexdigest(),
        ),
    )


def index_of(
    stats: list[tuple[str, os.stat_result]], entries: dict[str, Entry]
) -> bytes:
    """A git index (version 2) of `entries`, holding each file's stat data.

    With the stat data, git in the lane (the agent's, next stage) reads a file again
    only when its times, size or inode changed, as after a `git add`; a file changed in
    the same tick as the index is racy to git, which then compares its bytes.
    """
    rows = sorted((os.fsencode(path), entries[path], st) for path, st in stats)
    out = [b"DIRC" + struct.pack(">II", 2, len(rows))]
    pack = struct.Struct(">10I20sH").pack
    mask = 0xFFFFFFFF
    for name, (mode, sha, _), st in rows:
        body = pack(
            (st.st_ctime_ns // 10**9) & mask,
            st.st_ctime_ns % 10**9,
            (st.st_mtime_ns // 10**9) & mask,
            st.st_mtime_ns % 10**9,
            st.st_dev & mask,
            st.st_ino & mask,
            int(mode, 8),
            st.st_uid & mask,
            st.st_gid & mask,
            st.st_size & mask,
            bytes.fromhex(sha),
            min(len(name), 0xFFF),
        )
        pad = 8 - (len(body) + len(name)) % 8
        out.append(body + name + b"\0" * pad)
    data = b"".join(out)
    return data + hashlib.sha1(data).digest()


_INDEX_LIMIT: Final = 256 << 20


async def _tracked(
    own: Path, lane: Path, head: str, last: Last
) -> tuple[frozenset[str], list[str]]:
    """Paths git tracks in the lane (its HEAD's tree and its index), and notes.

    The index is copied by descriptor (`_untrusted`, bounded, a sparse one refused)
    and listed by tether's git as data; one it cannot read leaves HEAD's paths only.
    A HEAD on tether's last tree, or the index tether last wrote, is known without git.
    """
    paths: set[str] = set()
    if head in last.commits:
        paths.update(last.entries)
    else:
        out = await tgit(own, "ls-tree", "-r", "-z", "--name-only", head)
        paths.update(out.split("\0"))
    notes: list[str] = []
    copy = own / f"lane-index-{os.urandom(4).hex()}"

    def take() -> bytes:
        with dir_beneath(lane, ".git") as gitdir:
            fd = open_regular_at(gitdir, "index")
            try:
                st = os.fstat(fd)
                if st.st_size > st.st_blocks * 512 + SPARSE_SLACK:
                    raise OSError(errno.EFBIG, "sparse")
            finally:
                os.close(fd)
            return read_regular_at(gitdir, "index", _INDEX_LIMIT)

    try:
        data = await in_thread(take)
        if not last.index or hashlib.sha1(data).hexdigest() != last.index:
            await in_thread(copy.write_bytes, data)
            listed = await tgit(
                own, "ls-files", "-z", "--cached", env={"GIT_INDEX_FILE": str(copy)}
            )
            paths.update(listed.split("\0"))
        elif head not in last.commits:
            paths.update(last.entries)
    except FileNotFoundError:
        pass
    except (OSError, GitFailed) as exc:
        notes.append(f".git/index: not read ({exc})")
    finally:
        with contextlib.suppress(OSError):
            copy.unlink()
    paths.discard("")
    return frozenset(paths), notes


async def commit_files(
    own: Path,
    lane: Path,
    *,
    parents: Sequence[str],
    message: str,
    bound: float = GIT_BOUND,
    index: bool = False,
) -> Snapshot:
    """Walk the lane and commit its files in tether's git dir, with `parents`.

    What `.gitignore` files leave out stays out, but for paths git tracks (in the
    first parent's tree or the lane's index), as `git add -A` would. With `index`, a
    tree not the first parent's comes with an index of it (`Snapshot.index`), noted as
    the one tether wrote into the lane.

    Raises:
        LaneUnreadable: a file the walk refuses (a sparse one) or cannot read.
        GitFailed: fast-import failed or passed `bound`.
    """
    kept = await in_thread(load_last, own)
    tracked, notes = await _tracked(own, lane, parents[0], kept)
    if parents[0] in kept.commits:
        base_tree = kept.tree
    else:
        try:
            base_tree = await tgit(
                own, "rev-parse", "--verify", f"{parents[0]}^{{tree}}"
            )
        except GitFailed:
            base_tree = ""
    # Only a parent on tether's last tree lets the commit send what changed.
    last = kept.entries if kept.tree and kept.tree == base_tree else None
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        process = start_process(
            [
                "git",
                *OWN_OPTIONS,
                # Its pack is not flushed to disk, as `git commit` in the lane did
                # not flush its loose objects (git's default).
                "-c",
                "core.fsync=none",
                # A small pack stays a pack: below 100 objects fast-import would
                # otherwise start `unpack-objects` to write each one loose (most of
                # its time at a stage end).
                "-c",
                "fastimport.unpackLimit=0",
                "fast-import",
                "--quiet",
                "--date-format=now",
                "--done",
                "--force",
            ],
            stdin=read_end,
            stdout=PIPE,
            stderr=PIPE,
            cwd=own,
            env={**clean_env(), "GIT_DIR": str(own)},
            start_new_session=True,
        )
    except OSError as exc:
        os.close(write_end)
        raise GitFailed(f"git fast-import could not run: {exc}") from None
    finally:
        os.close(read_end)
    out, err = bytearray(), bytearray()
    walk = _Walk(
        last=kept.entries,
        send=_Sender(write_end),
        started=time.time_ns(),
        tracked=tracked,
        notes=notes,
    )

    made: list[bytes] = []

    def work() -> None:
        try:
            walk.run(lane)
            changed = _commit_command(walk, parents, message, last)
        finally:
            os.close(write_end)
        # While fast-import writes its pack (on the other core): what is kept of this
        # tree, and the lane's index of it when it may be needed.
        made.append(entry_rows(walk.entries))
        if index and changed:
            made.append(index_of(walk.stats, walk.entries))

    async def drain(
        stream: anyio.abc.ByteReceiveStream | None, into: bytearray
    ) -> None:
        assert stream is not None
        async for chunk in stream:
            into += chunk

    code: int | None = None
    failure: BaseException | None = None
    try:
        with anyio.move_on_after(bound):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, process.stdout, out)
                tg.start_soon(drain, process.stderr, err)
                try:
                    await in_thread(work)
                except (OSError, LaneUnreadable) as exc:
                    failure = exc
                    kill_group(process.pid)
            code = await process.wait()
    finally:
        if code is None:
            kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            await process.aclose()
    if isinstance(failure, LaneUnreadable):
        raise failure
    if failure is not None:
        raise LaneUnreadable(f"its files cannot be read: {failure}") from None
    if code is None:
        raise GitFailed(f"writing the lane's files took longer than {bound:g} s")
    if code != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        raise GitFailed(f"git fast-import failed: {lines[-1] if lines else code}")
    # "<commit>\n040000 tree <tree>\t\n": the commit's id, then its root tree's.
    answer = out.decode("ascii", "replace").split()
    if len(answer) < 4 or answer[2] != "tree":
        raise GitFailed(f"git fast-import answered {out[:200]!r}")
    commit, tree = answer[0], answer[3]
    same = {commit}
    if tree == base_tree:
        same.add(parents[0])
    index_sha = ""
    made_index = b""
    if tree == kept.tree:
        same |= kept.commits  # the index tether wrote still describes this tree
        index_sha = kept.index
    if index and tree != base_tree:
        # The caller writes this index into the lane: it is the one tether wrote.
        made_index = made[1] if len(made) > 1 else b""
        if not made_index:
            made_index = await in_thread(index_of, walk.stats, walk.entries)
        index_sha = hashlib.sha1(made_index).hexdigest()
    last_now = Last(
        tree=tree, entries=walk.entries, commits=frozenset(same), index=index_sha
    )
    await in_thread(keep_last, own, last_now, made[0])
    return Snapshot(
        commit=commit,
        tree=tree,
        base_tree=base_tree,
        notes=tuple(walk.notes),
        index=made_index,
    )


def _commit_command(
    walk: _Walk,
    parents: Sequence[str],
    message: str,
    last: dict[str, Entry] | None,
) -> bool:
    """Send the commit of the walked entries and ask for its id and its tree's.

    With `last` (the entries of the first parent's tree), only what changed is sent;
    else the whole tree. Returns False when the tree is known to be the parent's.
    """
    msg = message.encode()
    lines = [
        b"commit refs/tether/made",
        b"mark :1",
        b"committer tether <tether@localhost> now",
        b"data %d" % len(msg),
        msg,
    ]
    lines.append(b"from " + parents[0].encode())
    lines += [b"merge " + p.encode() for p in parents[1:]]
    entries = walk.entries
    if last is None:
        lines.append(b"deleteall")
        changed = list(entries)
    else:
        lines += [
            b"D " + _quote(os.fsencode(path)) for path in last if path not in entries
        ]
        changed = [
            path
            for path, (mode, sha, _) in entries.items()
            if (old := last.get(path)) is None or old[0] != mode or old[1] != sha
        ]
    lines += [
        b"M %s %s %s"
        % (entries[p][0].encode(), entries[p][1].encode(), _quote(os.fsencode(p)))
        for p in changed
    ]
    lines += [b"", b"get-mark :1", b'ls :1 ""', b"done", b""]
    walk.send._write(b"\n".join(lines))
    return last is None or bool(changed) or any(path not in entries for path in last)
