"""What the board shows, and where it comes from: a small interface and this account's runs.

The board reads runs through `BoardSource`: the runs of one account with their lanes,
each lane's live line, the stop's timeline, a lane's diff and the digest. `OwnRuns`
reads this account's store and lane logs (what `tether runs` and `tether logs` read);
the records other accounts publish for the person plug in as further sources of the
same shape. Every source is read-only: nothing here writes a store, a log or a git dir
(a run found dead is shown dead, not recorded so).

Whatever an agent wrote (log lines, ledger details, diffs) is data: it leaves here as
text with no control sequence in it (`tether._term.visible`, `_tail.clean_line`); the
page escapes it for HTML.
"""

from __future__ import annotations

import contextlib
import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, final

import attrs

from .._config import paths
from .._term import visible
from ..runs._events import last_line
from ..runs._lane_paths import lane_log
from ..runs._liveness import found_dead
from ..runs._open import default_store_path, open_store, store_url
from ..runs._own_git import GitFailed, own_git, tgit
from ..runs._publish import account_name
from ..runs._tail import LogTail, clean_line
from ..runs._values import ACTIVE_RUN_STATES, RunState

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from ..runs._store import Store
    from ..runs._values import Event, Receipt, RunRow

__all__ = (
    "DIFF_BOUND",
    "BoardSource",
    "LaneCard",
    "OwnRuns",
    "RunCard",
    "Step",
)

_T = TypeVar("_T")

STORE_EVERY = 0.25
"""Seconds a look at the store (runs, a run's lanes and ledger) is reused; a lane's
line is read at each look (one `fstat` when its log did not grow)."""
DIFF_BOUND = 512 * 1024
"""Bytes of a lane's diff shown at most; the rest is cut with a note."""

_TIMELINE = {
    "stop-observed": "stop seen",
    "killed-in-call": "call killed",
    "kill": "agents killed",
    "saved-aside": "saved",
    "save-failed": "save failed",
    "saved": "view made",
    "view-failed": "view failed",
    "held": "lane held",
    "released": "released",
    "lane-halted": "lane halted",
    "halted": "halted",
    "halt-held": "halt-held",
}
"""Ledger rows of a stop's progress, as the timeline names them."""


@final
@attrs.frozen(kw_only=True)
class LaneCard:
    """One lane as the board shows it."""

    id: str
    item: str
    state: str
    stage: str | None
    """The stage started last."""
    line: str | None
    """The last line its agents printed, rendered for a screen."""
    commits: int
    """Commits its agents added."""
    saved_ref: str | None
    work: str | None = None
    """What its work page links as, when not its commits (a published bundle)."""


@final
@attrs.frozen(kw_only=True)
class Step:
    """One step of a stop's timeline."""

    at: float
    """Wall-clock time (seconds since the epoch)."""
    what: str
    """`stop pressed`, `stop seen`, `call ended`, `saved`, `released`, `halted`..."""
    lane: str | None = None
    """The lane's item, when the step is a lane's."""
    detail: str = ""

    @property
    def clock(self) -> str:
        """The step's time of day in UTC, to the millisecond."""
        return datetime.fromtimestamp(self.at, UTC).strftime("%H:%M:%S.%f")[:-3]


@final
@attrs.frozen(kw_only=True)
class RunCard:
    """One run as the board shows it."""

    account: str
    """The account the run works under."""
    id: str
    state: str
    started_at: float
    lanes: tuple[LaneCard, ...] = ()
    timeline: tuple[Step, ...] = ()
    """Empty unless the run took a stop."""
    note: str | None = None
    """Why the run cannot be shown, when it cannot."""

    @property
    def active(self) -> bool:
        """Whether the run still works (its lines and timeline may change)."""
        return self.state in {s.value for s in ACTIVE_RUN_STATES}


class BoardSource(Protocol):
    """The runs of one account, read-only. Every method is short and synchronous."""

    account: str
    """The account's name."""

    def runs(self) -> list[RunCard]:
        """Every run, newest first, without lanes."""

    def run(self, run_id: str) -> RunCard | None:
        """One run with its lanes, their live lines and the stop's timeline."""

    def line(self, run_id: str, lane_id: str) -> str | None:
        """A lane's live line now (cheap: called a few times a second)."""

    def diff(self, run_id: str, lane_id: str) -> str | None:
        """A lane's work as a diff (its agents' commits), bounded; None when none."""

    def digest(self) -> str | None:
        """Today's digest (Markdown), or None."""

    def close(self) -> None:
        """Let go of what the source holds open."""


