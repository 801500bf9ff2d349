"""What a run publishes for the person, and how the person reads it (spec 03, "The person's seat").

A run under an agents' account bound to a person (`tether setup --system`) publishes
into that account's own directory of the shared stop folder, `<folder>/<account uid>/`
(owned by the account, mode 0755: no account writes another's):

- `digest-YYYY-MM-DD.md`: the dated digest (`_digest.write_digest`);
- `runs/<run>/status.json`: the status record (`status_record`): the run, its lanes,
  the stage each is in, and a stop's progress with times (seen, each agent's call
  ended, each lane saved, claims released, halted);
- `runs/<run>/lines/<lane>.txt`: the lane log's last lines as `tether logs` prints them
  (`log_lines`);
- `runs/<run>/bundles/<lane>.bundle`: the lane's branch and saved view as a git bundle,
  made by tether's own git dir of the lane (`_own_git`), never by the lane's.

The directories are made and opened by `_pubdir`. Every file is written atomically
(temp, fsync, rename, fsync of the directory) with mode 0644, and bounded: a record's
size, the lines kept, a bundle's size, the runs kept (`RUNS_KEPT`). The record is
rewritten at each ledger row (`Publisher.changed`, coalesced) and every few seconds while
the run works; its final state only with its bundles, so a person who reads "halted" can
fetch the work at once.

The person's side reads it with the care of the stop file (spec 02): the folder rule is
walked from `/`, each directory below is opened `O_NOFOLLOW` and judged by `fstat`
(owned by the account, writable by no one else), each file opened `O_NOFOLLOW |
O_NONBLOCK`, type-checked first, judged by `fstat` on that one descriptor (owner, mode,
size) and read up to a bound, within a time bound on mounts that may not answer. What is
read is data: its shape is checked, its text shown through `tether._term.visible`.

The reader's API, for `tether status`, `runs`, `stop --wait`, `fetch` and the board:

- `seats()`: the accounts bound to honour this person's stop (`Seat`);
- `published_runs(seat)`: their status records, newest first;
- `read_text(seat, name)`: a published text (`digest_name(day)`, `lines_name(run, lane)`);
- `copy_bundle(seat, run, lane, into)`: a lane's bundle copied into a file of the
  person's.

Nothing here acts on what it reads: stop, lift and take-over stay the person's verbs.

`PublishUnreadable` says why something could not be read.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import re
import shutil
import stat
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import anyio
import attrs

from .._fs import write_atomic_at
from .._term import visible
from .._threads import in_thread
from .._untrusted import kind_words, open_regular_at
from ..errors import TetherError
from ..stop._bounded import Hung, Progress
from ..stop._folder import DIR_FLAGS, RuleBroken, open_folder
from ..stop._mounts import plan as mount_plan
from ..stop._reader import READ_BOUND, within_bound
from ..stop._system import BindingUnchecked, load_binding
from ._events import render_lines
from ._pubdir import BUNDLE_BOUND, OWN_DIR_FLAGS, open_own_dir, sub_dir

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    Bundler = Callable[..., Awaitable[dict[str, Any] | None]]
    """`_bundle.make_bundle`'s shape: publishes a lane's bundle, says what it holds."""

    from ..stop import StopWatch
    from ._store import Store
    from ._values import Event, LaneRow

__all__ = (
    "BUNDLE_BOUND",
    "LINES_BOUND",
    "RECORD_BOUND",
    "RUNS_KEPT",
    "PublishUnreadable",
    "Publisher",
    "Seat",
    "account_name",
    "copy_bundle",
    "digest_name",
    "lines_name",
    "log_lines",
    "open_own_dir",
    "publish_dir",
    "published_runs",
    "read_text",
    "seats",
    "status_record",
    "sub_dir",
)

RECORD_BOUND: Final = 1 << 20
"""Bytes a status record may hold (a record larger is not written, nor read)."""
LINES_BOUND: Final = 64 << 10
"""Bytes of a lane log's last lines published."""
DIGEST_BOUND: Final = 4 << 20
"""Bytes of a digest the person's side reads."""
RUNS_KEPT: Final = 50
"""Runs an account keeps published; older run directories are removed."""
RUNS_SHOWN: Final = 200
"""Run directories the person's side looks at, at most."""
FINAL_STATES: Final = frozenset({"halted", "halt-held", "done", "dead", "taken-over"})
"""Run states after which a run does nothing more."""
BUNDLE_TIME: Final = 60.0
"""Seconds a bundle's copy may take on a mount that may not answer."""

