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
no filter, attribute, hook or work tree is involved. A cache in that git dir keyed by
(path, inode, size, mtime, ctime) keeps each file's blob id, so a walk reads only the
files that changed since the last one.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import re
import stat
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
    "note_index",
    "seed_cache",
)

SPARSE_SLACK: Final = 64 << 20
"""A file whose apparent size passes its blocks by more than this is refused (sparse)."""
_IGNORE_LIMIT: Final = 1 << 20
_CHUNK: Final = 1 << 20
_CACHE: Final = "tether-files.json"
_RACY_NS: Final = 100_000_000
"""A file changed this close to the walk is not cached: a write in the same tick of the
kernel's coarse clock would leave its times as they were. (A stage end walks a lane
whose agent is gone, so nothing writes it during the walk.)"""

Key = tuple[int, int, int, int]
"""(inode, size, mtime_ns, ctime_ns) of a file."""


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

    cache: dict[str, tuple[int, int, int, int, str]]
    send: _Sender
    started: int
    tracked: frozenset[str] = frozenset()
    """Paths git tracks (HEAD's and the index's): kept even where ignored."""
    tracked_dirs: frozenset[str] = frozenset()
    entries: list[tuple[bytes, str, str]] = attrs.field(factory=list)
    """(path, mode, blob id), in walk order."""
    fresh: dict[str, tuple[int, int, int, int, str]] = attrs.field(factory=dict)
    notes: list[str] = attrs.field(factory=list)

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
            self._folder(root, (), rules)

    def _folder(self, fd: int, parts: tuple[str, ...], rules: _Rules) -> None:
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        try:
            with os.scandir(listing) as it:
                names = sorted(e.name for e in it)
        finally:
            os.close(listing)
        if ".gitignore" in names:
            try:
                data = read_regular_at(fd, ".gitignore", _IGNORE_LIMIT)
            except OSError as exc:
                self.notes.append(f"{_show(parts, '.gitignore')}: not honoured: {exc}")
            else:
                spec = _spec(data)
                if spec is not None:
                    rules = _Rules((*rules.files, (parts, spec)))
        for name in names:
            here = (*parts, name)
            if name == ".git":
                if parts:
                    self.notes.append(f"{_show(parts, name)}: a nested .git, left out")
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            mode = st.st_mode
            path = "/".join(here)
            if stat.S_ISDIR(mode):
                if path not in self.tracked_dirs and rules.ignored(here, is_dir=True):
                    continue
                try:
                    with dir_beneath(fd, name) as sub:
                        self._folder(sub, here, rules)
                except OSError as exc:
                    if exc.errno in (errno.EACCES, errno.EPERM):
                        self.notes.append(f"{_show(parts, name)}: unreadable, left out")
                        continue
                    raise
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                if not rules.ignored(here, is_dir=False):
                    self.notes.append(
                        f"{_show(parts, name)}: {kind_words(mode)}, left out"
                    )
                continue
            if path not in self.tracked and rules.ignored(here, is_dir=False):
                continue
            if stat.S_ISLNK(mode):
                target = os.readlink(os.fsencode(name), dir_fd=fd)
                self.entries.append(
                    (os.fsencode(path), "120000", self.send.blob(target))
                )
                continue
            self._file(fd, name, path, st)

    def _file(self, fd: int, name: str, path: str, st: os.stat_result) -> None:
        if st.st_size > st.st_blocks * 512 + SPARSE_SLACK:
            raise LaneUnreadable(
                f"{path} is sparse: {st.st_size} bytes apparent in "
                f"{st.st_blocks * 512} on disk; tether does not hash it (remove it "
                "or make it whole)"
            )
        exe = "100755" if st.st_mode & stat.S_IXUSR else "100644"
        key: Key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = self.cache.get(path)
        if cached is not None and cached[:4] == key:
            sha = cached[4]
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
        if max(st.st_mtime_ns, st.st_ctime_ns) < self.started - _RACY_NS:
            self.fresh[path] = (*key, sha)
        self.entries.append((os.fsencode(path), exe, sha))


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