@final
class OwnRuns:
    """This account's runs: its store of runs, its lane logs and tether's own git."""

    def __init__(
        self,
        store_option: str | None = None,
        *,
        stop_pressed: Callable[[], float | None] | None = None,
    ) -> None:
        """Read the store `store_option` names (as `tether runs --store` does).

        A lane's line is its agent's last event, rendered as the run's live view and
        `tether logs` render it (`tether.runs._events`). `stop_pressed` gives the time
        the standing stop was set, if one stands (the start of a timeline).
        """
        self.account = account_name(os.geteuid())
        self._url = store_url(store_option)
        self._store: Store | None = None
        self._tail = LogTail(render=last_line)
        self._stop_pressed = stop_pressed
        self._looked: dict[str, tuple[float, Any]] = {}
        self._logs: dict[tuple[str, str], Path] = {}

    def _recent(self, key: str, look: Callable[[], _T]) -> _T:
        """What `look()` gave less than `STORE_EVERY` seconds ago, or its answer now."""
        now = time.monotonic()
        kept = self._looked.get(key)
        if kept is not None and now - kept[0] < STORE_EVERY:
            return cast("_T", kept[1])
        found = look()
        self._looked[key] = (now, found)
        return found

    def _open(self) -> Store | None:
        if self._store is None:
            default = str(default_store_path())
            if self._url == default and not os.path.exists(default):
                return None  # never ran: nothing to show, and nothing is made
            self._store = open_store(self._url)
        return self._store

    def close(self) -> None:
        """Close the store."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def _state(self, store: Store, row: RunRow) -> str:
        """Its state; an active run found dead is shown dead (and not recorded so)."""
        if found_dead(store, row):
            return RunState.DEAD.value
        return row.state.value

    def runs(self) -> list[RunCard]:
        """Every run of the store, newest first."""
        return self._recent("", self._runs)

    def _runs(self) -> list[RunCard]:
        store = self._open()
        if store is None:
            return []
        rows = sorted(store.runs(), key=lambda r: r.started_at, reverse=True)
        return [
            RunCard(
                account=self.account,
                id=row.id,
                state=self._state(store, row),
                started_at=row.started_at,
            )
            for row in rows
        ]

    def run(self, run_id: str) -> RunCard | None:
        """One run with its lanes and timeline; the lanes' lines read now."""
        card = self._recent(run_id, lambda: self._run(run_id))
        if card is None:
            return None
        lanes = tuple(
            attrs.evolve(lane, line=self.line(run_id, lane.id)) for lane in card.lanes
        )
        return attrs.evolve(card, lanes=lanes)

    def _run(self, run_id: str) -> RunCard | None:
        """One run as the store has it (its lanes without their lines)."""
        store = self._open()
        row = None if store is None else store.run(run_id)
        if store is None or row is None:
            return None
        events = store.events(run_id)
        receipts = store.receipts(run_id)
        lanes = []
        for lane in store.lanes(run_id):
            stage = lane.stage_name
            lanes.append(
                LaneCard(
                    id=lane.id,
                    item=lane.item,
                    state=lane.state.value,
                    stage=None if stage is None else clean_line(stage),
                    line=None,
                    commits=sum(len(r.commits) for r in receipts if r.lane == lane.id),
                    saved_ref=lane.saved_ref,
                )
            )
        return RunCard(
            account=self.account,
            id=row.id,
            state=self._state(store, row),
            started_at=row.started_at,
            lanes=tuple(lanes),
            timeline=self._timeline(events, receipts, {x.id: x.item for x in lanes}),
        )

    def _timeline(
        self,
        events: Sequence[Event],
        receipts: Sequence[Receipt],
        items: dict[str, str],
    ) -> tuple[Step, ...]:
        seen = next((e.at for e in events if e.kind == "stop-observed"), None)
        if seen is None:
            return ()
        steps = [
            Step(
                at=e.at,
                what=_TIMELINE[e.kind],
                lane=items.get(e.lane or ""),
                detail=clean_line(e.detail),
            )
            for e in events
            if e.kind in _TIMELINE and e.at >= seen
        ]
        steps += [
            Step(
                at=r.at,
                what="call ended",
                lane=r.item,
                detail=clean_line(f"{r.stage}: exit {r.exit_status}"),
            )
            for r in receipts
            if r.at >= seen
        ]
        pressed = self._stop_pressed() if self._stop_pressed is not None else None
        if pressed is not None and pressed <= seen:
            steps.append(Step(at=pressed, what="stop pressed"))
        return tuple(sorted(steps, key=lambda s: s.at))

    def line(self, run_id: str, lane_id: str) -> str | None:
        """The last line of the lane's log, rendered."""
        log = self._logs.get((run_id, lane_id))
        if log is None:
            log = self._logs[run_id, lane_id] = lane_log(run_id, lane_id)
        line = self._tail.last_line(log)
        return None if line is None else clean_line(line)

    def diff(self, run_id: str, lane_id: str) -> str | None:
        """The lane's commits as one diff, from tether's own git dir of the lane."""
        store = self._open()
        if store is None:
            return None
        commits = [
            c for r in store.receipts(run_id) if r.lane == lane_id for c in r.commits
        ]
        if not commits:
            return None
        own = own_git(run_id, lane_id)
        if not own.is_dir():
            return None
        import anyio

        async def show() -> str:
            return await tgit(
                own,
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--text",  # tether's attributes mark every file -diff
                "--stat",
                "--patch",
                f"{commits[0]}^",
                commits[-1],
                bound=10.0,
            )

        try:
            text = anyio.run(show)
        except GitFailed as exc:
            return f"(the diff cannot be shown: {exc})"
        if len(text) > DIFF_BOUND:
            text = text[:DIFF_BOUND] + f"\n[... cut at {DIFF_BOUND} bytes ...]\n"
        return visible(text)

    def digest(self) -> str | None:
        """Today's digest of this account, wherever its runs wrote it."""
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        for where in _digest_places():
            with contextlib.suppress(OSError):
                return visible(_read_bounded(where / f"digest-{day}.md"))
        return None


def _digest_places() -> list[Path]:
    from ..stop import StopStore

    places: list[Path] = []
    with contextlib.suppress(Exception):
        places.append(StopStore.from_setup(create=False).place.uid_dir)
    places.append(paths().state_dir)
    return places


def _read_bounded(path: os.PathLike[str], bound: int = 4 << 20) -> str:
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{os.fspath(path)} is not a regular file")
        return os.read(fd, bound).decode("utf-8", "replace")
    finally:
        os.close(fd)


def standing_stop_at() -> float | None:
    """When the stop standing for this account was set (`st_mtime`), if one stands."""
    from ..errors import TetherError
    from ..stop import ReadOutcome, StopStore

    try:
        reading = StopStore.from_setup(create=False).read()
    except (TetherError, OSError):
        return None
    if reading.outcome is ReadOutcome.STOPPED and reading.set_at is not None:
        return reading.set_at.timestamp()
    return None
