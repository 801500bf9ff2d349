"""`StopStore` (one read, no memory) and `StopWatch` (a run's reader, with pins).

A store reads every place whose stop this account honours: the system binding's first
(a bound account honours the person's stop in the bound folder, whatever its own setup
says), then the place of its own setup record when that is another one. Readings combine
so that no place can take a stop away: STOPPED anywhere is STOPPED, else HOLD anywhere
(or a reason known at the start, such as a binding that cannot be checked) is HOLD,
else CLEAR.

A run creates a `StopWatch` at its start: it fixes the places, pins the identity
`(st_dev, st_ino)` of each folder and uid directory, notes the setup record, the system
binding and the mount namespace. A later read that finds another identity, or a setup
or binding that changed, holds ("the setting changed"). The watch also remembers the
last stop it saw, so a stop that disappears is reported as lifted (by whom, when) or as
"vanished without a lift".
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import final

import attrs

from ..errors import StoreError
from ._fast_read import read_plain
from ._lifts import find_lift
from ._mounts import Table, plan, table
from ._notify import Files
from ._read_memo import ReadMemo
from ._reader import Identity, Place, ReadOutcome, StopReading, read_place
from ._reserve import keep_reserve
from ._setup import SetupRecord, account_home, load_setup, own_store, setup_path
from ._statx import root_mount, stamp
from ._system import (
    Binding,
    BindingLook,
    BindingUnchecked,
    binding_path,
    code_writable_reason,
    load_binding,
)

__all__ = ("StopStore", "StopWatch", "combine")


def _who(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _ensure_own_store(person_uid: int) -> None:
    """Make `<state>/stop/<uid>/` (mode 0700 levels) and its reserve (`_reserve`).

    Only when the folder it is made in exists: the account's home, or the state dir's
    parent when the state dir is not under the home (`XDG_STATE_HOME` elsewhere).
    """
    if person_uid != os.geteuid():
        return
    home = account_home()
    target = own_store() / str(person_uid)
    base = home if target.is_relative_to(home) else own_store().parent.parent
    relative = target.relative_to(base)
    if not os.path.isdir(base):
        return
    path = base
    for part in relative.parts:
        path = path / part
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        except OSError:
            return
    # Room for a stop before any tree can fill the file system.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if os.fstat(fd).st_uid == person_uid:
            keep_reserve(fd)
    finally:
        os.close(fd)


def _unmade(reading: StopReading, place: Place, made: bool) -> StopReading:
    """A reading of the account's own store where its folders are not there yet.

    No set-up is one rule (`docs/recorded-stop.md`, "No set-up"): `tether stop` and
    `tether run` make the own store, the home `TETHER_HOME` names included, before they
    read. So a display-only reading (`tether status`, the hook: `made` false) of an
    own store not made yet says what a run would find: no stop, as nothing can stand
    in a folder that is not there. A reading that makes the store (`made`: a run's, a
    verb's) and still finds no home holds: its home went, or could not be made.
    """
    if reading.outcome is not ReadOutcome.HOLD or place.folder is not None:
        return reading
    if "cannot be found" not in (reading.reason or ""):
        return (
            reading  # only a missing folder, never a hung or broken one, is looked at
        )
    home = account_home()
    there = os.path.isdir(home)
    if (
        (there or not os.path.lexists(home))
        and not made
        and place.person_uid == os.geteuid()
    ):
        return attrs.evolve(
            reading,
            outcome=ReadOutcome.CLEAR,
            reason=None,
            notes=(
                *reading.notes,
                f"no stop store yet at {place.uid_dir}: the first run or "
                "`tether stop` makes it",
            ),
        )
    if os.path.lexists(home):
        return reading
    return attrs.evolve(
        reading,
        reason=(
            f"the account's home {home} is not there, so its own store of stops "
            "cannot be looked at: `tether stop` or `tether run` makes it"
        ),
    )


def place_of(record: SetupRecord) -> Place:
    """Where the stop of `record` is read."""
    return Place(
        folder=record.folder,
        store_dir=record.store_dir,
        person_uid=record.person_uid,
        allow_untrusted_fs=record.allow_untrusted_fs,
    )


def bound_place(binding: Binding) -> Place:
    """Where a bound account reads the person's stop."""
    return Place(
        folder=binding.folder,
        store_dir=binding.folder,
        person_uid=binding.person_uid,
        allow_untrusted_fs=binding.allow_untrusted_fs,
    )


def _held(place: Place, reason: str) -> StopReading:
    return StopReading(
        outcome=ReadOutcome.HOLD,
        reason=reason,
        folder=place.folder,
        person_uid=place.person_uid,
        stop_path=place.stop_path,
    )


def combine(
    place: Place, readings: list[StopReading], holds: tuple[str, ...] | list[str] = ()
) -> StopReading:
    """One reading of several places: STOPPED anywhere, else HOLD anywhere, else CLEAR.

    `holds` are reasons that hold whatever the places say (a binding that cannot be
    checked, a setting that changed); `place` is the one a HOLD of theirs names.
    """
    if len(readings) == 1 and not holds:
        return readings[0]  # the common case: one place, nothing else to say
    # A reason known before the places were read (the setting changed) says more than
    # what a place then showed, so it is the HOLD reported first.
    every = [*(_held(place, reason) for reason in holds), *readings]
    base = next((r for r in every if r.outcome is ReadOutcome.STOPPED), None)
    if base is None:
        base = next((r for r in every if r.outcome is ReadOutcome.HOLD), readings[0])
    seen = {n.path for n in base.not_honoured}
    others = [
        n
        for r in every
        if r is not base
        for n in r.not_honoured
        if n.path not in seen and not seen.add(n.path)  # type: ignore[func-returns-value]
    ]
    notes = list(base.notes)
    for r in every:
        if r is base:
            continue
        notes += [n for n in r.notes if n not in notes]
        if r.outcome is ReadOutcome.HOLD and base.outcome is ReadOutcome.STOPPED:
            notes.append(f"also held: {r.reason}")
        elif r.outcome is ReadOutcome.STOPPED:
            notes.append(f"also stopped: {r.stop_path}")
    return attrs.evolve(
        base, not_honoured=(*base.not_honoured, *others), notes=tuple(notes)
    )


@final
@attrs.define(eq=False)
class StopStore:
    """Reads the person's stop: `read()` is one walk, one `open`, one `fstat` a place."""

    place: Place
    """The first place read: the bound one for a bound account, else the own setup's."""
    record: SetupRecord | None = None
    """The account's own setup record; a watch holds when it changes."""
    also: tuple[Place, ...] = ()
    """Further places read (a bound account's own setup, when it names another)."""
    holds: tuple[str, ...] = ()
    """Reasons that hold every reading (a binding that cannot be checked, ...)."""
    binding: Binding | None = None
    """The system binding of this account, if it is bound."""
    system_dir: Path | None = None
    """Where the system binding is read (a constant; tests pass their own)."""
    made: bool = True
    """False for a display-only store (`tether status`) that makes no folder."""

    @classmethod
    def from_setup(
        cls,
        record: SetupRecord | None = None,
        *,
        system_dir: Path | None = None,
        create: bool = True,
    ) -> StopStore:
        """Build the store of this account: the system binding first, then its setup.

        With the own store and `create`, its directories are made when the account's
        home exists; a read for display only (`tether status`) passes `create=False`
        and changes nothing on disk.
        A bound account whose own record is broken still reads the bound stop (the
        broken record holds); so does one whose install it could change.

        Raises:
            StoreError: the setup record breaks the owner-only rule or is not valid,
                and no system binding binds this account.
        """
        holds: list[str] = []
        binding: Binding | None = None
        try:
            system = load_binding(system_dir)
        except BindingUnchecked as exc:
            holds.append(str(exc))
        else:
            binding = None if system is None else system.for_account(os.geteuid())
        try:
            rec: SetupRecord | None = record if record is not None else load_setup()
        except StoreError as exc:
            if binding is None:
                raise
            rec = None
            holds.append(str(exc))
        own = None
        if rec is not None:
            if rec.folder is None and create:
                _ensure_own_store(rec.person_uid)
            own = place_of(rec)
        if binding is None:
            assert own is not None
            return cls(
                place=own,
                record=rec,
                holds=tuple(holds),
                system_dir=system_dir,
                made=create,
            )
        first = bound_place(binding)
        also = () if own is None or own.stop_path == first.stop_path else (own,)
        if (
            why := code_writable_reason(os.geteuid(), binding_path(system_dir))
        ) is not None:
            holds.append(why)
        return cls(
            place=first,
            record=rec,
            also=also,
            holds=tuple(holds),
            binding=binding,
            system_dir=system_dir,
            made=create,
        )

    @property
    def places(self) -> tuple[Place, ...]:
        """Every place read, the first one first."""
        return (self.place, *self.also)

    def read(self) -> StopReading:
        """Read the stop now, with every check; never raises."""
        readings = [
            _unmade(read_place(place).reading, place, self.made)
            for place in self.places
        ]
        return combine(self.place, readings, self.holds)

    def watch(self) -> StopWatch:
        """Start a watch for a run: fix the places and pin what it finds now."""
        return StopWatch._start(self)


def _mount_ns() -> str | None:
    """The mount namespace this process reads in (`mnt:[inode]`), None off Linux."""
    try:
        return os.readlink("/proc/self/ns/mnt")  # cheaper than a stat of the nsfs inode
    except OSError:
        return None


@final
@attrs.define(eq=False)
class _View:
    """One place as a watch sees it: its pins and the last stop seen there."""

    place: Place
    folder_pin: Identity | None = None
    uid_dir_pin: Identity | None = None
    last_stop: tuple[int, int, int] | None = None
    memo: ReadMemo = attrs.Factory(ReadMemo)
    pins: tuple[Identity | None, Identity | None] = (None, None)
    """`(folder_pin, uid_dir_pin)`, made when a pin is set rather than on each read."""

    def quick(self, now: Table) -> StopReading | None:
        """The read when the plain pass answers it and nothing more is to be said.

        None: read with `read` (a pin to set, a lift to report, a pass that did not
        answer), which then makes no plain pass of its own.
        """
        route = self.place.route
        mounts = plan(route.store_text, route.uid_text, now)
        if (
            mounts is None
            or not mounts.local
            or (route.judge_fs and mounts.untrusted is not None)
        ):
            return None
        pins = self.pins
        if pins[0] is None or pins[1] is None:
            return None
        raw = read_plain(route, pins, mounts, self.memo)
        if raw is None:
            return None
        reading = raw.reading
        if reading.outcome is ReadOutcome.STOPPED:
            self.last_stop = raw.stop_id
        elif self.last_stop is not None:
            return None  # a lift to report
        return reading

    def read(self, now: Table, *, plain: bool = True) -> StopReading:
        place = self.place
        # The filesystem type is judged on every read (spec 02: the chain's checks are
        # cache-free); a reading that held never leaves a pin later reads trust.
        raw = read_place(
            place, pins=self.pins, check_fs=True, memo=self.memo, table=now, plain=plain
        )
        reading = raw.reading
        if reading.outcome is not ReadOutcome.HOLD and None in self.pins:
            # Pins come only from a read that passed every check.
            if self.folder_pin is None:
                self.folder_pin = raw.folder_id
            if self.uid_dir_pin is None:
                self.uid_dir_pin = raw.uid_dir_id
            self.pins = (self.folder_pin, self.uid_dir_pin)
        if reading.outcome is ReadOutcome.STOPPED:
            self.last_stop = raw.stop_id
        elif reading.outcome is ReadOutcome.CLEAR and self.last_stop is not None:
            seen, self.last_stop = self.last_stop, None
            lift = find_lift(place.uid_dir, place.person_uid, seen)
            if lift is None:
                note = (
                    f"the stop seen at {place.stop_path} vanished without a lift "
                    "(an age cleaner or a hand rm?); it counts as lifted"
                )
            else:  # row C17
                note = (
                    f"the stop at {place.stop_path} was lifted by "
                    f"{_who(lift.lifted_by_uid)} at {lift.lifted_at.isoformat()}"
                )
            reading = attrs.evolve(reading, notes=(*reading.notes, note))
        return reading


@final
@attrs.define(eq=False)
class StopWatch:
    """A run's reader: the places fixed at start, directory identities pinned."""

    store: StopStore
    """The store read."""
    _views: list[_View] = attrs.Factory(list)
    _setup_file: str = ""
    _setup_key: bytes = b""
    _setup_stamp: tuple[bytes, ...] | None = None
    _binding_file: str = ""
    _binding_look: BindingLook | None = None
    _binding_stamp: tuple[bytes, ...] | tuple[int, ...] | None = None
    _mount_ns: str | None = None
    _root_mount: int | None = None
    _files: Files = attrs.Factory(lambda: Files(()))
    """The setup record and the binding, armed to tell when to look at them."""

    @classmethod
    def _start(cls, store: StopStore) -> StopWatch:
        # The setup file's place is fixed with the run, like the folder and the person.
        # Row D9: the mount of `/` is pinned where the kernel gives it a unique id;
        # each read's walk then checks it, else the namespace link is read each time.
        root = root_mount()
        watch = cls(
            store,
            views=[
                _View(place, memo=ReadMemo(root_mount=root)) for place in store.places
            ],
            root_mount=root,
            setup_file=str(setup_path()),
            binding_file=str(binding_path(store.system_dir)),
        )
        watch._setup_key = os.fsencode(watch._setup_file)
        watch._files = Files((watch._setup_file, watch._binding_file))
        if store.record is not None:
            watch._setup_stamp = stamp(watch._setup_key)
        watch._binding_look = look = BindingLook(store.system_dir)
        watch._binding_stamp = look.stamp()
        watch._mount_ns = _mount_ns()
        watch.read()
        return watch

    @property
    def folder_pin(self) -> Identity | None:
        """`(st_dev, st_ino)` of the first folder, pinned by the first clear look."""
        return self._views[0].folder_pin

    @property
    def uid_dir_pin(self) -> Identity | None:
        """`(st_dev, st_ino)` of the first uid directory, pinned likewise."""
        return self._views[0].uid_dir_pin

    def _setup_changed(self) -> str | None:
        record = self.store.record
        if record is None:
            return None
        try:
            seen = stamp(self._setup_key)
        except OSError as exc:
            return f"the setting changed: cannot look at {self._setup_file}: {exc.strerror}"
        if seen == self._setup_stamp:
            return None
        try:
            now = load_setup()
        except StoreError as exc:
            return f"the setting changed: {exc}"
        if now != record:
            where = "the own store" if now.folder is None else str(now.folder)
            return (
                f"the setting changed: setup now names {where} and uid {now.person_uid}; "
                "restart the run to use it"
            )
        self._setup_stamp = seen
        return None

    def _binding_changed(self, now: Table) -> str | None:
        """Why this account's binding is not the one the run started with, if it is not.

        The file is looked at with one `lstat`; only when that changed is it read
        again, and a rewrite that leaves this account's entry as it was is no change.
        """
        assert self._binding_look is not None
        seen = self._binding_look.stamp(now)
        if seen == self._binding_stamp:
            return None
        changed = (
            f"the setting changed: the system binding {self._binding_file} changed "
            "since this run started; restart the run"
        )
        try:
            system = load_binding(self.store.system_dir)
        except BindingUnchecked as exc:
            return f"{changed} ({exc})"
        bound = None if system is None else system.for_account(os.geteuid())
        if bound != self.store.binding or self.store.holds:
            return changed
        self._binding_stamp = seen
        return None

    def _unchanged(self, now: Table) -> bool:
        """Whether setup, binding and namespace look as at the start.

        `_changed`'s looks without its messages; False also when a look fails. The
        looks are made only when the kernel reported something that may have changed
        the setup record or the binding (`_notify`); then the files are armed again.
        """
        if self._root_mount is None and _mount_ns() != self._mount_ns:
            return False
        files = self._files
        if files.quiet(now[1]):
            return True
        ticket = files.prepare(now)
        if not self._looks_unchanged(now):
            return False
        files.confirm(ticket)
        return True

    def _looks_unchanged(self, now: Table) -> bool:
        try:
            if self.store.record is not None and (
                stamp(self._setup_key) != self._setup_stamp
            ):
                return False
        except OSError:
            return False
        look = self._binding_look
        return look is not None and look.stamp(now) == self._binding_stamp

    def _changed(self, now: Table) -> list[str]:
        found: list[str] = []
        if (setup := self._setup_changed()) is not None:
            found.append(setup)
        if (binding := self._binding_changed(now)) is not None:
            found.append(binding)
        if self._root_mount is None and _mount_ns() != self._mount_ns:
            # Row D9: a reader moved into another mount namespace may see a folder
            # that someone mounted over; only the namespace it started in counts.
            found.append(
                "the setting changed: this reader now runs in another mount namespace "
                "than the one its run started in"
            )
        return found

    def read(self) -> StopReading:
        """Read the stop now; holds if a place or the setting changed. Never raises."""
        try:
            # One look at the mount table for the whole read: every place and the
            # binding are planned on it.
            now = table()
            views = self._views
            if len(views) == 1 and not self.store.holds and self._unchanged(now):
                quick = views[0].quick(now)  # as the read before found it: `_fast_read`
                if quick is not None:
                    return quick
            changed = self._changed(now)
            if len(views) == 1 and not changed and not self.store.holds:
                return views[0].read(now, plain=False)  # one place, nothing else to say
            holds = [*self.store.holds, *changed]
            readings = [view.read(now) for view in views]
            return combine(self.store.place, readings, holds)
        except Exception as exc:  # spec 02: the reader never raises
            return _held(self.store.place, f"the stop reader failed ({exc!r})")

    @property
    def stop_path(self) -> Path:
        """The stop file this watch reads first."""
        return self.store.place.stop_path
