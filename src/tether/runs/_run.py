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

A halted run stays halted: nothing here resumes it (a take-over is a new run). The
second Ctrl-C is `kill()`: every agent tree is killed at once, the worktrees are saved
aside within a bound, and claims are left for the restart path.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import assert_never, final

import anyio
import attrs

from .._threads import in_thread
from ..stop import ReadOutcome, StopReading, StopWatch, stop_reason
from ._agents import (
    AgentOutcome,
    expand,
    run_command_agent,
    timed_out_note,
    usage_reset,
    window_reset,
)
from ._builtin import run_builtin_agent
from ._clock import RunClock, WallClock
from ._lanes import (
    GitFailed,
    SaveFailed,
    branch_name,
    bring_back,
    commit_leftovers,
    commits_since,
    find_saves,
    git,
    has_commit,
    head,
    keep_view,
    lane_dir,
    make_view,
    open_lane,
    restore,
    restore_copy,
    save_dir,
    save_lane,
    saved_ref,
)
from ._liveness import here, process_start
from ._plan import Plan
from ._store import Store, crash_point
from ._values import (
    Claim,
    LaneRow,
    LaneState,
    LaneStatistics,
    Receipt,
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


@attrs.define(eq=False)
class _Lane:
    row: LaneRow
    claim: Claim
    worktree: Path
    stage: int
    call: anyio.CancelScope | None = None
    fenced: bool = False
    failed: bool = False
    resume: tuple[str, str, Path] | None = None
    """(stage, session id, transcript) of the builtin agent a take-over goes on with."""
    since: float = 0.0
    """Wall-clock seconds when the lane opened or its current stage started."""
    working: str | None = None
    """The stage its agent works on now (for the live view); None between stages."""
    note: str | None = None
    """What the lane waits for (a usage window), for the live view."""


@final
@attrs.define(eq=False)
class Run:
    """One run of a plan; `execute()` works until done or halted."""

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
    takeover_of: str | None = None
    """The run whose work this one took over."""
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
    _halt: anyio.Event = attrs.field(factory=anyio.Event)
    _held_reason: str | None = None
    _killed: bool = False
    _lanes: dict[str, _Lane] = attrs.field(factory=dict)
    _inherit: list[LaneRow] = attrs.field(factory=list)
    _unopened: set[str] = attrs.field(factory=set)
    _failed: bool = False
    _any_held: bool = False
    _held_elsewhere: tuple[str, ...] = ()
    _chain: tuple[str, ...] = ()
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
                    log=self._log_path(lane.row.id),
                    note=lane.note,
                )
                for lane in self._lanes.values()
            ),
            held=self._held_reason,
            halting=self.halting,
        )

    def inherit(
        self,
        lanes: list[LaneRow],
        *,
        held: Sequence[str] = (),
        chain: Sequence[str] = (),
    ) -> None:
        """Lanes of a previous run this run takes over first (saved work restored);
        `held`: items the previous run keeps held (this run ends with exit 4);
        `chain`: the runs taken over, whose claims this run may take."""
        self._inherit = list(lanes)
        self._held_elsewhere = tuple(held)
        self._chain = tuple(chain)

    # -- the ledger --------------------------------------------------------------------
    def _log(self, kind: str, *, lane: str | None = None, detail: str = "") -> None:
        self.store.log(self.id, kind, lane=lane, detail=detail)

    def _state(self, state: RunState) -> None:
        self.store.set_run_state(self.id, state)

    # -- the stop ----------------------------------------------------------------------
    def request_halt(self, source: str, detail: str = "") -> None:
        """Take a stop: no move from now on; lanes are saved and released as they settle."""
        if self._halt.is_set():
            return
        self._halt.set()
        self._mark_halting()
        self._log("stop-observed", detail=f"{source}: {detail}".rstrip(": "))
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
        """Tell the hooks of this run's agents that it took a stop (see
        `halting_mark`): a file in the run's lane folder, read-only inside the wall."""
        from ..stop._hook import halting_mark

        mark = Path(halting_mark(self.id))
        try:
            mark.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except OSError as exc:  # the hooks then read the stop themselves
            self._log("halting-mark-failed", detail=str(exc))

    def _observe(self, reading: StopReading) -> bool:
        """Act on a reading; True when a move may be made."""
        if self.halting:
            return False
        match reading.outcome:
            case ReadOutcome.CLEAR:
                if self._held_reason is not None:
                    self._held_reason = None
                    self._log("hold-ended")
                    self._state(RunState.RUNNING)
                    self.say("the stop reads clear again: going on")
                for note in reading.notes:
                    self._log("lift-seen", detail=note)
                return True
            case ReadOutcome.STOPPED:
                who = (
                    f"set by uid {reading.set_by_uid}"
                    if reading.set_by_uid is not None
                    else ""
                )
                why = stop_reason(reading)
                self.request_halt("stop", f"{who}: {why}" if why else who)
                return False
            case ReadOutcome.HOLD:
                reason = reading.reason or "the stop could not be read clearly"
                if reason != self._held_reason:
                    self._held_reason = reason
                    self._log("hold", detail=reason)
                    self._state(RunState.HELD)
                    self.say(f"holding: {reason}")
                return False
            case _:
                assert_never(reading.outcome)

    async def _gate(self, move: str, lane: str | None = None) -> bool:
        """Read the stop before `move`; wait out a HOLD; False once halting."""
        while True:
            if self.halting:
                return False
            if self._observe(self.watch.read()):
                self._log("move", lane=lane, detail=move)
                return True
            if self.halting:
                return False
            with anyio.move_on_after(self.poll):
                await self._halt.wait()

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
                    self._log("fenced", lane=lane.row.id, detail=str(exc))
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
        self._log("kill", detail=f"{len(calls)} agent trees")
        self.say(f"killing {len(calls)} agent trees now")
        for call in calls:
            # Each agent's call kills and reaps its whole tree (bounded) as it ends.
            call.cancel()

    # -- lanes -------------------------------------------------------------------------
    async def _open_lane(self, claim: Claim, previous: LaneRow | None) -> _Lane:
        lane_id = claim.lane
        repo = self.plan.repo
        path = lane_dir(self.id, lane_id)
        branch = branch_name(claim.item)
        stage = 0 if previous is None else previous.stage
        commit = None if previous is None else previous.saved_commit
        lossless = (
            None if previous is None else await in_thread(lossless_save, previous)
        )
        if (
            lossless is None
            and commit is not None
            and not await has_commit(repo, commit)
        ):
            assert previous is not None
            ref = previous.saved_ref or saved_ref(previous.run, previous.id)
            raise GitFailed(
                f"its saved work {commit[:12]} ({ref}) is not in {repo}: it was "
                "saved on another machine; fetch it into this repository with "
                "`git fetch REMOTE '+refs/tether/saved/*:refs/tether/saved/*'`, "
                "or let that machine take the item"
            )
        row = LaneRow(
            id=lane_id,
            run=self.id,
            item=claim.item,
            state=LaneState.OPEN,
            branch=branch,
            worktree=str(path),
            stage=stage,
        )
        # Recorded before its directory exists: a crash from here on leaves a lane the
        # restart path finds (with nothing in it, or a whole directory to save).
        self.store.add_lane(row)
        self._log("lane-open", lane=lane_id, detail=f"{claim.item} epoch {claim.epoch}")
        crash_point("lane")
        if lossless is not None:
            await restore_copy(lossless, path)
            self._log("restored", lane=lane_id, detail=f"{commit} from {lossless}")
            self.say(f"{claim.item}: saved work {(commit or '')[:12]} restored")
        else:
            await open_lane(repo, path, branch)
            if commit is not None:
                await restore(path, commit)
                self._log("restored", lane=lane_id, detail=f"{commit} (its view only)")
                self.say(
                    f"{claim.item}: saved work {commit[:12]} restored from its git view "
                    "(its lossless copy is on the machine that saved it)"
                )
        lane = _Lane(
            row=row, claim=claim, worktree=path, stage=stage, since=self.clock.now()
        )
        if previous is not None:
            lane.resume = self._agent_session(previous)
        self._lanes[lane_id] = lane
        return lane

    def _agent_session(self, previous: LaneRow) -> tuple[str, str, Path] | None:
        """The builtin agent's session the previous lane of the item left, if any."""
        found = None
        for event in self.store.events(previous.run):
            if event.lane == previous.id and event.kind == "agent-session":
                stage, _, rest = event.detail.partition(" ")
                session, _, transcript = rest.partition(" ")
                found = (stage, session, Path(transcript))
        if found is None or not found[2].is_file():
            return None
        return found

    async def _call(self, lane: _Lane, index: int) -> AgentOutcome:
        stage = self.plan.stages[index]
        brief = self._brief(lane.row.item)

        def on_call(call: anyio.CancelScope | None) -> None:
            lane.call = call
            if call is not None:
                crash_point("stage")

        if stage.agent is None:
            assert stage.model is not None  # the plan requires a model for builtin
            transcript = self._log_path(lane.row.id).with_suffix(".transcript")
            resume: str | None = None
            if lane.resume is not None and lane.resume[0] == stage.name:
                # A take-over goes on with the agent's own conversation, from a copy.
                _, resume, earlier = lane.resume
                await in_thread(shutil.copyfile, earlier, transcript)
            lane.resume = None
            outcome = await run_builtin_agent(
                stage.model,
                brief,
                cwd=lane.worktree,
                log=self._log_path(lane.row.id),
                on_call=on_call,
                halt=self._halt,
                transcript=transcript,
                resume=resume,
            )
            if outcome.session_id is not None:
                self._log(
                    "agent-session",
                    lane=lane.row.id,
                    detail=f"{stage.name} {outcome.session_id} {transcript}",
                )
            return outcome
        values = {"brief": brief, "lane": lane.row.id, "item": lane.row.item}
        if stage.preset is not None:
            from ._presets import PresetCall, previous_session

            name = stage.name

            def on_session(session: str) -> None:
                # Recorded for a take-over, which resumes this session.
                self._log("agent-session", lane=lane.row.id, detail=f"{name} {session}")

            return await PresetCall(
                stage=attrs.evolve(stage, args=tuple(expand(stage.args, values))),
                brief=brief,
                cwd=lane.worktree,
                log=self._log_path(lane.row.id),
                run_id=self.id,
                lane=lane.row.id,
                item=lane.row.item,
                halted=self._halt,
                on_call=on_call,
                on_session=on_session,
                # Spec 03: a take-over resumes the agent's own session.
                resume=previous_session(
                    self.store,
                    run=self.id,
                    item=lane.row.item,
                    stage=stage,
                    index=index,
                ),
            ).run()
        argv = expand(stage.agent, values)
        return await run_command_agent(
            argv,
            cwd=lane.worktree,
            log=self._log_path(lane.row.id),
            run=self.id,
            lane=lane.row.id,
            item=lane.row.item,
            timeout=stage.timeout,
            on_call=on_call,
            writable=stage.writable,
            pass_env=stage.env,
        )

    def _log_path(self, lane: str) -> Path:
        from ._views import lane_log

        return lane_log(self.id, lane)

    def _brief(self, item: str) -> str:
        for it in self.plan.items:
            if it.id == item:
                return it.brief
        for queued in self.store.items():
            if queued.id == item:
                return queued.brief
        return ""

    async def _stages(self, lane: _Lane) -> None:
        index = lane.stage
        while index < len(self.plan.stages):
            stage = self.plan.stages[index]
            name = stage.name
            if not await self._gate(f"hand out {name}", lane.row.id):
                return
            if not await self._gate(f"start agent for {name}", lane.row.id):
                return
            if stage.model is not None and stage.agent is None:
                reset = self._windows.get(stage.model, 0.0)
                if reset > self.clock.now():
                    # Spec 03: at 95 % of its window a model account waits for the
                    # reset; the run never moves onto another key.
                    await self._wait_usage(lane, name, reset)
                    if self.halting:
                        return
                    continue
            self.store.update_lane(lane.row.id, state=LaneState.IN_CALL)
            self._log("stage-start", lane=lane.row.id, detail=name)
            self.say(f"{lane.row.item}: {name} started")
            base = await head(lane.worktree)
            lane.working, lane.since = name, self.clock.now()
            try:
                outcome = await self._call(lane, index)
            finally:
                lane.working = None
            if self._killed:
                # A killed call is not a receipt: the stage runs again after a take-over.
                self._log("killed-in-call", lane=lane.row.id, detail=name)
                return
            # While halting, the lane is saved as it is (spec 03: its branch untouched);
            # a stop that stands as the stage ends counts.
            if not self.halting:
                self._observe(self.watch.read())
            await self._keep_stage_work(
                lane, stage.name, commit=stage.commit and not self.halting
            )
            commits: tuple[str, ...] = ()
            with contextlib.suppress(GitFailed):
                commits = await commits_since(lane.worktree, base)
            receipt = Receipt(
                run=self.id,
                lane=lane.row.id,
                item=lane.row.item,
                stage=name,
                exit_status=outcome.exit_status,
                log_tail=outcome.log_tail,
                commits=commits,
            )
            try:
                self.store.record_receipt(lane.claim, receipt)
            except StaleClaim as exc:
                lane.fenced = True
                self._log("fenced", lane=lane.row.id, detail=str(exc))
                return
            crash_point("receipt")
            self._log(
                "receipt", lane=lane.row.id, detail=f"{name} exit {outcome.exit_status}"
            )
            if outcome.stopped:
                # The stage did not finish: it runs again (resumed) after a take-over.
                self.say(f"{lane.row.item}: {name} {outcome.note}")
                return
            if stage.model is not None and outcome.rate_limits:
                window = window_reset(outcome.rate_limits, self.clock.now())
                if window is not None:
                    self._windows[stage.model] = window
            limited = usage_reset(stage, outcome, self.clock.now())
            if limited is not None:
                # Spec 03: a usage limit is a wait, not a stop: nothing is saved or
                # released; the same stage runs again at the reset.
                await self._wait_usage(lane, name, limited)
                if self.halting:
                    return
                continue
            index += 1
            lane.stage = index
            self.store.update_lane(lane.row.id, state=LaneState.OPEN, stage=lane.stage)
            how = (
                timed_out_note(outcome.timed_out)
                if outcome.timed_out is not None
                else f"exit {outcome.exit_status}"
            )
            self.say(
                f"{lane.row.item}: {name} ended, {how}, "
                f"{len(commits)} commit{'' if len(commits) == 1 else 's'}"
            )
            if outcome.exit_status != 0:
                lane.failed = True
                return

    async def _keep_stage_work(self, lane: _Lane, stage: str, *, commit: bool) -> None:
        """What a stage left: committed onto the lane's branch (unless the stage says
        `commit = "never"`), and the branch brought into the person's repository."""
        if commit:
            try:
                made = await commit_leftovers(lane.worktree, stage)
            except GitFailed as exc:
                self._log("commit-failed", lane=lane.row.id, detail=str(exc))
                self.say(f"{lane.row.item}: its work stays uncommitted: {exc}")
            else:
                if made is not None:
                    self._log("committed", lane=lane.row.id, detail=f"{stage} {made}")
        await self._bring_back(lane)

    async def _bring_back(self, lane: _Lane) -> bool:
        try:
            await bring_back(self.plan.repo, lane.worktree, lane.row.branch)
        except GitFailed as exc:
            self._log("branch-not-brought", lane=lane.row.id, detail=str(exc))
            self.say(
                f"{lane.row.item}: its branch {lane.row.branch} could not be brought "
                f"into {self.plan.repo}: {exc}; the work stays in {lane.worktree}"
            )
            return False
        return True

    async def _wait_usage(self, lane: _Lane, stage: str, reset: float) -> None:
        at = datetime.fromtimestamp(reset, UTC).isoformat(timespec="seconds")
        note = f"waiting for the usage window (resets at {at})"
        self.store.update_lane(lane.row.id, note=note)
        lane.note = note
        self._log("usage-wait", lane=lane.row.id, detail=f"{stage}: resets at {at}")
        self.say(f"{lane.row.item}: {note}")
        # A wait, not a stop: it ends at the reset or when the run halts.
        async with anyio.create_task_group() as tg:

            async def halted() -> None:
                await self._halt.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(halted)
            await self.clock.sleep_until(reset)
            tg.cancel_scope.cancel()
        self.store.update_lane(lane.row.id, note="")
        lane.note = None
        self._log("usage-resumed", lane=lane.row.id, detail=stage)

    async def _lane(
        self, claim: Claim, previous: LaneRow | None, slots: anyio.Semaphore
    ) -> None:
        try:
            try:
                lane = await self._open_lane(claim, previous)
            except (GitFailed, SaveFailed) as exc:
                self._failed = True
                self._log("lane-failed", lane=claim.lane, detail=str(exc))
                self.say(f"{claim.item}: cannot open a lane: {exc}")
                # Released for a peer (the machine that has its saved work, say); this
                # run does not take it again, or it would fail the same way at once.
                self._unopened.add(claim.item)
                if any(row.id == claim.lane for row in self.store.lanes(self.id)):
                    self.store.update_lane(
                        claim.lane, state=LaneState.HALTED, note=f"not opened: {exc}"
                    )
                with contextlib.suppress(StaleClaim):
                    self.store.release(claim)
                return
            await self._stages(lane)
            if lane.fenced:
                await self._save(lane)
                return
            if self.halting and (
                lane.stage < len(self.plan.stages) and not lane.failed
            ):
                await self._halt_lane(lane)
                return
            await self._finish_lane(lane)
        finally:
            slots.release()

    async def _finish_lane(self, lane: _Lane) -> None:
        try:
            self.store.finish(lane.claim, failed=lane.failed)
        except StaleClaim as exc:
            self._log("fenced", lane=lane.row.id, detail=str(exc))
            return
        crash_point("finished")
        self.store.update_lane(
            lane.row.id, state=LaneState.DONE, note="failed" if lane.failed else None
        )
        if lane.failed:
            self._failed = True
            self._failed_items.append(lane.row.item)
        verdict = "failed" if lane.failed else "done"
        self._log("lane-done", lane=lane.row.id, detail=verdict)
        # The lane's directory stays as it is (ignored build outputs and all) until
        # `tether lanes prune`: nothing of it is deleted without a lossless copy.
        brought = await self._bring_back(lane)
        where = (
            f"its branch {lane.row.branch} holds its work"
            if brought
            else f"its work is in {lane.worktree}"
        )
        try:
            dirty = await git("status", "--porcelain", cwd=lane.worktree)
        except GitFailed as exc:
            self._log("save-failed", lane=lane.row.id, detail=str(exc))
            dirty = ""
        if dirty:
            try:
                commit = await make_view(
                    self.plan.repo, lane.worktree, message=f"{self.id} {lane.row.id}"
                )
                ref = await keep_view(
                    self.plan.repo, commit, saved_ref(self.id, lane.row.id)
                )
            except GitFailed as exc:
                self._log("save-failed", lane=lane.row.id, detail=str(exc))
            else:
                self.store.update_lane(lane.row.id, saved=(ref, commit))
                self._log("saved", lane=lane.row.id, detail=f"{ref} {commit}")
                where += f"; what it left uncommitted is viewed at {ref}"
        if lane.failed:
            # Why it failed is in the lane's log: say how to read it.
            where += f"; why: tether logs {self.id} {lane.row.item}"
        self.say(f"{lane.row.item}: {verdict}; {where}")
        del self._lanes[lane.row.id]

    async def _save(self, lane: _Lane) -> str | None:
        try:
            save = await save_lane(
                self.plan.repo,
                lane.worktree,
                run=self.id,
                lane_id=lane.row.id,
                message=f"{self.id} {lane.row.id}",
            )
        except SaveFailed as exc:
            self._log("save-failed", lane=lane.row.id, detail=str(exc))
            return None
        self.store.update_lane(
            lane.row.id, state=LaneState.SAVED, saved=(save.ref, save.commit)
        )
        self._log("saved", lane=lane.row.id, detail=f"{save.ref} {save.commit}")
        return save.commit

    async def _halt_lane(self, lane: _Lane) -> None:
        """Steps 3 and 4 of the halt for one lane whose agent is gone."""
        assert lane.call is None  # spec 03: its process tree is checked empty first
        commit = await self._save(lane)
        if commit is None and not self._killed:
            self.store.update_lane(
                lane.row.id, state=LaneState.HELD, note="save failed"
            )
            self.say(
                f"{lane.row.item}: holding the lane and its claim: its save failed"
            )
            with anyio.move_on_after(self.save_retry):
                while commit is None:
                    await anyio.sleep(self.poll)
                    commit = await self._save(lane)
            if commit is None:
                self._any_held = True
                events = [
                    e for e in self.store.events(self.id) if e.lane == lane.row.id
                ]
                why = next(
                    (e.detail for e in reversed(events) if e.kind == "save-failed"), ""
                )
                self.store.update_lane(lane.row.id, state=LaneState.HELD, note=why)
                self._log("held", lane=lane.row.id, detail=why)
                self.say(f"{lane.row.item}: held: {why}")
                return
        if commit is None or self._killed:
            # After a kill the claims are left for the restart path.
            return
        self.say(f"{lane.row.item}: saved aside as {commit[:12]}")
        crash_point("save-release")
        try:
            self.store.release(lane.claim)
        except StaleClaim as exc:
            self._log("fenced", lane=lane.row.id, detail=str(exc))
            return
        self._log("released", lane=lane.row.id, detail=lane.row.item)
        crash_point("released")
        self.store.update_lane(lane.row.id, state=LaneState.HALTED)
        self._log("lane-halted", lane=lane.row.id)
        del self._lanes[lane.row.id]

    # -- the run -----------------------------------------------------------------------
    def start_record(self) -> None:
        """Record the run in the store (state running)."""
        self.store.create_run(
            RunRow(
                id=self.id,
                state=RunState.RUNNING,
                host=here(),
                pid=os.getpid(),
                pid_start=process_start(),
                started_at=anyio_time(),
                plan=str(self.plan.path),
                repo=str(self.plan.repo),
                takeover_of=self.takeover_of,
                # Alive from its first row: a peer must not find it dead before its
                # first heartbeat.
                expires=self.store.now() + self.lease,
            )
        )
        self.store.beat(self.id, self.lease)
        self._log("run-start", detail=str(self.plan.path))

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
        """The items this run may claim: the plan's (None: the whole queue), less those
        whose lane could not open here."""
        if self.plan.items:
            ids = [i.id for i in self.plan.items]
        elif self._unopened:
            ids = [i.id for i in self.store.items() if i.state == "queued"]
        else:
            return None
        return [i for i in ids if i not in self._unopened]

    async def _dispatch(self) -> None:
        slots = anyio.Semaphore(self.plan.lanes)
        async with anyio.create_task_group() as lanes:
            for previous in self._inherit:
                await slots.acquire()
                if not await self._gate("open a lane", previous.id):
                    slots.release()
                    return
                lane_id = new_lane_id()
                owner = next(
                    (c.run for c in self.store.claims() if c.item == previous.item),
                    None,
                )
                claim = self.store.take_over_claim(
                    previous.item,
                    self.id,
                    lane_id,
                    previous=owner
                    if owner in self._chain
                    else (self.takeover_of or previous.run),
                    host=here(),
                    pid=os.getpid(),
                    lease=self.lease,
                )
                if claim is None:
                    slots.release()
                    self.say(f"{previous.item}: held by another run now; left to it")
                    continue
                crash_point("claimed")
                self._log(
                    "claim", lane=lane_id, detail=f"{claim.item} epoch {claim.epoch}"
                )
                lanes.start_soon(self._lane, claim, previous, slots)
            while True:
                await slots.acquire()
                if not await self._gate("open a lane"):
                    slots.release()
                    return
                lane_id = new_lane_id()
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
                crash_point("claimed")
                self._log(
                    "claim", lane=lane_id, detail=f"{claim.item} epoch {claim.epoch}"
                )
                prior = last_saved_lane(self.store, claim.item, self.id)
                lanes.start_soon(self._lane, claim, prior, slots)

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
            self._log("killed")
            return ExitCode.KILLED
        if self.halting:
            state = RunState.HALT_HELD if self._any_held else RunState.HALTED
            self._state(state)
            self._log(state.value)
            self.say(
                f"run {self.id} {state.value}: it stays halted until `tether takeover {self.id}`"
            )
            return ExitCode.HALT_HELD if self._any_held else ExitCode.HALTED
        stranded = self._held_by_dead_runs()
        self._state(RunState.DONE)
        self._log("done", detail="failed" if self._failed else "")
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
        if self._held_elsewhere:
            self.say(
                f"{len(self._held_elsewhere)} item(s) stay held in {self.takeover_of}: "
                f"{', '.join(self._held_elsewhere)}"
            )
            return ExitCode.HALT_HELD
        return ExitCode.DONE


def anyio_time() -> float:
    """Wall-clock seconds (runs record when they started)."""

    return time.time()


def new_lane_id() -> str:
    """A fresh lane id."""
    from .._ids import new_id

    return new_id("lane")


def lossless_save(lane: LaneRow) -> Path | None:
    """The lossless copy of a lane's save on this machine: the one its view names, else
    its newest; None when it was saved elsewhere (only its git view reaches here)."""
    if lane.saved_commit is not None:
        exact = save_dir(lane.run, lane.id, lane.saved_commit)
        if exact.is_dir():
            return exact
    found = find_saves(lane.run, lane.id)
    return found[0] if found else None


def last_saved_lane(store: Store, item: str, run: str) -> LaneRow | None:
    """The latest saved-aside lane of `item` in another run, whose work a new lane restores."""
    found = None
    for lane in store.item_lanes(item):
        if (
            lane.run != run
            and lane.saved_commit is not None
            and lane.state
            in (
                LaneState.HALTED,
                LaneState.SAVED,
            )
        ):
            found = lane
    return found