def _load_cache(own: Path) -> dict[str, tuple[int, int, int, int, str]]:
    try:
        data = json.loads((own / _CACHE).read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: tuple(v) for k, v in data.items()}


def _keep_cache(own: Path, fresh: dict[str, tuple[int, int, int, int, str]]) -> None:
    tmp = own / f"{_CACHE}.{os.getpid()}"
    tmp.write_text(json.dumps(fresh, separators=(",", ":")), encoding="utf-8")
    os.rename(tmp, own / _CACHE)


_LAST: Final = "tether-last-tree.json"
"""The last tree tether made of the lane and its entries: a commit on that tree is the
base of the next one, which then sends only what changed."""


@final
@attrs.frozen
class Last:
    """The last tree tether made of a lane, as kept in its git dir."""

    tree: str = ""
    entries: dict[bytes, tuple[str, str]] = attrs.field(factory=dict)
    """path -> (mode, blob id) of `tree`."""
    commits: frozenset[str] = frozenset()
    """Commits in tether's git dir whose tree is `tree` (the one made, its parent when
    nothing changed): a lane whose HEAD is one of them needs no fetch or lookup."""
    index: str = ""
    """sha1 of the index tether last wrote into the lane (its entries are `tree`'s)."""


def load_last(own: Path) -> Last:
    """What tether kept of the last tree it made of the lane (empty when none)."""
    try:
        data = json.loads((own / _LAST).read_bytes())
        entries = {os.fsencode(p): (m, h) for p, m, h in data["entries"]}
        return Last(
            tree=str(data["tree"]),
            entries=entries,
            commits=frozenset(str(c) for c in data.get("commits", ())),
            index=str(data.get("index", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Last()


def keep_last(
    own: Path,
    tree: str,
    entries: list[tuple[bytes, str, str]] | dict[bytes, tuple[str, str]],
    *,
    commits: Sequence[str] = (),
    index: str = "",
) -> None:
    """Keep the last tree tether made of the lane (see `Last`)."""
    tmp = own / f"{_LAST}.{os.getpid()}"
    if isinstance(entries, dict):
        rows = [[os.fsdecode(p), m, h] for p, (m, h) in entries.items()]
    else:
        rows = [[os.fsdecode(p), m, h] for p, m, h in entries]
    tmp.write_text(
        json.dumps(
            {"tree": tree, "entries": rows, "commits": list(commits), "index": index},
            separators=(",", ":"),
        ),
        encoding="utf-8",
    )
    os.rename(tmp, own / _LAST)


def note_index(own: Path, commit: str, index: bytes) -> None:
    """Record the lane's branch at `commit` and its index `index`, as tether wrote them.

    `commit` is on the last tree, and so is the index.
    """
    last = load_last(own)
    keep_last(
        own,
        last.tree,
        last.entries,
        commits=sorted(last.commits | {commit}),
        index=hashlib.sha1(index).hexdigest(),
    )


_LS_FILES = re.compile(
    rb"(\d{6}) ([0-9a-f]{40}) 0\t([^\0]*)\0"
    rb"  ctime: (\d+):(\d+)\n  mtime: (\d+):(\d+)\n"
    rb"  dev: \d+\tino: (\d+)\n  uid: \d+\tgid: \d+\n  size: (\d+)\tflags: [0-9a-f]+\n"
)


def seed_cache(
    own: Path, listing: bytes, lane: Path, tree: str, *, base: str, index: bytes
) -> None:
    """Seed the cache from `git ls-files -s --debug -z` of a checkout tether made.

    Nothing but tether has written the lane yet: its index's times are the files'.
    """
    found: dict[str, tuple[int, int, int, int, str]] = {}
    entries: list[tuple[bytes, str, str]] = []
    for m in _LS_FILES.finditer(listing):
        entries.append((m.group(3), m.group(1).decode(), m.group(2).decode()))
        path = os.fsdecode(m.group(3))
        try:
            st = os.stat(lane / path, follow_symlinks=False)
        except OSError:
            continue
        ctime = int(m.group(4)) * 10**9 + int(m.group(5))
        mtime = int(m.group(6)) * 10**9 + int(m.group(7))
        if (
            stat.S_ISREG(st.st_mode)
            and st.st_ctime_ns == ctime
            and st.st_mtime_ns == mtime
            and st.st_ino == int(m.group(8))
            and st.st_size == int(m.group(9))
        ):
            found[path] = (st.st_ino, st.st_size, mtime, ctime, m.group(2).decode())
    _keep_cache(own, found)
    keep_last(own, tree, entries, commits=[base], index=hashlib.sha1(index).hexdigest())


_INDEX_LIMIT: Final = 256 << 20


async def _tracked(
    own: Path, lane: Path, head: str, last: Last
) -> tuple[list[str], list[str]]:
    """Paths git tracks in the lane (its HEAD's tree and its index), and notes.

    The index is copied by descriptor (`_untrusted`, bounded, a sparse one refused)
    and listed by tether's git as data; one it cannot read leaves HEAD's paths only.
    A HEAD on tether's last tree, or the index tether last wrote, is known without git.
    """
    if head in last.commits:
        paths = [os.fsdecode(p) for p in last.entries]
    else:
        out = await tgit(own, "ls-tree", "-r", "-z", "--name-only", head)
        paths = out.split("\0")
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
            paths += listed.split("\0")
        elif head not in last.commits:
            paths += [os.fsdecode(p) for p in last.entries]
    except FileNotFoundError:
        pass
    except (OSError, GitFailed) as exc:
        notes.append(f".git/index: not read ({exc})")
    finally:
        with contextlib.suppress(OSError):
            copy.unlink()
    return [p for p in paths if p], notes


async def commit_files(
    own: Path,
    lane: Path,
    *,
    parents: Sequence[str],
    message: str,
    bound: float = GIT_BOUND,
) -> Snapshot:
    """Walk the lane and commit its files in tether's git dir, with `parents`.

    What `.gitignore` files leave out stays out, but for paths git tracks (in the
    first parent's tree or the lane's index), as `git add -A` would.

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
    last_tree, last = kept.tree, kept.entries
    if last_tree != base_tree:
        last = {}  # the parent is not on tether's last tree: the whole tree is sent
    dirs = {
        "/".join(p.split("/")[:n]) for p in tracked for n in range(1, p.count("/") + 1)
    }
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
    cache = await in_thread(_load_cache, own)
    walk = _Walk(
        cache=cache,
        send=_Sender(write_end),
        started=time.time_ns(),
        tracked=frozenset(tracked),
        tracked_dirs=frozenset(dirs),
        notes=notes,
    )

    def work() -> bytes:
        try:
            walk.run(lane)
            return _commit_command(walk, parents, message, last if last_tree else None)
        finally:
            os.close(write_end)

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
    commit = out.decode().strip()
    await in_thread(_keep_cache, own, walk.fresh)
    tree = await tgit(own, "rev-parse", f"{commit}^{{tree}}")
    same = [commit]
    if tree == base_tree:
        same.append(parents[0])
    index = ""
    if tree == kept.tree:
        same += kept.commits  # the index tether wrote still describes this tree
        index = kept.index
    await in_thread(
        functools.partial(keep_last, own, tree, walk.entries, commits=same, index=index)
    )
    return Snapshot(
        commit=commit, tree=tree, base_tree=base_tree, notes=tuple(walk.notes)
    )


def _commit_command(
    walk: _Walk,
    parents: Sequence[str],
    message: str,
    last: dict[bytes, tuple[str, str]] | None,
) -> bytes:
    """Send the commit of the walked entries and ask for its id.

    With `last` (the entries of the first parent's tree), only what changed is sent;
    else the whole tree.
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
    if last is None:
        lines.append(b"deleteall")
        changed = walk.entries
    else:
        now = {path for path, _, _ in walk.entries}
        lines += [b"D " + _quote(path) for path in last if path not in now]
        changed = [e for e in walk.entries if last.get(e[0]) != (e[1], e[2])]
    lines += [
        b"M %s %s %s" % (mode.encode(), sha.encode(), _quote(path))
        for path, mode, sha in changed
    ]
    lines += [b"", b"get-mark :1", b"done", b""]
    walk.send._write(b"\n".join(lines))
    return b""
