"""tether's own git for a lane (spec 01 S16): a git dir outside the lane, and the lane as data.

Every git command tether runs for a lane runs on a git dir tether owns, beside the lane
in the state dir (`lanes/<run>/<lane>.git`, 0700), never on the lane's own `.git`:
`GIT_DIR` is explicit, no system or global config is read (`GIT_CONFIG_NOSYSTEM`,
`GIT_CONFIG_GLOBAL=/dev/null`), no attributes file outside it, hooks and fsmonitor off,
and each command is bounded in time (its process group killed at the bound). The lane's
own `.git` is a folder the agent writes: tether reads from it only

- `HEAD`, its branch's ref (a loose ref file or a `packed-refs` line), and
  `objects/info/alternates`, each by descriptor below a held folder (`_untrusted`:
  `O_NOFOLLOW | O_NONBLOCK`, type-checked, bounded), after judging `.git` itself by
  `lstat` (a real folder: no `gitdir:` file, no link, no `commondir`, alternates exactly
  what tether wrote, no `http-alternates`);
- the objects of commits the agent made, fetched into tether's git dir by an
  `upload-pack` that runs on a *shadow* repository tether made (its config tether's,
  the lane's objects one of its alternates): the lane's config, attributes, hooks and
  pointers are never read by any git command, and git checks every object it receives.

The lane's files become blobs, trees and commits in tether's git dir by tether's own
walk (`_lane_files.py`); a branch or a view reaches the person's repository by a fetch
from tether's git dir, never from the lane.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import stat
from typing import TYPE_CHECKING, final

import anyio
import attrs

from .._config import paths
from .._threads import in_thread
from .._untrusted import dir_beneath, kind_words, read_beneath
from ..errors import TetherError
from ..host._spawn import DEVNULL, PIPE, start_process

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = (
    "GIT_BOUND",
    "GitFailed",
    "LaneHead",
    "LaneUnreadable",
    "bounded",
    "clean_env",
    "judge_lane",
    "make_own_git",
    "own_git",
    "own_git_of",
    "read_lane_ref",
    "take_in",
)

GIT_BOUND = 120.0
"""Seconds any one git command tether runs may take; its process group is killed then."""

_REF_LIMIT = 4096
_PACKED_REFS_LIMIT = 16 << 20
_SHA = re.compile(rb"^[0-9a-f]{40}$")
_BRANCH = re.compile(r"^refs/heads/[A-Za-z0-9._/@+-]{1,200}$")
_BUSY = ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD")

IDENTITY = {
    "GIT_AUTHOR_NAME": "tether",
    "GIT_AUTHOR_EMAIL": "tether@localhost",
    "GIT_COMMITTER_NAME": "tether",
    "GIT_COMMITTER_EMAIL": "tether@localhost",
}

OWN_OPTIONS = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "protocol.allow=never",
    "-c",
    "protocol.file.allow=always",
    "-c",
    "safe.directory=*",
)
"""Options of every git command tether runs for itself: no hooks, no fsmonitor, no
automatic gc (which could prune what only a lane's reflog keeps), no signing program,
no attributes or excludes file from the account, only local transport."""


class GitFailed(TetherError):
    """A git command failed; the message has its stderr."""


class LaneUnreadable(GitFailed):
    """The lane's git state is not one tether reads (a link, a pointer, a FIFO...)."""


def own_git_of(lane_dir: Path) -> Path:
    """Tether's git dir of the lane whose directory is `lane_dir` (`lanes/<run>/<lane>`)."""
    return lane_dir.with_name(f"{lane_dir.name}.git")


def own_git(run: str, lane: str) -> Path:
    """Tether's git dir of a lane, in the account's state dir."""
    return paths().state_dir / "lanes" / run / f"{lane}.git"


def clean_env() -> dict[str, str]:
    """The environment of tether's own git.

    No `GIT_*` of the caller's, no config but what the command line and tether's git
    dir say.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(IDENTITY)
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_NO_LAZY_FETCH="1",
        GIT_PROTOCOL_FROM_USER="0",
        GIT_CEILING_DIRECTORIES=str(paths().state_dir.absolute()),
        LC_ALL="C",
    )
    return env


async def bounded(
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    bound: float = GIT_BOUND,
    what: str = "",
) -> bytes:
    """Run `command` to its end within `bound` seconds; its stdout.

    It runs in a session of its own: at the bound (or a cancel) its whole process group
    is killed, so nothing it started outlives it.

    Raises:
        GitFailed: it could not start, exited non-zero or passed the bound.
    """
    what = what or command[0]
    out, err = bytearray(), bytearray()
    try:
        process = start_process(
            command,
            stdin=DEVNULL,
            stdout=PIPE,
            stderr=PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise GitFailed(f"{what} could not run: {exc}") from None

    async def drain(
        stream: anyio.abc.ByteReceiveStream | None, into: bytearray
    ) -> None:
        assert stream is not None
        async for chunk in stream:
            into += chunk
            if len(into) > 256 << 20:
                raise GitFailed(f"{what} printed more than 256 MiB")

    code: int | None = None
    try:
        with anyio.move_on_after(bound):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, process.stdout, out)
                tg.start_soon(drain, process.stderr, err)
            code = await process.wait()
    finally:
        if code is None:
            kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            await process.aclose()
    if code is None:
        raise GitFailed(f"{what} took longer than {bound:g} s and was killed")
    if code != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        raise GitFailed(f"{what} failed: {lines[-1] if lines else f'exit {code}'}")
    return bytes(out)


def kill_group(pid: int) -> None:
    """Kill the process group `pid` leads (a bounded command and what it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def tgit(
    own: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    bound: float = GIT_BOUND,
) -> str:
    """Run `git args` on tether's git dir `own` (no work tree); its stdout, stripped."""
    full = {**clean_env(), "GIT_DIR": str(own), **(env or {})}
    out = await bounded(
        ["git", *OWN_OPTIONS, *args],
        cwd=own,
        env=full,
        bound=bound,
        what=f"git {args[0]} in {own.name}",
    )
    return out.decode("utf-8", "replace").strip()


async def make_own_git(own: Path, person_objects: Path) -> None:
    """Make tether's git dir of a lane (bare, 0700), borrowing the person's objects."""
    if await in_thread(own.is_dir):
        return
    making = own.with_name(f".{own.name}.making")
    await in_thread(shutil.rmtree, making, True)
    await in_thread(_mkdir_private, making)
    await bounded(
        ["git", *OWN_OPTIONS, "init", "-q", "--bare", "--template=", str(making)],
        cwd=making,
        env=clean_env(),
        what="git init",
    )

    def finish() -> None:
        info = making / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "alternates").write_text(f"{person_objects}\n", encoding="utf-8")
        (making / "info").mkdir(exist_ok=True)
        # Nothing a lane's `.gitattributes` says changes the bytes tether keeps.
        (making / "info" / "attributes").write_text(
            "* -text -eol -filter -ident -working-tree-encoding -diff -merge\n",
            encoding="utf-8",
        )
        os.rename(making, own)

    await in_thread(finish)


def _mkdir_private(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir(mode=0o700)


@final
@attrs.frozen
class LaneHead:
    """What a lane's HEAD names, read as data."""

    branch: str | None
    """`refs/heads/...` HEAD is on, or None when detached."""
    commit: str
    """The commit HEAD names."""
    busy: bool
    """A rebase, merge or cherry-pick is in progress."""


def judge_lane(lane: Path, alternates: bytes | None) -> LaneHead:
    """Judge a lane's `.git` by `lstat` and read its HEAD as data (blocking: a thread).

    `alternates` is what tether wrote into its `objects/info/alternates` (None: not
    checked, for a lane made elsewhere).

    Raises:
        LaneUnreadable: the `.git` is not a real folder, or holds a pointer, a link,
            a FIFO or a value tether does not read; the message says which.
    """
    try:
        with dir_beneath(lane) as root:
            mode = os.stat(".git", dir_fd=root, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(mode):
                raise LaneUnreadable(
                    f"its .git is {kind_words(mode)}, not a folder: tether follows no "
                    "gitdir: pointer or link"
                )
            with dir_beneath(root, ".git") as gitdir:
                return _judge_gitdir(gitdir, alternates)
    except LaneUnreadable:
        raise
    except (OSError, ValueError) as exc:
        raise LaneUnreadable(f"its .git cannot be read: {_words(exc)}") from None


def _words(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    return str(exc)


def _exists(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _judge_gitdir(gitdir: int, alternates: bytes | None) -> LaneHead:
    for name in ("commondir", "gitdir"):
        if _exists(gitdir, name):
            raise LaneUnreadable(
                f"its .git holds a {name} pointer; tether follows none"
            )
    if _exists(gitdir, "objects/info/http-alternates"):
        raise LaneUnreadable("its .git holds objects/info/http-alternates")
    if alternates is not None:
        try:
            found = read_beneath(gitdir, "objects/info/alternates", _REF_LIMIT)
        except FileNotFoundError:
            found = b""
        except OSError as exc:
            raise LaneUnreadable(
                f"its objects/info/alternates: {_words(exc)}"
            ) from None
        if found not in (alternates, b""):
            raise LaneUnreadable(
                "its objects/info/alternates is not the one tether wrote"
            )
    try:
        head = read_beneath(gitdir, "HEAD", _REF_LIMIT).strip()
    except OSError as exc:
        raise LaneUnreadable(f"its HEAD: {_words(exc)}") from None
    busy = any(_exists(gitdir, name) for name in _BUSY)
    if _SHA.match(head):
        return LaneHead(branch=None, commit=head.decode(), busy=busy)
    if not head.startswith(b"ref: "):
        raise LaneUnreadable(f"its HEAD is not a commit or a branch: {head[:60]!r}")
    branch = head[5:].decode("utf-8", "replace").strip()
    if not _BRANCH.match(branch) or ".." in branch or "//" in branch:
        raise LaneUnreadable(f"its HEAD names {branch[:80]!r}, not a branch")
    commit = _ref_at(gitdir, branch)
    if commit is None:
        raise LaneUnreadable(f"its branch {branch} has no commit")
    return LaneHead(branch=branch, commit=commit, busy=busy)


def _ref_at(gitdir: int, ref: str) -> str | None:
    try:
        value = read_beneath(gitdir, ref, _REF_LIMIT).strip()
    except FileNotFoundError:
        value = None
    except OSError as exc:
        if exc.errno != errno.ENOTDIR:
            raise LaneUnreadable(f"its ref {ref}: {_words(exc)}") from None
        value = None
    if value is not None:
        if not _SHA.match(value):
            raise LaneUnreadable(f"its ref {ref} is not a commit id: {value[:60]!r}")
        return value.decode()
    try:
        packed = read_beneath(gitdir, "packed-refs", _PACKED_REFS_LIMIT)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LaneUnreadable(f"its packed-refs: {_words(exc)}") from None
    wanted = ref.encode()
    for line in packed.splitlines():
        sha, _, name = line.partition(b" ")
        if name.strip() == wanted and _SHA.match(sha):
            return sha.decode()
    return None


def read_lane_ref(lane: Path, ref: str, alternates: bytes | None) -> str | None:
    """The commit the lane's `ref` names (read as data), or None when it has none.

    Raises:
        LaneUnreadable: as `judge_lane`.
    """
    judge_lane(lane, alternates)
    if not _BRANCH.match(ref):
        raise LaneUnreadable(f"{ref} is not a branch tether reads")
    try:
        with dir_beneath(lane, ".git") as gitdir:
            return _ref_at(gitdir, ref)
    except OSError as exc:
        raise LaneUnreadable(f"its .git cannot be read: {_words(exc)}") from None


async def has_object(own: Path, commit: str) -> bool:
    """Whether tether's git dir (or the person's objects it borrows) has `commit`."""
    try:
        await tgit(own, "cat-file", "-e", f"{commit}^{{commit}}")
    except GitFailed:
        return False
    return True


async def take_in(own: Path, lane: Path, commit: str) -> None:
    """Fetch `commit` and what it needs from the lane's objects into tether's git dir.

    The `upload-pack` runs on a shadow repository tether makes for the fetch: its
    config is tether's, the lane's object folder one of its alternates. Nothing of the
    lane's config, attributes or hooks is read; git checks every object it receives.

    Raises:
        GitFailed: the objects are missing or broken, or the fetch passed its bound.
    """
    if await has_object(own, commit):
        return
    shadow = _tmp() / f"shadow-{os.urandom(6).hex()}"

    def make() -> None:
        (shadow / "objects" / "info").mkdir(mode=0o700, parents=True)
        (shadow / "refs").mkdir()
        (shadow / "HEAD").write_text(f"{commit}\n", encoding="ascii")
        (shadow / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
            "[uploadpack]\n\tallowAnySHA1InWant = true\n",
            encoding="ascii",
        )
        (shadow / "objects" / "info" / "alternates").write_text(
            f"{lane.absolute() / '.git' / 'objects'}\n", encoding="utf-8"
        )

    try:
        await in_thread(make)
        upload = " ".join(["git", *OWN_OPTIONS[:12], "upload-pack"])
        await tgit(
            own,
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-auto-gc",
            "--no-recurse-submodules",
            f"--upload-pack={upload}",
            str(shadow),
            f"+{commit}:refs/tether/lane-head",
        )
    finally:
        await in_thread(shutil.rmtree, shadow, True)


def _tmp() -> Path:
    where = paths().state_dir / "tmp"
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    return where
