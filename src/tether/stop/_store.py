"""`StopStore` (one read, no memory) and `StopWatch` (a run's reader, with pins).

A run creates a `StopWatch` at its start: it fixes the folder and the person, pins the
identity `(st_dev, st_ino)` of the folder and of the uid directory, and notes the setup
record. A later read that finds another identity, or a setup that names something else,
holds ("the setting changed"). The watch also remembers the last stop it saw, so a stop
that disappears with no lift record is reported as "vanished without a lift".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import final

import attrs

from ..errors import StoreError
from ._lifts import find_lift
from ._read import Identity, Place, ReadOutcome, StopReading, read_place
from ._setup import SetupRecord, account_home, load_setup, own_store, setup_path

__all__ = ("StopStore", "StopWatch")

_Stamp = tuple[int, int, int, int, int, int]


def _ensure_own_store(person_uid: int) -> None:
    """Make `<state>/stop/<uid>/` (mode 0700 levels) when the account's home exists."""
    if person_uid != os.geteuid():
        return
    home = account_home()
    target = own_store() / str(person_uid)
    try:
        relative = target.relative_to(home)
    except ValueError:
        return
    if not os.path.isdir(home):
        return
    path = home
    for part in relative.parts:
        path = path / part
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        except OSError:
            return


@final
@attrs.define(eq=False)
class StopStore:
    """Reads the person's stop: `read()` is one walk, one `open`, one `fstat`."""

    place: Place
    """Where the stop is read and whose stop is honoured."""
    record: SetupRecord | None = None
    """The setup record the place came from; a watch holds when it changes."""

    @classmethod
    def from_setup(cls, record: SetupRecord | None = None) -> StopStore:
        """Build the store of this account's setup (or of `record`).

        With the own store, its directories are made when the account's home exists.

        Raises:
            StoreError: the setup record breaks the owner-only rule or is not valid.
        """
        rec = record if record is not None else load_setup()
        if rec.folder is None:
            _ensure_own_store(rec.person_uid)
        place = Place(
            folder=rec.folder,
            store_dir=rec.store_dir,
            person_uid=rec.person_uid,
            allow_untrusted_fs=rec.allow_untrusted_fs,
        )
        return cls(place=place, record=rec)

    def read(self) -> StopReading:
        """Read the stop now, with every check; never raises."""
        return read_place(self.place).reading

    def watch(self) -> StopWatch:
        """Start a watch for a run: fix the place and pin what it finds now."""
        return StopWatch._start(self)


def _stamp(where: str) -> _Stamp | None:
    try:
        st = os.stat(where, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode, st.st_uid)


@final
@attrs.define(eq=False)
class StopWatch:
    """A run's reader: the place fixed at start, directory identities pinned."""

    store: StopStore
    """The store read."""
    folder_pin: Identity | None = None
    """`(st_dev, st_ino)` of the folder at start (set at the first look that found it)."""
    uid_dir_pin: Identity | None = None
    """`(st_dev, st_ino)` of the uid directory at start (likewise)."""
    _setup_file: str = ""
    _setup_stamp: _Stamp | None = None
    _last_stop: tuple[int, int, int] | None = None

    @classmethod
    def _start(cls, store: StopStore) -> StopWatch:
        # The setup file's place is fixed with the run, like the folder and the person.
        watch = cls(store, setup_file=str(setup_path()))
        if store.record is not None:
            watch._setup_stamp = _stamp(watch._setup_file)
        watch.read()
        return watch

    def _setup_changed(self) -> str | None:
        record = self.store.record
        if record is None:
            return None
        try:
            stamp = _stamp(self._setup_file)
        except OSError as exc:
            return f"the setting changed: cannot look at {self._setup_file}: {exc.strerror}"
        if stamp == self._setup_stamp:
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
        self._setup_stamp = stamp
        return None

    def read(self) -> StopReading:
        """Read the stop now; holds if the place or the setup changed. Never raises."""
        place = self.store.place
        try:
            changed = self._setup_changed()
        except Exception as exc:  # spec 02: the reader never raises
            changed = f"the stop reader failed ({exc!r})"
        if changed is not None:
            return StopReading(
                outcome=ReadOutcome.HOLD,
                reason=changed,
                folder=place.folder,
                person_uid=place.person_uid,
                stop_path=place.stop_path,
            )
        # The filesystem type is judged on every read (one fstatfs): a reading that
        # held must never leave a pin behind that later reads trust instead.
        raw = read_place(place, pins=(self.folder_pin, self.uid_dir_pin), check_fs=True)
        reading = raw.reading
        if reading.outcome is not ReadOutcome.HOLD:
            # Pins come only from a read that passed every check.
            if self.folder_pin is None:
                self.folder_pin = raw.folder_id
            if self.uid_dir_pin is None:
                self.uid_dir_pin = raw.uid_dir_id
        if reading.outcome is ReadOutcome.STOPPED:
            self._last_stop = raw.stop_id
        elif reading.outcome is ReadOutcome.CLEAR and self._last_stop is not None:
            seen, self._last_stop = self._last_stop, None
            if find_lift(place.uid_dir, place.person_uid, seen) is None:
                note = (
                    f"the stop seen at {place.stop_path} vanished without a lift "
                    "(an age cleaner or a hand rm?); it counts as lifted"
                )
                reading = attrs.evolve(reading, notes=(*reading.notes, note))
        return reading

    @property
    def stop_path(self) -> Path:
        """The stop file this watch reads."""
        return self.store.place.stop_path
