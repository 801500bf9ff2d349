"""The run: lanes through stages, the stop read before every move, the halt in order.

Before every move (opening a lane, handing out a stage, starting an agent) the run reads
the stop through its `StopWatch` and also reads it every poll interval on its own:

- `CLEAR`: the move is made;
- `HOLD`: no move, nothing let go; the reason is recorded and shown, and the read is
  repeated every poll interval;
- `STOPPED`: the halt, in spec 03's order: no new move; an agent in a call finishes it
  and its receipt is recorded; each lane whose tree is gone is saved aside; only then
  are its claims released and the lane halted. A save that fails holds that lane and
  its claims; the save is retried for a while, then the run exits with the lane held.

A halted run stays halted: nothing here resumes it (a take-over is a new run, made
by `Run.start` with the `Takeover` of the old one: it claims those items first). The
second Ctrl-C is `kill()`: every agent tree is killed at once, the worktrees are saved
aside within a bound, and claims are left for the restart path.

The run owns its lanes: it opens each from its claim, keeps the registry of open lanes
(what the heartbeat renews and the live view shows) and lets each go as its `LaneEnd`
says.
"""

from __future__ import annotations

import collections
import enum
import os
import types
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import assert_never, final

import anyio
import attrs

from .._accounts import who
from ..errors import Refused, StoreError
from ..stop import ReadOutcome, StopReading, StopWatch, stop_reason
from ._clock import RunClock, WallClock
from ._lane_life import Lane, LaneEnd
from ._liveness import here, process_start
from ._plan import Plan
from ._store import Store, crash_point
from ._takeover import Takeover, newest_saved_lane
from ._values import (
    Claim,
    LaneRow,
    LaneStatistics,
    RunRow,
    RunState,
    RunStatistics,
    StaleClaim,
)

__all__ = ("ExitCode", "Run")


class ExitCode(enum.IntEnum):
    """How `tether run` ends (spec 03, fixed)."""

    DONE = 0
    """Every item done."""
    FAILED = 1
    """A failure (an agent failed a stage, or the run could not go on)."""
    REFUSED = 2
    """Refused or a usage error."""
    HALTED = 3
    """Halted by a stop or a Ctrl-C."""
    HALT_HELD = 4
    """Halted with a lane held (its save failed)."""
    KILLED = 130
    """Killed by a second Ctrl-C."""


_Say = Callable[[str], None]


