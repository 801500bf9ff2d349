"""One lane's life in a run: opened from its claim, its stages, a usage wait, its end.

A `Lane` works one claimed item: it opens the lane's repository (restoring saved work
of an earlier lane), hands each stage to its agent with the stop read before every move,
records a receipt per stage, and ends in one of the ways `LaneEnd` names — finished
(done or failed), or, once the run takes a stop, saved aside and released (halted), held
(its save kept failing), fenced (its claim went to a newer epoch) or killed.

The states a lane's row goes through are `LaneState`, whose moves the stores hold
(`LANE_MOVES_INTO`); `LaneEnd` is what the run counts for its exit code, and says
whether the run keeps the ended lane. What a lane needs of its run (the store, the
plan, the stop's gate, the ledger, the usage windows) is `LaneRun`; the run opens its
lanes, keeps the registry of them, reads the stop between their moves and renews their
claims (`_run.py`). Which lane a new one goes on from, and which agent session it
resumes, is the take-over's (`_takeover.py`); git work on a lane's repository is
`_lane_git.py`'s.
"""

from __future__ import annotations

import contextlib
import enum
import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, assert_never

import anyio
import attrs

from .._threads import in_thread
from .._untrusted import copy_beneath
from ._agents import (
    AgentOutcome,
    expand,
    run_command_agent,
    timed_out_note,
    usage_reset,
    window_reset,
)
from ._events import failure_line
from ._lane_git import (
    GitFailed,
    LaneUnreadable,
    SaveFailed,
    adopt_lane,
    branch_name,
    bring_back,
    commit_leftovers,
    commits_since,
    has_commit,
    head,
    keep_view,
    lane_dir,
    lossless_save,
    make_view,
    move_aside,
    open_lane,
    restore,
    restore_copy,
    saved_ref,
    view_of_save,
)
from ._store import Store, crash_point
from ._takeover import earlier_session
from ._values import AgentSession, Claim, LaneRow, LaneState, Receipt, StaleClaim

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._clock import RunClock
    from ._plan import Plan

__all__ = ("Lane", "LaneEnd", "LaneRun", "retry_stage")

TRANSCRIPT_LIMIT = 1 << 30
"""Bytes of a built-in agent's transcript a take-over copies; a larger one is not."""


class LaneEnd(enum.Enum):
    """How a lane's work ended in this run."""

    DONE = "done"
    """Every stage ran; its item is finished."""
    FAILED = "failed"
    """A stage failed; its item is finished as failed."""
    NOT_OPENED = "not-opened"
    """Its repository could not be opened here; its claim is released for a peer."""
    HALTED = "halted"
    """The run took a stop: saved aside, then its claim released."""
    HELD = "held"
    """The run took a stop and its save kept failing: worktree and claim kept."""
    FENCED = "fenced"
    """Its claim went to a newer epoch; what it had is saved aside, nothing released."""
    KILLED = "killed"
    """Its agent was killed (a second Ctrl-C); saved aside, its claim left for the
    restart path."""

    @property
    def stays(self) -> bool:
        """Whether the run keeps the lane among its lanes once it ended this way.

        A lane the run keeps has its claim renewed until the run ends; every other
        lane is let go as it ends.
        """
        match self:
            case LaneEnd.HELD:
                return True  # spec 03: a held lane keeps its worktree and its claims
            case LaneEnd.DONE | LaneEnd.FAILED | LaneEnd.HALTED | LaneEnd.NOT_OPENED:
                return False  # its claim is finished or released
            case LaneEnd.FENCED:
                return False  # its claim is a newer epoch's: nothing to renew
            case LaneEnd.KILLED:
                return False  # its claim is left as it is for the restart path
            case _:
                assert_never(self)