_VERSION: Final = 1
_OTHERS_WRITE: Final = stat.S_IWGRP | stat.S_IWOTH
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
_BEAT: Final = 10.0
"""Seconds between rewrites of a running run's record when nothing changed."""


class PublishUnreadable(TetherError):
    """What an account published cannot be read as published; the message says why."""


def _iso(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


def account_name(uid: int) -> str:
    """The account's name (`uid N` when the system knows none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def digest_name(day: str) -> str:
    """The published digest of `day` (`YYYY-MM-DD`), relative to an account's directory."""
    return f"digest-{day}.md"


def lines_name(run: str, lane: str) -> str:
    """A lane's published lines, relative to an account's directory."""
    return f"runs/{run}/lines/{lane}.txt"


def log_lines(data: bytes) -> str:
    """A lane log's bytes as lines a person reads: what `tether logs` prints.

    Each event of the agent's stream is one rendered line (`_events.render_lines`),
    every control sequence made visible text.
    """
    lines = render_lines(data.decode("utf-8", "replace"))
    return "".join(f"{line}\n" for line in lines)


# -- the running account's side ------------------------------------------------------


def publish_dir(watch: StopWatch) -> Path | None:
    """This account's directory of the shared folder, when it publishes for a person.

    None when the stop is the account's own (no shared folder) or the person is this
    account itself (it reads its own runs).
    """
    place = watch.store.place
    if place.folder is None or place.person_uid == os.geteuid():
        return None
    return place.store_dir / str(os.geteuid())


def _stop_progress(events: list[Event], lanes: list[LaneRow]) -> dict[str, Any] | None:
    """The stop's progress: seen, each agent's call ended, each lane saved, released."""
    seen = next((e for e in events if e.kind == "stop-observed"), None)
    if seen is None:
        return None
    before = [e for e in events if e.seq < seen.seq]
    after = [e for e in events if e.seq > seen.seq]
    shown: list[dict[str, Any]] = []
    for lane in lanes:
        mine = [e for e in before if e.lane == lane.id]
        last_start = max((e.seq for e in mine if e.kind == "stage-start"), default=None)
        in_call = last_start is not None and not any(
            e.seq > last_start and e.kind in ("receipt", "killed-in-call") for e in mine
        )
        later = [e for e in after if e.lane == lane.id]

        def first(*kinds: str, of: list[Event] = later) -> str | None:
            return _iso(next((e.at for e in of if e.kind in kinds), None))

        shown.append(
            {
                "item": lane.item,
                "lane": lane.id,
                "in_call": in_call,
                "call_ended_at": first("receipt", "killed-in-call")
                if in_call
                else None,
                "saved_at": first("saved-aside"),
                "released_at": first("released"),
                "halted_at": first("lane-halted", "held"),
                "done_at": first("lane-done"),
            }
        )
    end = next(
        (
            e
            for e in after
            if e.lane is None and e.kind in ("halted", "halt-held", "killed")
        ),
        None,
    )
    return {
        "seen_at": _iso(seen.at),
        "detail": seen.detail,
        "lanes": shown,
        "halted_at": None if end is None else _iso(end.at),
    }


def status_record(
    store: Store, run: str, *, bundles: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The status record of `run` as published (see the module docstring).

    The shape: `{"version", "id", "account", "account_uid", "state", "started_at",
    "updated_at", "host", "pid", "plan", "repo", "takeover_of", "lanes": [{"item",
    "lane", "state", "stage", "started_at", "branch", "saved_ref", "saved_commit",
    "note", "lines", "bundle"}], "stop": null | {"seen_at", "detail", "halted_at",
    "lanes": [{"item", "lane", "in_call", "call_ended_at", "saved_at",
    "released_at", "halted_at", "done_at"}]}}`: a lane that finished its last stage
    as the stop came is done, not saved.
    """
    row = store.run(run)
    if row is None:
        raise PublishUnreadable(f"no run {run} in {store.url}")
    lanes = store.lanes(run)
    events = store.events(run)
    bundles = bundles or {}
    shown = []
    for lane in lanes:
        mine = [e for e in events if e.lane == lane.id]
        opened = next((e.at for e in mine if e.kind == "lane-open"), None)
        shown.append(
            {
                "item": lane.item,
                "lane": lane.id,
                "state": lane.state.value,
                "stage": lane.stage_name,
                "started_at": _iso(opened),
                "branch": lane.branch,
                "saved_ref": lane.saved_ref,
                "saved_commit": lane.saved_commit,
                "note": lane.note,
                "lines": lines_name(run, lane.id),
                "bundle": bundles.get(lane.id),
            }
        )
    uid = os.geteuid()
    return {
        "version": _VERSION,
        "id": row.id,
        "account": account_name(uid),
        "account_uid": uid,
        "state": row.state.value,
        "started_at": _iso(row.started_at),
        "updated_at": _iso(time.time()),
        "host": row.host,
        "pid": row.pid,
        "plan": row.plan,
        "repo": row.repo,
        "takeover_of": row.takeover_of,
        "lanes": shown,
        "stop": _stop_progress(events, lanes),
    }


def _log_tail(path: Path) -> bytes:
    """The last `LINES_BOUND` bytes of a lane's log (its own file), from a line's start."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - LINES_BOUND)
        data = os.pread(fd, LINES_BOUND, start)
    finally:
        os.close(fd)
    if start and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]
    return data


@final
class Publisher:
    """Publishes one run for the person: `changed()` at each record, `serve()` beside it.

    `changed()` only marks the record stale (it is called from the run loop at every
    ledger row); `serve()` writes at most every `every` seconds, and every `_BEAT`
    seconds while the run works (its lines grow without a row). `finish()` writes the
    last record, every bundle and the lines once the run has ended.
    """

    def __init__(
        self,
        root: Path,
        person_uid: int,
        store: Store,
        run: str,
        *,
        lane_log: Callable[[str], Path],
        repo: Path,
        bundler: Bundler | None = None,
        every: float = 0.2,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.root = root
        self.person_uid = person_uid
        self.store = store
        self.run = run
        self.lane_log = lane_log
        self.repo = repo
        self.bundler = bundler
        self.every = every
        self.say = say
        self._dirty = True
        self._written = 0.0
        self._sizes: dict[str, int] = {}
        self._bundles: dict[str, dict[str, Any]] = {}
        self._failed: str | None = None

    def changed(self) -> None:
        """A record of the run changed: publish it soon."""
        self._dirty = True

    async def serve(self) -> None:
        """Publish while the run works (cancelled when it ends)."""
        await in_thread(self._prune)
        while True:
            if self._dirty or time.monotonic() - self._written >= _BEAT:
                await self.publish()
            await anyio.sleep(self.every)

    async def publish(self, *, final: bool = False) -> None:
        """Write the record (and the lanes' lines, their bundles when `final`) now.

        A run's final state (halted, done, ...) is published only with `final`, with
        its bundles: once the person reads it, the work is there to fetch.
        """
        self._dirty = False
        self._written = time.monotonic()
        try:
            if final:
                await self._make_bundles()
            record = status_record(self.store, self.run, bundles=self._bundles)
            if not final and record["state"] in FINAL_STATES:
                return
            logs = {
                lane["lane"]: self.lane_log(lane["lane"]) for lane in record["lanes"]
            }
            await in_thread(self._write, record, logs, final)
        except Exception as exc:  # publishing never ends a run: it says why, once
            why = f"cannot publish run {self.run} for the person in {self.root}: {exc}"
            if why != self._failed and self.say is not None:
                self.say(why)
            self._failed = why

    async def finish(self) -> None:
        """The run ended: its last record, the lanes' bundles and lines."""
        await self.publish(final=True)

    def _write(
        self, record: dict[str, Any], logs: dict[str, Path], final: bool
    ) -> None:
        data = json.dumps(record, indent=1, sort_keys=True).encode()
        if len(data) > RECORD_BOUND:
            raise OSError(
                errno.EFBIG, f"its record is larger than {RECORD_BOUND} bytes"
            )
        fds: list[int] = []
        try:
            fds.append(open_own_dir(self.root, self.person_uid))
            fds.append(sub_dir(fds[-1], "runs", self.root / "runs"))
            fds.append(sub_dir(fds[-1], self.run, self.root / "runs" / self.run))
            lines = sub_dir(fds[-1], "lines", self.root / "runs" / self.run / "lines")
            fds.append(lines)
            for lane, path in logs.items():
                try:
                    size = os.stat(path).st_size
                except FileNotFoundError:
                    size = 0
                if not final and self._sizes.get(lane) == size:
                    continue
                write_atomic_at(
                    lines,
                    f"{lane}.txt",
                    log_lines(_log_tail(path)).encode(),
                    mode=0o644,
                )
                self._sizes[lane] = size
            write_atomic_at(fds[2], "status.json", data, mode=0o644)
        finally:
            for fd in reversed(fds):
                os.close(fd)

    def _prune(self) -> None:
        """Keep the newest `RUNS_KEPT` run directories of this account (by descriptor)."""
        fds: list[int] = []
        with contextlib.suppress(OSError):
            fds.append(open_own_dir(self.root, self.person_uid))
            fds.append(sub_dir(fds[-1], "runs", self.root / "runs"))
            with os.scandir(fds[-1]) as entries:
                found = sorted(
                    (entry.stat(follow_symlinks=False).st_mtime, entry.name)
                    for entry in entries
                    if entry.is_dir(follow_symlinks=False) and entry.name != self.run
                )
            for _, name in found[: max(0, len(found) - RUNS_KEPT + 1)]:
                shutil.rmtree(name, dir_fd=fds[-1], ignore_errors=True)
        for fd in reversed(fds):
            os.close(fd)

    async def _make_bundles(self) -> None:
        if self.bundler is None:
            return
        for lane in self.store.lanes(self.run):
            if lane.state.value not in ("done", "halted", "saved"):
                continue
            try:
                made = await self.bundler(
                    self.root,
                    self.person_uid,
                    run=self.run,
                    lane=lane,
                    repo=self.repo,
                )
            except (OSError, TetherError) as exc:
                self._bundles[lane.id] = {"error": str(exc)}
                continue
            if made is not None:
                self._bundles[lane.id] = made


# -- the person's side ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Seat:
    """An account whose runs honour this person's stop, and where it publishes."""

    account_uid: int
    """The agents' account."""
    account: str
    """Its name (from the system, never from what it published)."""
    person_uid: int
    """The person."""
    folder: Path
    """The shared folder."""

    @property
    def dir(self) -> Path:
        """The account's directory of the folder."""
        return self.folder / str(self.account_uid)


def seats(
    person_uid: int | None = None, *, system_dir: Path | None = None
) -> list[Seat]:
    """The accounts bound (system binding) to honour `person_uid`'s stop (default: this account's).

    Raises:
        PublishUnreadable: the system binding cannot be checked.
    """
    person = os.geteuid() if person_uid is None else person_uid
    try:
        binding = load_binding(system_dir)
    except BindingUnchecked as exc:
        raise PublishUnreadable(str(exc)) from None
    if binding is None:
        return []
    return [
        Seat(
            account_uid=b.account_uid,
            account=account_name(b.account_uid),
            person_uid=person,
            folder=b.folder,
        )
        for b in binding.bindings
        if b.person_uid == person
    ]


def _judge_theirs(st: os.stat_result, seat: Seat, where: Path, *, folder: bool) -> None:
    if folder != stat.S_ISDIR(st.st_mode) or not (folder or stat.S_ISREG(st.st_mode)):
        raise OSError(errno.EINVAL, f"{where} is {kind_words(st.st_mode)}")
    if st.st_uid != seat.account_uid:
        raise OSError(
            errno.EPERM,
            f"{where} is owned by uid {st.st_uid}, not by {seat.account} "
            f"(uid {seat.account_uid}): not read",
        )
    if st.st_mode & _OTHERS_WRITE:
        raise OSError(errno.EPERM, f"{where} is writable by others: not read")


def _open_parts(seat: Seat, parts: list[str], progress: Progress | None) -> list[int]:
    """Descriptors of the folder, the account's directory and `parts` (directories)."""
    try:
        fds = [open_folder(seat.folder, seat.person_uid, progress=progress)]
    except RuleBroken as exc:
        raise OSError(errno.EPERM, str(exc)) from None
    try:
        where = seat.folder
        for name in (str(seat.account_uid), *parts):
            where = where / name
            if progress is not None:
                progress.where = str(where)
            fds.append(os.open(name, DIR_FLAGS, dir_fd=fds[-1]))
            _judge_theirs(os.fstat(fds[-1]), seat, where, folder=True)
    except BaseException:
        for fd in reversed(fds):
            os.close(fd)
        raise
    return fds


def _split(name: str) -> list[str]:
    parts = name.split("/")
    if not parts or any(not _NAME.match(p) for p in parts):
        raise PublishUnreadable(f"{name!r} is not a name tether publishes")
    return parts


def _bounded_read(seat: Seat, what: str, fn: Callable[[Progress | None], Any]) -> Any:
    try:
        return within_bound(
            mount_plan(str(seat.folder), str(seat.dir)),
            ("published", seat.dir),
            fn,
            bound=READ_BOUND,
        )
    except Hung as exc:
        raise PublishUnreadable(f"{what} of {seat.account} hung: {exc}") from None
    except OSError as exc:
        text = exc.strerror or str(exc)
        raise PublishUnreadable(f"{what} of {seat.account}: {text}") from None


def _read_at(dir_fd: int, name: str, seat: Seat, where: Path, limit: int) -> bytes:
    fd = open_regular_at(dir_fd, name)
    try:
        st = os.fstat(fd)
        _judge_theirs(st, seat, where, folder=False)
        if st.st_size > limit:
            raise OSError(
                errno.EFBIG, f"{where} is larger than {limit} bytes: not read"
            )
        data = os.read(fd, limit + 1)
        if len(data) > limit:
            raise OSError(
                errno.EFBIG, f"{where} is larger than {limit} bytes: not read"
            )
        return data
    finally:
        os.close(fd)


def read_text(seat: Seat, name: str, *, limit: int = DIGEST_BOUND) -> str | None:
    """A text the account published (`digest_name(day)`, `lines_name(run, lane)`).

    None when it is not there. Control sequences are made visible text.

    Raises:
        PublishUnreadable: it, or a directory above it, is not as the account publishes
            (a link, another owner, writable by others, too large), or the read hung.
    """
    parts = _split(name)

    def read(progress: Progress | None) -> bytes | None:
        try:
            fds = _open_parts(seat, parts[:-1], progress)
        except FileNotFoundError:
            return None
        try:
            return _read_at(fds[-1], parts[-1], seat, seat.dir / name, limit)
        except FileNotFoundError:
            return None
        finally:
            for fd in reversed(fds):
                os.close(fd)

    data = _bounded_read(seat, name, read)
    return None if data is None else visible(data.decode("utf-8", "replace"))


def _visible(value: Any) -> Any:
    """`value` with every control sequence in its texts made visible (it is data)."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, list):
        return [_visible(v) for v in value]
    if isinstance(value, dict):
        return {visible(str(k)): _visible(v) for k, v in value.items()}
    return value


def _check_record(data: bytes, seat: Seat, where: str) -> dict[str, Any]:
    try:
        record = json.loads(data)
    except ValueError as exc:
        raise PublishUnreadable(f"{where}: not a status record: {exc}") from None
    if not isinstance(record, dict) or record.get("version") != _VERSION:
        raise PublishUnreadable(f"{where}: not a status record tether knows")
    lanes = record.get("lanes")
    if not isinstance(record.get("id"), str) or not isinstance(lanes, list):
        raise PublishUnreadable(f"{where}: not a status record (id, lanes)")
    if not all(isinstance(x, dict) for x in lanes):
        raise PublishUnreadable(f"{where}: its lanes are not records")
    record = dict(_visible(record))
    # Who published it is the directory's owner, whatever the record says.
    record["account"] = seat.account
    record["account_uid"] = seat.account_uid
    return record


def published_runs(seat: Seat, *, limit: int = RUNS_SHOWN) -> list[dict[str, Any]]:
    """The status records `seat`'s account published, newest first (see `status_record`).

    A record that cannot be read is left out and named in the `unread` list of the
    record shaped `{"id": ..., "error": ...}` in its place.

    Raises:
        PublishUnreadable: the account's directory cannot be read as published.
    """

    def read(progress: Progress | None) -> list[tuple[str, bytes | str]]:
        try:
            fds = _open_parts(seat, ["runs"], progress)
        except FileNotFoundError:
            return []
        try:
            listing = os.open(".", OWN_DIR_FLAGS, dir_fd=fds[-1])
            try:
                names = sorted(os.listdir(listing), reverse=True)[:limit]
            finally:
                os.close(listing)
            found: list[tuple[str, bytes | str]] = []
            for name in names:
                if not _NAME.match(name):
                    continue
                where = seat.dir / "runs" / name
                try:
                    sub = os.open(name, DIR_FLAGS, dir_fd=fds[-1])
                except OSError as exc:
                    found.append((name, f"{where}: {exc.strerror}"))
                    continue
                try:
                    _judge_theirs(os.fstat(sub), seat, where, folder=True)
                    data = _read_at(
                        sub, "status.json", seat, where / "status.json", RECORD_BOUND
                    )
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    found.append((name, exc.strerror or str(exc)))
                    continue
                finally:
                    os.close(sub)
                found.append((name, data))
            return found
        finally:
            for fd in reversed(fds):
                os.close(fd)

    records: list[dict[str, Any]] = []
    for name, data in _bounded_read(seat, "the runs", read):
        if isinstance(data, str):
            records.append({"id": name, "error": data, "account": seat.account})
            continue
        try:
            records.append(_check_record(data, seat, str(seat.dir / "runs" / name)))
        except PublishUnreadable as exc:
            records.append({"id": name, "error": str(exc), "account": seat.account})
    records.sort(key=lambda r: str(r.get("started_at") or ""), reverse=True)
    return records


def copy_bundle(seat: Seat, run: str, lane: str, into: Path) -> None:
    """Copy a lane's published bundle into `into`, a new file of this account's.

    The bundle is read by one descriptor (owner and mode judged, `BUNDLE_BOUND`).

    Raises:
        PublishUnreadable: it is not there or not as the account publishes it.
    """
    parts = _split(f"runs/{run}/bundles/{lane}.bundle")
    where = seat.dir / "/".join(parts)

    def copy(progress: Progress | None) -> None:
        fds = _open_parts(seat, parts[:-1], progress)
        try:
            fd = open_regular_at(fds[-1], parts[-1])
        finally:
            for dfd in reversed(fds):
                os.close(dfd)
        try:
            st = os.fstat(fd)
            _judge_theirs(st, seat, where, folder=False)
            if st.st_size > BUNDLE_BOUND:
                raise OSError(
                    errno.EFBIG, f"{where} is larger than {BUNDLE_BOUND} bytes"
                )
            out = os.open(
                into,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
            try:
                left = BUNDLE_BOUND + 1
                while left > 0:
                    chunk = os.read(fd, min(left, 1 << 20))
                    if not chunk:
                        break
                    left -= len(chunk)
                    os.write(out, chunk)
                if left <= 0:
                    raise OSError(
                        errno.EFBIG, f"{where} grew past {BUNDLE_BOUND} bytes"
                    )
            finally:
                os.close(out)
        finally:
            os.close(fd)

    try:
        within_bound(
            mount_plan(str(seat.folder), str(seat.dir)),
            ("bundle", seat.dir),
            copy,
            bound=BUNDLE_TIME,
        )
    except Hung as exc:
        raise PublishUnreadable(f"the bundle {where} hung: {exc}") from None
    except OSError as exc:
        raise PublishUnreadable(f"the bundle {where}: {exc.strerror or exc}") from None