@final
@attrs.define(eq=False)
class Run:
    """One run of a plan, made and recorded by `Run.start`; `execute()` works to its end."""

    plan: Plan
    """What to do."""
    store: Store
    """Claims and ledger."""
    watch: StopWatch
    """The stop, read before every move."""
    say: _Say
    """Where progress lines go."""
    id: str
    """`run_...`."""
    takeover: Takeover | None = None
    """The take-over this run makes (its items are claimed first), if any."""
    poll: float = 2.0
    """Seconds between reads of the stop."""
    heartbeat: float = 10.0
    """Seconds between claim renewals."""
    lease: float = 60.0
    """Seconds a claim lives without a renewal."""
    save_retry: float = 10.0
    """Seconds a failed save is retried before the run ends with the lane held."""
    follow: bool = False
    """When nothing is left to claim, wait for new queue items instead of ending."""
    clock: RunClock = attrs.field(factory=WallClock)
    """The wall clock usage windows are judged and waited on."""
    on_change: Callable[[], None] | None = None
    """Called at every record of the run (a ledger row, a state): the publisher's mark."""
    _halt: anyio.Event = attrs.field(factory=anyio.Event)
    _stop_hold: str | None = None
    """Why the last read of the stop held the run (it is `RunState.HELD`); None while
    it reads clear."""
    _killed: bool = False
    _lanes: dict[str, Lane] = attrs.field(factory=dict)
    """The open lanes, by lane id; the run adds and removes them (`_lane`)."""
    _after_halt: list[Callable[[], Awaitable[None]]] = attrs.field(factory=list)
    _unopened: set[str] = attrs.field(factory=set)
    _ends: collections.Counter[LaneEnd] = attrs.field(factory=collections.Counter)
    """How many lanes ended each way (`LaneEnd`): the exit code is judged on it."""
    _failed_items: list[str] = attrs.field(factory=list)
    _windows: dict[str, float] = attrs.field(factory=dict)
    """Per model of builtin stages: when its usage window resets (it is at 95 %)."""

    @property
    def halting(self) -> bool:
        """Whether a stop (or Ctrl-C) was taken."""
        return self._halt.is_set()

    @property
    def killed(self) -> bool:
        """Whether `kill()` was called (a second Ctrl-C)."""
        return self._killed

    @property
    def halt(self) -> anyio.Event:
        """Set when the run takes a stop (or a Ctrl-C)."""
        return self._halt

    @property
    def lanes(self) -> Mapping[str, Lane]:
        """The open lanes, by lane id (a read-only view)."""
        return types.MappingProxyType(self._lanes)

    def window(self, model: str) -> float:
        """When `model`'s usage window resets (it is at 95 %); 0.0 when not known."""
        return self._windows.get(model, 0.0)

    def note_window(self, model: str, reset: float) -> None:
        """Record when `model`'s usage window resets (its stages wait for it)."""
        self._windows[model] = reset

    @property
    def _failed(self) -> bool:
        return bool(self._ends[LaneEnd.FAILED] or self._ends[LaneEnd.NOT_OPENED])

    @property
    def _any_lane_held(self) -> bool:
        """Whether a lane's save failed and the lane is kept (`LaneEnd.HELD`)."""
        return bool(self._ends[LaneEnd.HELD])

    def agents_in_call(self) -> int:
        """How many agents are running now."""
        return sum(1 for lane in self._lanes.values() if lane.call is not None)

    def statistics(self) -> RunStatistics:
        """What each open lane is doing now: its stage, the time in it, its log."""
        now = self.clock.now()
        return RunStatistics(
            lanes=tuple(
                LaneStatistics(
                    item=lane.row.item,
                    lane=lane.row.id,
                    stage=lane.working,
                    elapsed=max(0.0, now - lane.since),
                    log=self.log_path(lane.row.id),
                    note=lane.note,
                )
                for lane in self._lanes.values()
            ),
            stop_hold=self._stop_hold,
            halting=self.halting,
        )

    @classmethod
    def start(
        cls,
        plan: Plan,
        store: Store,
        watch: StopWatch,
        say: _Say,
        *,
        takeover: Takeover | None = None,
        poll: float | None = None,
        save_retry: float = 10.0,
        follow: bool = False,
        clock: RunClock | None = None,
    ) -> Run:
        """Record a new run of `plan` (state running) and say `run <id>`.

        With `takeover`, what the restart path did is said next, and the run taken
        over is marked so; the new run claims its items first (`execute`).

        Raises:
            Refused: another take-over took the same run first (this run then ends
                done, having claimed nothing).
        """
        from .._ids import new_id

        run = cls(
            plan=plan,
            store=store,
            watch=watch,
            say=say,
            id=new_id("run"),
            takeover=takeover,
            poll=plan.poll if poll is None else poll,
            heartbeat=plan.heartbeat,
            lease=plan.lease,
            save_retry=save_retry,
            follow=follow,
            clock=WallClock() if clock is None else clock,
        )
        store.create_run(
            RunRow(
                id=run.id,
                state=RunState.RUNNING,
                host=here(),
                pid=os.getpid(),
                pid_start=process_start(),
                started_at=run.clock.now(),
                plan=str(plan.path),
                repo=str(plan.repo),
                takeover_of=None if takeover is None else takeover.of,
                # Alive from its first row: a peer must not find it dead before its
                # first heartbeat.
                expires=store.now() + run.lease,
            )
        )
        store.beat(run.id, run.lease)
        run.log("run-start", detail=str(plan.path))
        say(f"run {run.id}")
        if takeover is not None:
            for line in takeover.lines:
                say(line)
            try:
                lines = takeover.mark(store, run.id)
            except Refused as exc:
                run._state(RunState.DONE)
                run.log("done", detail=f"not started: {exc}")
                raise
            for line in lines:
                say(line)
        return run

    # -- the ledger --------------------------------------------------------------------
    def log(self, kind: str, *, lane: str | None = None, detail: str = "") -> None:
        """Record an event in the run's ledger."""
        self.store.log(self.id, kind, lane=lane, detail=detail)
        if self.on_change is not None:
            self.on_change()

    def _state(self, state: RunState) -> None:
        try:
            self.store.set_run_state(self.id, state)
        except StoreError as exc:
            row = self.store.run(self.id)
            if row is None or row.state not in (RunState.DEAD, RunState.TAKEN_OVER):
                raise
            # A peer found this run dead (its leases expired while it could not
            # renew them): the store's word stands; its claims' epochs fence its lanes.
            self.log("state-refused", detail=str(exc))
            self.say(
                f"run {self.id} is {row.state.value} in the store (a peer found it "
                f"dead): it stays so; `tether runs show {self.id}` says what went on"
            )
            return
        if self.on_change is not None:
            self.on_change()

    # -- the stop ----------------------------------------------------------------------
    def request_halt(self, source: str, detail: str = "") -> None:
        """Take a stop: no move from now on; lanes are saved and released as they settle."""
        if self._halt.is_set():
            return
        self._halt.set()
        self._mark_halting()
        self.log("stop-observed", detail=f"{source}: {detail}".rstrip(": "))
        self._state(RunState.HALTING)
        waiting = self.agents_in_call()
        what = (
            f"waiting for {waiting} agent to finish its call"
            if waiting == 1
            else f"waiting for {waiting} agents to finish their calls"
        )
        if source == "ctrl-c":
            self.say(f"stopping: {what} — press Ctrl-C again to kill now")
        else:
            self.say(f"stopping ({source} {detail}): {what}".replace(" )", ")"))

    def _mark_halting(self) -> None:
        """Tell the hooks of this run's agents that it took a stop.

        The mark (see `halting_mark`) is a file in the run's lane folder, read-only
        inside the wall.
        """
        from .._channel import halting_mark

        mark = Path(halting_mark(self.id))
        try:
            mark.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except OSError as exc:  # the hooks then read the stop themselves
            self.log("halting-mark-failed", detail=str(exc))

    def _observe(self, reading: StopReading) -> bool:
        """Act on a reading; True when a move may be made."""
        if self.halting:
            return False
        match reading.outcome:
            case ReadOutcome.CLEAR:
                if self._stop_hold is not None:
                    self._stop_hold = None
                    self.log("hold-ended")
                    self._state(RunState.RUNNING)
                    self.say("the stop reads clear again: going on")
                for note in reading.notes:
                    self.log("lift-seen", detail=note)
                return True
            case ReadOutcome.STOPPED:
                setter = (
                    f"set by {who(reading.set_by_uid)}"
                    if reading.set_by_uid is not None
                    else ""
                )
                why = stop_reason(reading)
                self.request_halt("stop", f"{setter}: {why}" if why else setter)
                return False
            case ReadOutcome.HOLD:
                reason = reading.reason or "the stop could not be read clearly"
                if reason != self._stop_hold:
                    self._stop_hold = reason
                    self.log("hold", detail=reason)
                    self._state(RunState.HELD)
                    self.say(f"holding: {reason}")
                return False
            case _:
                assert_never(reading.outcome)

    async def gate(self, move: str, lane: str | None = None) -> bool:
        """Read the stop before `move`; wait out a HOLD; False once halting."""
        while True:
            if self.halting:
                return False
            if self._observe(self.watch.read()):
                self.log("move", lane=lane, detail=move)
                return True
            if self.halting:
                return False
            with anyio.move_on_after(self.poll):
                await self._halt.wait()

    def look_at_stop(self) -> None:
        """Read the stop once and act on it (a stop that stands as a stage ends)."""
        self._observe(self.watch.read())

    async def _watch_stop(self) -> None:
        while not self.halting:
            with anyio.move_on_after(self.poll):
                await self._halt.wait()
            if not self.halting:
                self._observe(self.watch.read())

    async def _heartbeat(self) -> None:
        while True:
            await anyio.sleep(self.heartbeat)
            self.store.beat(self.id, self.lease)
            for lane in list(self._lanes.values()):
                if lane.fenced:
                    continue
                try:
                    lane.claim = self.store.renew(lane.claim, self.lease)
                except StaleClaim as exc:
                    lane.fenced = True
                    self.log("fenced", lane=lane.row.id, detail=str(exc))
                    self.say(f"{lane.row.item}: {exc}")

    # -- killing -----------------------------------------------------------------------
    async def kill(self) -> None:
        """Kill every agent tree at once (the second Ctrl-C); the lanes then save aside."""
        if self._killed:
            return
        self._killed = True
        if not self.halting:
            self.request_halt("kill")
        calls = [lane.call for lane in self._lanes.values() if lane.call is not None]
        self.log("kill", detail=f"{len(calls)} agent trees")
        self.say(f"killing {len(calls)} agent trees now")
        for call in calls:
            # Each agent's call kills and reaps its whole tree (bounded) as it ends.
            call.cancel()

    # -- lanes -------------------------------------------------------------------------
    def log_path(self, lane: str) -> Path:
        """The lane's log file."""
        from ._views import lane_log

        return lane_log(self.id, lane)

    def brief(self, item: str) -> str:
        """The item's brief: the plan's, else the queue's."""
        for it in self.plan.items:
            if it.id == item:
                return it.brief
        for queued in self.store.items():
            if queued.id == item:
                return queued.brief
        return ""

    def after_halt(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run `job` once the run is marked halted (what a halt derives: views)."""
        self._after_halt.append(job)

    async def _lane(
        self, claim: Claim, previous: LaneRow | None, slots: anyio.Semaphore
    ) -> None:
        """Open the lane of `claim` going on from `previous`, and work it to its end."""
        end = LaneEnd.NOT_OPENED
        try:
            lane = await Lane.open(self, claim, previous)
            if lane is not None:
                self._lanes[claim.lane] = lane
                end = await lane.work()
        finally:
            slots.release()
        if not end.stays:
            self._lanes.pop(claim.lane, None)
        self._ends[end] += 1
        if end is LaneEnd.NOT_OPENED:
            # This run does not take it again, or it would fail the same way at once.
            self._unopened.add(claim.item)
        elif end is LaneEnd.FAILED:
            self._failed_items.append(claim.item)

    # -- the run -----------------------------------------------------------------------
    def _held_by_dead_runs(self) -> list[tuple[str, str]]:
        """(item, run) for this plan's items claimed by a run that is gone."""
        from ._takeover import effective_state

        mine = {i.id for i in self.plan.items}
        found: list[tuple[str, str]] = []
        for claim in self.store.claims():
            if claim.run == self.id or (mine and claim.item not in mine):
                continue
            row = self.store.run(claim.run)
            if row is not None and effective_state(self.store, row) is RunState.DEAD:
                found.append((claim.item, claim.run))
        return found

    def _claimable(self) -> list[str] | None:
        """The items this run may claim, less those whose lane could not open here.

        The items are the plan's; None means the whole queue.
        """
        if self.plan.items:
            ids = [i.id for i in self.plan.items]
        elif self._unopened:
            ids = [i.id for i in self.store.items() if i.state == "queued"]
        else:
            return None
        return [i for i in ids if i not in self._unopened]

    async def _dispatch(self) -> None:
        """Claim items and start a lane for each, as many at once as the plan's lanes.

        A take-over's items are claimed first, each going on from the lane its
        `Takeover` names; then any item this run may claim, going on from its newest
        saved lane if another run halted it.
        """
        slots = anyio.Semaphore(self.plan.lanes)
        inherited = collections.deque(
            () if self.takeover is None else self.takeover.lanes
        )
        async with anyio.create_task_group() as lanes:
            while True:
                await slots.acquire()
                previous = inherited.popleft() if inherited else None
                if not await self.gate(
                    "open a lane", None if previous is None else previous.id
                ):
                    slots.release()
                    return
                lane_id = new_lane_id()
                if previous is not None:
                    assert self.takeover is not None
                    claim = self.takeover.claim(
                        self.store, previous, self.id, lane_id, lease=self.lease
                    )
                    if claim is None:
                        slots.release()
                        self.say(
                            f"{previous.item}: held by another run now; left to it"
                        )
                        continue
                else:
                    claim = self.store.take_claim(
                        self.id,
                        lane_id,
                        only=self._claimable(),
                        host=here(),
                        pid=os.getpid(),
                        lease=self.lease,
                    )
                    if claim is None:
                        slots.release()
                        if not self.follow:
                            return
                        # Idle: look at the queue again after a poll interval, or halt.
                        with anyio.move_on_after(self.poll):
                            await self._halt.wait()
                        continue
                    previous = newest_saved_lane(
                        self.store, claim.item, besides=self.id
                    )
                crash_point("claimed")
                self.log(
                    "claim", lane=lane_id, detail=f"{claim.item} epoch {claim.epoch}"
                )
                lanes.start_soon(self._lane, claim, previous, slots)

    async def execute(self) -> ExitCode:
        """Work until every item is done or the run halts; returns the exit code."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_stop)
            tg.start_soon(self._heartbeat)
            await self._dispatch()
            tg.cancel_scope.cancel()
        if self._killed:
            # One final state everywhere: its claims are left for the restart path.
            self._state(RunState.DEAD)
            self.log("killed")
            return ExitCode.KILLED
        if self.halting:
            state = RunState.HALT_HELD if self._any_lane_held else RunState.HALTED
            self._state(state)
            self.log(state.value)
            self.say(
                f"run {self.id} {state.value}: it stays halted until `tether takeover {self.id}`"
            )
            # What the halt derives (the saves' views) comes after: the halt itself
            # is a rename per lane, whatever the lanes hold.
            for job in self._after_halt:
                await job()
            return ExitCode.HALT_HELD if self._any_lane_held else ExitCode.HALTED
        stranded = self._held_by_dead_runs()
        self._state(RunState.DONE)
        self.log("done", detail="failed" if self._failed else "")
        for item, run in stranded:
            self.say(
                f"{item}: still claimed by run {run}, which is dead: "
                f"`tether takeover {run}` goes on with it"
            )
        if stranded:
            self.say(
                f"run {self.id} done; {len(stranded)} item(s) wait for a take-over"
            )
            return ExitCode.FAILED
        self.say(f"run {self.id} done" + (" (a stage failed)" if self._failed else ""))
        if self._failed_items:
            self.say(
                f"{len(self._failed_items)} item(s) failed: "
                f"{', '.join(self._failed_items)}; once fixed, `tether queue retry "
                f"{self._failed_items[0]}` (or `--all-failed`) queues them again"
            )
        if self._failed:
            return ExitCode.FAILED
        if self.takeover is not None and self.takeover.held_items:
            held = self.takeover.held_items
            self.say(
                f"{len(held)} item(s) stay held in {self.takeover.of}: {', '.join(held)}"
            )
            return ExitCode.HALT_HELD
        return ExitCode.DONE


def new_lane_id() -> str:
    """A fresh lane id."""
    from .._ids import new_id

    return new_id("lane")