class LaneRun(Protocol):
    """What a lane needs of the run it works in."""

    @property
    def id(self) -> str:
        """The run's id."""

    @property
    def plan(self) -> Plan:
        """What to do."""

    @property
    def store(self) -> Store:
        """Claims and ledger."""

    @property
    def clock(self) -> RunClock:
        """The wall clock usage windows are judged and waited on."""

    @property
    def poll(self) -> float:
        """Seconds between reads of the stop (and between save retries)."""

    @property
    def save_retry(self) -> float:
        """Seconds a failed save is retried before the lane is held."""

    @property
    def say(self) -> Callable[[str], None]:
        """Where progress lines go."""

    @property
    def halting(self) -> bool:
        """Whether the run took a stop."""

    @property
    def killed(self) -> bool:
        """Whether the run's agents were killed (a second Ctrl-C)."""

    @property
    def halt(self) -> anyio.Event:
        """Set when the run takes a stop; agents and waits end their part on it."""

    def window(self, model: str) -> float:
        """When `model`'s usage window resets (it is at 95 %); 0.0 when not known."""

    def note_window(self, model: str, reset: float) -> None:
        """Record when `model`'s usage window resets (its stages wait for it)."""

    def log(self, kind: str, *, lane: str | None = None, detail: str = "") -> None:
        """Record an event in the run's ledger."""

    async def gate(self, move: str, lane: str | None = None) -> bool:
        """Read the stop before `move`; wait out a HOLD; False once halting."""

    def look_at_stop(self) -> None:
        """Read the stop once and act on it (a stop that stands as a stage ends)."""

    def log_path(self, lane: str) -> Path:
        """The lane's log file."""

    def brief(self, item: str) -> str:
        """The item's brief."""

    def after_halt(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run `job` once the run is marked halted (what a halt derives: views)."""


@attrs.define(eq=False)
class Lane:
    """One claimed item's lane in a run (see the module docstring)."""

    run: LaneRun
    row: LaneRow
    claim: Claim
    worktree: Path
    stage: int
    """The index of the next stage to run."""
    call: anyio.CancelScope | None = None
    """The agent's call in flight (a kill cancels it), or None."""
    fenced: bool = False
    """Whether its claim went to a newer epoch (no renewal, receipt or release)."""
    resume: tuple[LaneRow, AgentSession] | None = None
    """The agent session its first stage resumes, and the lane that recorded it (a
    lane going on from a saved one: `earlier_session`)."""
    since: float = 0.0
    """Wall-clock seconds when the lane opened or its current stage started."""
    working: str | None = None
    """The stage its agent works on now (for the live view); None between stages."""
    note: str | None = None
    """What the lane waits for (a usage window), for the live view."""
    failure: str | None = None
    """Why its item failed: `STAGE failed, exit N[: the agent's reason]`."""

    @classmethod
    async def open(
        cls, run: LaneRun, claim: Claim, previous: LaneRow | None
    ) -> Lane | None:
        """Open the lane for `claim`, going on from `previous` (its saved work).

        None when it cannot be opened here: it says why and its claim is released for
        a peer (`LaneEnd.NOT_OPENED`).
        """
        try:
            return await cls._open(run, claim, previous)
        except (GitFailed, SaveFailed) as exc:
            run.log("lane-failed", lane=claim.lane, detail=str(exc))
            run.say(f"{claim.item}: cannot open a lane: {exc}")
            if any(row.id == claim.lane for row in run.store.lanes(run.id)):
                run.store.update_lane(
                    claim.lane, state=LaneState.HALTED, note=f"not opened: {exc}"
                )
            # Released for a peer (the machine that has its saved work, say).
            with contextlib.suppress(StaleClaim):
                run.store.release(claim)
            return None

    async def work(self) -> LaneEnd:
        """Work the lane's stages to its end (see `LaneEnd`)."""
        failed = await self._stages()
        if self.fenced:
            await self._save()
            return LaneEnd.FENCED
        if self.run.halting and self.stage < len(self.run.plan.stages) and not failed:
            return await self._halt()
        return await self._finish(failed=failed)

    # -- opening -------------------------------------------------------------------
    @classmethod
    async def _open(cls, run: LaneRun, claim: Claim, previous: LaneRow | None) -> Lane:
        lane_id = claim.lane
        repo = run.plan.repo
        path = lane_dir(run.id, lane_id)
        branch = branch_name(claim.item)
        retried = retry_stage(run.store, claim.item, previous, len(run.plan.stages))
        if retried is not None:
            previous = None  # saved before the failure: the branch holds newer work
        stage = (retried or 0) if previous is None else previous.stage
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
            run=run.id,
            item=claim.item,
            state=LaneState.OPEN,
            branch=branch,
            worktree=str(path),
            stage=stage,
        )
        # Recorded before its directory exists: a crash from here on leaves a lane the
        # restart path finds (with nothing in it, or a whole directory to save).
        run.store.add_lane(row)
        run.log("lane-open", lane=lane_id, detail=f"{claim.item} epoch {claim.epoch}")
        crash_point("lane")
        if lossless is not None:
            # Its git dir first: a lane in place always has one (as `open_lane` does).
            await adopt_lane(repo, path)
            await restore_copy(lossless, path)
            run.log("restored", lane=lane_id, detail=f"{commit} from {lossless}")
            run.say(f"{claim.item}: saved work {(commit or '')[:12]} restored")
        else:
            await open_lane(repo, path, branch)
            if commit is not None:
                await restore(path, commit)
                run.log("restored", lane=lane_id, detail=f"{commit} (its view only)")
                run.say(
                    f"{claim.item}: saved work {commit[:12]} restored from its git view "
                    "(its lossless copy is on the machine that saved it)"
                )
        if retried:
            done = ", ".join(s.name for s in run.plan.stages[:retried])
            run.say(
                f"{claim.item}: retried at {run.plan.stages[retried].name}; its branch "
                f"{branch} holds what {done} did"
            )
        lane = cls(
            run=run,
            row=row,
            claim=claim,
            worktree=path,
            stage=stage,
            since=run.clock.now(),
        )
        if previous is not None and stage < len(run.plan.stages):
            lane.resume = earlier_session(
                run.store, previous, run.plan.stages[stage].name
            )
        return lane

    # -- the stages ----------------------------------------------------------------
    async def _stages(self) -> bool:
        """Run the stages from `self.stage` on; True when one failed."""
        run = self.run
        lane_id = self.row.id
        index = self.stage
        while index < len(run.plan.stages):
            stage = run.plan.stages[index]
            name = stage.name
            if not await run.gate(f"hand out {name}", lane_id):
                return False
            if not await run.gate(f"start agent for {name}", lane_id):
                return False
            if stage.model is not None and stage.agent is None:
                reset = run.window(stage.model)
                if reset > run.clock.now():
                    # Spec 03: at 95 % of its window a model account waits for the
                    # reset; the run never moves onto another key.
                    await self._wait_usage(name, reset)
                    if run.halting:
                        return False
                    continue
            run.store.update_lane(lane_id, state=LaneState.IN_CALL, stage_name=name)
            run.log("stage-start", lane=lane_id, detail=name)
            run.say(f"{self.row.item}: {name} started")
            try:
                base: str | None = await head(self.worktree)
            except GitFailed as exc:
                run.log("commit-failed", lane=lane_id, detail=str(exc))
                base = None
            self.working, self.since = name, run.clock.now()
            try:
                outcome = await self._call(index)
            finally:
                self.working = None
            if run.killed:
                # A killed call is not a receipt: the stage runs again after a take-over.
                run.log("killed-in-call", lane=lane_id, detail=name)
                return False
            # While halting, the lane is saved as it is (spec 03: its branch untouched);
            # a stop that stands as the stage ends counts.
            if not run.halting:
                run.look_at_stop()
            unreadable = await self._keep_stage_work(
                name, commit=stage.commit and not run.halting
            )
            commits: tuple[str, ...] = ()
            if base is not None:
                with contextlib.suppress(GitFailed):
                    commits = await commits_since(self.worktree, base)
            receipt = Receipt(
                run=run.id,
                lane=lane_id,
                item=self.row.item,
                stage=name,
                exit_status=outcome.exit_status,
                log_tail=outcome.log_tail,
                commits=commits,
            )
            try:
                run.store.record_receipt(self.claim, receipt)
            except StaleClaim as exc:
                self.fenced = True
                run.log("fenced", lane=lane_id, detail=str(exc))
                return False
            crash_point("receipt")
            run.log(
                "receipt", lane=lane_id, detail=f"{name} exit {outcome.exit_status}"
            )
            if outcome.stopped:
                # The stage did not finish: it runs again (resumed) after a take-over.
                run.say(f"{self.row.item}: {name} {outcome.note}")
                return False
            if stage.model is not None and outcome.rate_limits:
                window = window_reset(outcome.rate_limits, run.clock.now())
                if window is not None:
                    run.note_window(stage.model, window)
            limited = usage_reset(stage, outcome, run.clock.now())
            if limited is not None:
                # Spec 03: a usage limit is a wait, not a stop: nothing is saved or
                # released; the same stage runs again at the reset.
                run.store.update_lane(lane_id, state=LaneState.OPEN)
                await self._wait_usage(name, limited)
                if run.halting:
                    return False
                continue
            index += 1
            self.stage = index
            run.store.update_lane(lane_id, state=LaneState.OPEN, stage=self.stage)
            how = (
                timed_out_note(outcome.timed_out)
                if outcome.timed_out is not None
                else f"exit {outcome.exit_status}"
            )
            ended = f"{how}, {len(commits)} commit{'' if len(commits) == 1 else 's'}"
            if outcome.exit_status != 0:
                # Why, in the agent's own word when its log says it (spec 03: the
                # reason on the run's line, not only in the log).
                why = failure_line(outcome.log_tail)
                if why and why in how:
                    why = None  # tether's own word, said already (a timeout)
                if why and stage.preset is not None:
                    why = f"{stage.preset}: {why}"  # the CLI's own word
                self.failure = f"{name} failed, {how}" + (f": {why}" if why else "")
                run.say(
                    f"{self.row.item}: {name} failed, {ended}"
                    + (f": {why}" if why else "")
                )
                self._failed_at(index - 1)
                return True
            run.say(f"{self.row.item}: {name} ended, {ended}")
            if unreadable is not None:
                # Spec 01 S16: a lane tether cannot read is held for a person, with
                # its reason; nothing of it is lost (its directory stays).
                run.store.update_lane(lane_id, note=unreadable)
                run.say(f"{self.row.item}: held for a person: {unreadable}")
                self._failed_at(index - 1)
                return True
        return False

    def _failed_at(self, index: int) -> None:
        """Record `index` as the stage a retry of the item starts at."""
        self.stage = index
        self.run.store.update_lane(self.row.id, stage=index)

    async def _call(self, index: int) -> AgentOutcome:
        run = self.run
        stage = run.plan.stages[index]
        # Spec 03: the stage a take-over goes on with resumes its agent's session.
        resumed, self.resume = self.resume, None
        if resumed is not None and resumed[1].stage != stage.name:
            resumed = None
        brief = run.brief(self.row.item)
        log = run.log_path(self.row.id)

        def on_call(call: anyio.CancelScope | None) -> None:
            self.call = call
            if call is not None:
                crash_point("stage")

        if stage.agent is None:
            assert stage.model is not None  # the plan requires a model for builtin
            transcript = log.with_suffix(".transcript")
            resume: str | None = None
            earlier = None if resumed is None else resumed[1].transcript
            if resumed is not None and earlier is not None:
                # A take-over goes on with the agent's own conversation, from a copy:
                # a regular file, bounded, reached following no link (S16).
                copy = functools.partial(
                    copy_beneath,
                    earlier.parent,
                    earlier.name,
                    transcript.parent,
                    transcript.name,
                    limit=TRANSCRIPT_LIMIT,
                )
                try:
                    await in_thread(copy)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    run.say(
                        f"{self.row.item}: session {resumed[1].session} not carried "
                        f"over ({exc.strerror or exc}); the stage starts over"
                    )
                else:
                    resume = resumed[1].session
            # The agent loop (the runtime, its models and tools) is imported by the
            # runs that have a builtin stage only: a run of commands or presets
            # starts without it (about a third of `tether run`'s start-up).
            from ._builtin import run_builtin_agent

            outcome = await run_builtin_agent(
                stage.model,
                brief,
                cwd=self.worktree,
                log=log,
                on_call=on_call,
                halt=run.halt,
                transcript=transcript,
                resume=resume,
            )
            if outcome.session_id is not None:
                self._record_session(
                    AgentSession(stage.name, outcome.session_id, transcript)
                )
            return outcome
        values = {"brief": brief, "lane": self.row.id, "item": self.row.item}
        if stage.preset is not None:
            from ._presets import EarlierSession, PresetCall

            name = stage.name

            def on_session(session: str) -> None:
                self._record_session(AgentSession(name, session))

            return await PresetCall(
                stage=attrs.evolve(stage, args=tuple(expand(stage.args, values))),
                brief=brief,
                cwd=self.worktree,
                log=log,
                run_id=run.id,
                lane=self.row.id,
                item=self.row.item,
                halted=run.halt,
                on_call=on_call,
                on_session=on_session,
                resume=None
                if resumed is None
                else EarlierSession.of(resumed[0], resumed[1].session, stage.preset),
            ).run()
        return await run_command_agent(
            expand(stage.agent, values),
            cwd=self.worktree,
            log=log,
            run=run.id,
            lane=self.row.id,
            item=self.row.item,
            timeout=stage.timeout,
            on_call=on_call,
            writable=stage.writable,
            pass_env=stage.env,
        )

    async def _keep_stage_work(self, stage: str, *, commit: bool) -> str | None:
        """Keep what a stage left, on the lane's branch and in the person's repository.

        The work is committed onto the lane's branch (unless the stage says
        `commit = "never"`), and the branch is brought into the person's repository.
        Returns why the lane cannot be read (S16: it is then held), else None.
        """
        if commit:
            try:
                made = await commit_leftovers(self.worktree, stage)
            except GitFailed as exc:
                self.run.log("commit-failed", lane=self.row.id, detail=str(exc))
                self.run.say(f"{self.row.item}: its work stays uncommitted: {exc}")
                if isinstance(exc, LaneUnreadable):
                    return f"its work stays uncommitted in {self.worktree}: {exc}"
            else:
                if made is not None:
                    self.run.log(
                        "committed", lane=self.row.id, detail=f"{stage} {made}"
                    )
        await self._bring_back()
        return None

    async def _bring_back(self) -> bool:
        try:
            await bring_back(self.run.plan.repo, self.worktree, self.row.branch)
        except GitFailed as exc:
            self.run.log("branch-not-brought", lane=self.row.id, detail=str(exc))
            self.run.say(
                f"{self.row.item}: its branch {self.row.branch} could not be brought "
                f"into {self.run.plan.repo}: {exc}; the work stays in {self.worktree}"
            )
            return False
        return True

    def _record_session(self, session: AgentSession) -> None:
        """Record the session its stage's agent started, for a take-over to resume."""
        run = self.run
        run.store.record_session(self.row.id, session)
        run.log(
            "agent-session",
            lane=self.row.id,
            detail=f"{session.stage}: session {session.session}",
        )

    async def _wait_usage(self, stage: str, reset: float) -> None:
        run = self.run
        at = datetime.fromtimestamp(reset, UTC).isoformat(timespec="seconds")
        note = f"waiting for the usage window (resets at {at})"
        run.store.update_lane(self.row.id, note=note)
        self.note = note
        run.log("usage-wait", lane=self.row.id, detail=f"{stage}: resets at {at}")
        run.say(f"{self.row.item}: {note}")
        # A wait, not a stop: it ends at the reset or when the run halts.
        async with anyio.create_task_group() as tg:

            async def halted() -> None:
                await run.halt.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(halted)
            await run.clock.sleep_until(reset)
            tg.cancel_scope.cancel()
        run.store.update_lane(self.row.id, note="")
        self.note = None
        run.log("usage-resumed", lane=self.row.id, detail=stage)

    # -- the end -------------------------------------------------------------------
    async def _finish(self, *, failed: bool) -> LaneEnd:
        run = self.run
        lane_id = self.row.id
        try:
            run.store.finish(self.claim, failed=failed)
        except StaleClaim as exc:
            run.log("fenced", lane=lane_id, detail=str(exc))
            return LaneEnd.FENCED
        crash_point("finished")
        run.store.update_lane(
            lane_id,
            state=LaneState.DONE,
            note=(self.failure or "failed") if failed else None,
        )
        verdict = "failed" if failed else "done"
        run.log("lane-done", lane=lane_id, detail=verdict)
        # The lane's directory stays as it is (ignored build outputs and all) until
        # `tether lanes prune`: nothing of it is deleted without a lossless copy.
        brought = await self._bring_back()
        where = (
            f"its branch {self.row.branch} holds its work"
            if brought
            else f"its work is in {self.worktree}"
        )
        if failed and brought and self.stage == 0 and await self._drop_empty_branch():
            where = f"it committed nothing: no branch {self.row.branch} is left"
        # Why it failed is in the lane's log: `why` says how to read it.
        why = f"; why: tether logs {run.id} {self.row.item}" if failed else ""
        if run.halting:
            # Its last stage ended during a halt: the halt waits for no view (spec 05:
            # stop seen -> halted whatever the lane holds); it is derived once the run
            # is marked halted, as a saved lane's is.
            run.say(f"{self.row.item}: {verdict}; {where}{why}")

            async def view() -> None:
                ref = await self._done_view()
                if ref is not None:
                    run.say(f"{self.row.item}: what it left uncommitted is at {ref}")

            run.after_halt(view)
            return LaneEnd.FAILED if failed else LaneEnd.DONE
        ref = await self._done_view()
        if ref is not None:
            where += f"; what it left uncommitted is viewed at {ref}"
        run.say(f"{self.row.item}: {verdict}; {where}{why}")
        return LaneEnd.FAILED if failed else LaneEnd.DONE

    async def _done_view(self) -> str | None:
        """The view of what a done lane left uncommitted; its ref, None when none."""
        run = self.run
        lane_id = self.row.id
        try:
            commit = await make_view(
                run.plan.repo,
                self.worktree,
                message=f"{run.id} {lane_id}",
                only_changed=True,
            )
            if commit is None:
                return None
            ref = await keep_view(run.plan.repo, commit, saved_ref(run.id, lane_id))
        except GitFailed as exc:
            run.log("save-failed", lane=lane_id, detail=str(exc))
            return None
        run.store.update_lane(lane_id, saved=(ref, commit))
        run.log("saved", lane=lane_id, detail=f"{ref} {commit}")
        return ref

    async def _drop_empty_branch(self) -> bool:
        """Delete the item's branch its first lane made when it holds nothing new.

        Only for an item's first lane that failed at its first stage: the branch
        then points at a commit the person's HEAD already has (nothing is lost), it
        is not checked out, and no earlier lane of the item used it. True when gone.
        """
        from ._lane_git import git

        run, ref = self.run, f"refs/heads/{self.row.branch}"
        if len(run.store.item_lanes(self.row.item)) != 1:
            return False
        try:
            tip = await git("rev-parse", "--verify", "--quiet", ref, cwd=run.plan.repo)
            with contextlib.suppress(GitFailed):
                checked_out = await git("symbolic-ref", "-q", "HEAD", cwd=run.plan.repo)
                if checked_out == ref:
                    return False
            await git("merge-base", "--is-ancestor", tip, "HEAD", cwd=run.plan.repo)
            await git("update-ref", "-d", ref, tip, cwd=run.plan.repo)
        except GitFailed:
            return False
        run.log("branch-dropped", lane=self.row.id, detail=f"{ref} {tip}")
        return True

    async def _save(self) -> str | None:
        """Save the lane aside and make its view now (a fenced or killed lane).

        Returns the view's commit, "" when only the lossless copy could be made, None
        when the lane could not be moved.
        """
        moved = await self._move()
        if moved is None:
            return None
        return await self._view(moved) or ""

    async def _move(self) -> Path | None:
        """The halt's save: the lane's directory renamed into `saves/` (constant time)."""
        run = self.run
        try:
            moved = await move_aside(self.worktree, run=run.id, lane_id=self.row.id)
        except SaveFailed as exc:
            run.store.update_lane(self.row.id, held_reason=str(exc))
            run.log("save-failed", lane=self.row.id, detail=str(exc))
            return None
        run.store.update_lane(self.row.id, state=LaneState.SAVED)
        run.log("saved-aside", lane=self.row.id, detail=str(moved))
        return moved

    async def _view(self, moved: Path) -> str | None:
        """The save's reviewable view, derived from its lossless copy.

        None if it cannot be made (the copy is what counts; the reason is recorded).
        """
        run = self.run
        try:
            save = await view_of_save(
                run.plan.repo,
                moved,
                run=run.id,
                lane_id=self.row.id,
                message=f"{run.id} {self.row.id}",
            )
        except SaveFailed as exc:
            run.log("view-failed", lane=self.row.id, detail=str(exc))
            run.store.update_lane(self.row.id, note=f"saved at {moved}; {exc}")
            run.say(f"{self.row.item}: saved aside at {moved}; {exc}")
            return None
        run.store.update_lane(self.row.id, saved=(save.ref, save.commit))
        run.log("saved", lane=self.row.id, detail=f"{save.ref} {save.commit}")
        return save.commit

    async def _halt(self) -> LaneEnd:
        """Steps 3 and 4 of the halt for a lane whose agent is gone.

        The save is the rename of the lane's directory (constant time whatever it
        holds); the claim is released then, and the save's view is derived once the
        run is marked halted (a take-over makes it if the run dies first).
        """
        assert self.call is None  # spec 03: its process tree is checked empty first
        run = self.run
        lane_id = self.row.id
        moved = await self._move()
        if run.killed:
            return LaneEnd.KILLED  # its claim is left for the restart path
        if moved is None:
            run.store.update_lane(lane_id, state=LaneState.HELD, note="save failed")
            run.say(f"{self.row.item}: holding the lane and its claim: its save failed")
            with anyio.move_on_after(run.save_retry):
                while moved is None:
                    await anyio.sleep(run.poll)
                    moved = await self._move()
            if moved is None:
                rows = [row for row in run.store.lanes(run.id) if row.id == lane_id]
                why = (rows[0].held_reason if rows else None) or "save failed"
                run.store.update_lane(lane_id, state=LaneState.HELD, note=why)
                run.log("held", lane=lane_id, detail=why)
                run.say(f"{self.row.item}: held: {why}")
                return LaneEnd.HELD
            if run.killed:
                return LaneEnd.KILLED
        run.say(f"{self.row.item}: saved aside at {moved}")
        crash_point("save-release")
        try:
            run.store.release(self.claim)
        except StaleClaim as exc:
            run.log("fenced", lane=lane_id, detail=str(exc))
            return LaneEnd.FENCED
        run.log("released", lane=lane_id, detail=self.row.item)
        crash_point("released")
        run.store.update_lane(lane_id, state=LaneState.HALTED)
        run.log("lane-halted", lane=lane_id)

        async def view() -> None:
            await self._view(moved)

        run.after_halt(view)
        return LaneEnd.HALTED


def retry_stage(
    store: Store, item: str, previous: LaneRow | None, stages: int
) -> int | None:
    """The stage a retried item starts at: the one its failed lane failed at.

    None when the item's newest lane did not fail (a new item, a take-over), or
    `previous` (a saved lane to restore) is newer. The failed lane's stage is where
    it failed (`tether queue retry --from-start` sets it to 0); the branch
    `tether/ITEM` holds what the stages before it did.
    """
    lanes = store.item_lanes(item)
    newest = lanes[-1] if lanes else None
    if newest is None or (previous is not None and newest.id == previous.id):
        return None
    if newest.state is not LaneState.DONE or not newest.note:
        return None
    return newest.stage if 0 <= newest.stage < stages else 0
