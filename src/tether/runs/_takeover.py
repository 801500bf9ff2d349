"""The restart path and take-over: find a run that died, save its lanes, step on.

A run whose ledger says it works but whose process is gone (pid and start time on its
host) or whose leases all expired (another host) is dead. Before anything else its lanes
are saved aside losslessly (nothing of a lane is deleted unsaved); a take-over then
re-claims what is still free and restores the saved work into fresh lanes — only while
no stop stands (spec 03).

Whatever point the run (or an earlier take-over) died at, its items come back:

- a lane whose directory is still there is saved (moved aside) now;
- a lane moved aside whose save was never recorded has it recorded from `saves/`;
- a lane recorded whose directory was never made (or whose restore was cut) has
  nothing of its own: its item goes on from the newest complete save of any run;
- a claim taken whose lane was never recorded is released, back to the queue;
- a lane whose save fails is left held with its claim, and the run stays one a later
  take-over may take once the person fixed what failed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, final

import attrs

from .._accounts import who
from .._threads import in_thread
from ..errors import Refused, StoreError, UsageError
from ..stop import ReadOutcome, StopWatch
from ._lane_git import (
    SaveFailed,
    find_saves,
    lossless_save,
    move_aside,
    view_of_save,
)
from ._liveness import effective_state, found_dead, here
from ._store import Store, crash_point
from ._values import (
    ACTIVE_RUN_STATES,
    AgentSession,
    Claim,
    LaneRow,
    LaneState,
    RunState,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = (
    "Takeover",
    "earlier_session",
    "effective_state",
    "found_dead",
    "newest_saved_lane",
    "prepare_takeover",
    "takeover_chain",
)


@final
@attrs.frozen(kw_only=True)
class Takeover:
    """A take-over made ready (`prepare_takeover`): what the new run goes on with.

    The new run marks the run taken over (`mark`) once it is recorded, then claims the
    item of each of `lanes` (`claim`) before any other; each lane it opens goes on
    from the lane named here.
    """

    of: str
    """The run taken over."""
    chain: tuple[str, ...]
    """`of`, then the runs it took over that were never taken over by another: the
    runs whose claims the new run may take."""
    lanes: tuple[LaneRow, ...]
    """For each item to go on with, the lane it goes on from (its newest save)."""
    held_items: tuple[str, ...]
    """Items whose lanes stay `LaneState.HELD` in the runs taken over (their saves
    failed: kept for a person)."""
    lines: tuple[str, ...]
    """What the restart path did, to be told after the new run's `run <id>`."""

    def mark(self, store: Store, by: str) -> list[str]:
        """Record that the run `by` took `of` over; the lines that say so.

        A run with held lanes keeps them (and its state): once the person fixed what
        failed, a later take-over of the same run saves and restores them.

        Raises:
            Refused: another take-over marked `of` first.
        """
        held = self.held_items
        if held:
            store.log(self.of, "taken-over", detail=f"by {by}, held: {list(held)}")
            lines = [
                f"{self.of} keeps {len(held)} held lane(s) "
                f"({', '.join(held)}): fix what its save says, then "
                f"`tether takeover {self.of}` again"
            ]
        else:
            try:
                store.set_run_state(self.of, RunState.TAKEN_OVER)
            except StoreError:
                row = store.run(self.of)
                if row is None or row.state is not RunState.TAKEN_OVER:
                    raise
                raise Refused(
                    f"run {self.of} was taken over by another take-over meanwhile: "
                    "see `tether runs`"
                ) from None
            store.log(self.of, "taken-over", detail=f"by {by}")
            lines = []
        return [*lines, f"taking over {self.of}: {len(self.lanes)} lane(s) to restore"]

    def claim(
        self, store: Store, lane: LaneRow, run: str, lane_id: str, *, lease: float
    ) -> Claim | None:
        """Take the claim on `lane`'s item from the run of the chain that holds it.

        None when another run holds it now (a peer took it up once it was released).
        """
        owner = next((c.run for c in store.claims() if c.item == lane.item), None)
        return store.take_over_claim(
            lane.item,
            run,
            lane_id,
            previous=owner if owner in self.chain else self.of,
            host=here(),
            pid=os.getpid(),
            lease=lease,
        )


async def prepare_takeover(
    store: Store,
    run_id: str,
    watch: StopWatch,
    *,
    here_id: str | None = None,
) -> Takeover:
    """Check that `run_id` may be taken over, save its worktrees, list its lanes.

    Raises:
        UsageError: no such run.
        Refused: the run is alive, finished or already taken over, or a stop stands.
    """
    previous = store.run(run_id)
    if previous is None:
        raise UsageError(f"no run {run_id} in {store.url}; see `tether runs`")
    state = effective_state(store, previous, here_id=here_id)
    if state in ACTIVE_RUN_STATES:
        raise Refused(
            f"run {run_id} is alive (pid {previous.pid} on {previous.host}); "
            "set a stop with `tether stop` and take it over once it halted"
        )
    if state in (RunState.DONE, RunState.TAKEN_OVER):
        raise Refused(f"run {run_id} is {state.value}: there is nothing to take over")
    reading = watch.read()
    if reading.outcome is ReadOutcome.STOPPED:
        # The account taking over is often not the one that may lift: say who may.
        person = "?" if reading.set_by_uid is None else who(reading.set_by_uid)
        mine = reading.set_by_uid == os.geteuid()
        lifter = (
            "lift it with `tether lift` from your own terminal"
            if mine
            else f"only {person} may lift it (`tether lift` from their own terminal)"
        )
        raise Refused(f"a stop set by {person} stands: {lifter}; then take over")
    if reading.outcome is ReadOutcome.HOLD:
        raise Refused(
            f"the stop cannot be read clearly ({reading.reason}); fix that first"
        )
    repo = Path(previous.repo)
    held: list[LaneRow] = []
    lines: list[str] = []
    chain = takeover_chain(store, run_id)
    for rid in chain:
        await _recover(store, repo, rid, lines.append, held)
    crash_point("takeover")
    items = tuple(dict.fromkeys(lane.item for lane in held))
    return Takeover(
        of=run_id,
        chain=tuple(chain),
        lanes=tuple(_work(store, chain, set(items))),
        held_items=items,
        lines=tuple(lines),
    )


async def _recover(
    store: Store,
    repo: Path,
    rid: str,
    say: Callable[[str], None],
    held: list[LaneRow],
) -> None:
    """Save what the lanes of the dead run `rid` hold, and settle what else it left.

    Saves it made unrecorded are recorded, and its claims that never got a lane are
    released; lanes left held go into `held`.
    """
    finished = {i.id for i in store.items() if i.state in ("done", "failed")}
    for lane in store.lanes(rid):
        if lane.state not in (LaneState.OPEN, LaneState.IN_CALL, LaneState.HELD):
            continue
        if lane.item in finished:
            # Its item was finished; the run died before it marked the lane. Its
            # directory stays as a done lane's does, until `tether lanes prune`.
            store.update_lane(lane.id, state=LaneState.DONE)
            store.log(rid, "lane-done", lane=lane.id, detail="(restart path)")
            continue
        if not await in_thread(Path(lane.worktree).exists):
            await _unrecorded_save(store, repo, rid, lane, say)
            continue
        try:
            moved = await move_aside(Path(lane.worktree), run=rid, lane_id=lane.id)
        except SaveFailed as exc:
            why = str(exc)
            store.update_lane(lane.id, state=LaneState.HELD, note=why, held_reason=why)
            store.log(rid, "save-failed", lane=lane.id, detail=str(exc))
            say(f"{lane.item}: left held: {exc}")
            held.append(lane)
            continue
        store.update_lane(lane.id, state=LaneState.SAVED)
        store.log(rid, "saved-aside", lane=lane.id, detail=f"{moved} (restart path)")
        await _view(store, repo, rid, lane, moved, say)
    for lane in store.lanes(rid):
        if (
            lane.state in (LaneState.SAVED, LaneState.HALTED)
            and lane.saved_commit is None
            and lane.item not in finished
        ):
            # Saved aside, then the run died before the view was made: made now.
            found = await in_thread(find_saves, rid, lane.id)
            if found:
                await _view(store, repo, rid, lane, found[0], say)
    recorded = {lane.id for lane in store.lanes(rid)}
    for claim in store.claims(rid):
        if claim.lane not in recorded:
            # Taken, then the run died before it recorded the lane: nothing was done.
            store.release(claim)
            store.log(
                rid, "released", lane=claim.lane, detail=f"{claim.item} (no lane)"
            )
            say(f"{claim.item}: its claim had no lane; back in the queue")


async def _unrecorded_save(
    store: Store, repo: Path, run_id: str, lane: LaneRow, say: Callable[[str], None]
) -> None:
    """A lane with no directory: moved aside unrecorded, or never made at all."""
    found = await in_thread(find_saves, run_id, lane.id)
    if not found:
        store.update_lane(
            lane.id, state=LaneState.HALTED, note="nothing to save: no directory"
        )
        return
    store.update_lane(lane.id, state=LaneState.SAVED)
    store.log(
        run_id, "saved-aside", lane=lane.id, detail=f"{found[0]} (found in saves)"
    )
    say(f"{lane.item}: its save {found[0].name} was found (restart path)")
    await _view(store, repo, run_id, lane, found[0], say)


async def _view(
    store: Store,
    repo: Path,
    run_id: str,
    lane: LaneRow,
    saved: Path,
    say: Callable[[str], None],
) -> None:
    """Make and record the view of a save.

    A save whose view cannot be made stays saved (its lossless copy is what a
    take-over restores), the reason recorded.
    """
    try:
        save = await view_of_save(
            repo, saved, run=run_id, lane_id=lane.id, message=f"{run_id} {lane.id}"
        )
    except SaveFailed as exc:
        store.update_lane(lane.id, note=f"saved at {saved}; {exc}")
        store.log(run_id, "view-failed", lane=lane.id, detail=str(exc))
        say(f"{lane.item}: saved aside at {saved}; {exc}")
        return
    store.update_lane(lane.id, saved=(save.ref, save.commit))
    store.log(run_id, "saved", lane=lane.id, detail=f"{save.ref} {save.commit}")
    say(f"{lane.item}: saved aside as {save.commit[:12]} (restart path)")


def _work(store: Store, chain: list[str], held: set[str]) -> list[LaneRow]:
    """Where the take-over goes on from, for each item of the runs taken over.

    Items done or held are left out. For each other item: its newest saved lane,
    else the item's lane.
    """
    work: list[LaneRow] = []
    seen: set[str] = set()
    for rid in chain:
        for lane in store.lanes(rid):
            if lane.item in seen or lane.item in held or lane.state is LaneState.DONE:
                continue
            seen.add(lane.item)
            work.append(newest_saved_lane(store, lane.item) or lane)
    return work


def newest_saved_lane(
    store: Store, item: str, *, besides: str | None = None
) -> LaneRow | None:
    """The newest saved-aside lane of `item` (of a run other than `besides`), or None.

    Its work is what a new lane of the item restores: a take-over's, or any run's that
    claims an item another run halted.
    """
    found = None
    for lane in store.item_lanes(item):
        if (
            lane.run != besides
            and lane.state in (LaneState.HALTED, LaneState.SAVED)
            and (lane.saved_commit is not None or lossless_save(lane) is not None)
        ):
            found = lane
    return found


def earlier_session(
    store: Store, previous: LaneRow, stage: str
) -> tuple[LaneRow, AgentSession] | None:
    """The agent session a lane going on from `previous` resumes, and its lane.

    Spec 03: a take-over resumes the agent's own session. It is the newest one the
    agent of `stage` recorded (`Store.record_session`) in a lane of the item, up to
    `previous`, that was at `previous`'s stage: a lane restored and lost before its
    agent started (a take-over of a take-over) passes on its own earlier session.
    """
    found = None
    for lane in store.item_lanes(previous.item):
        recorded = lane.session
        if (
            lane.stage == previous.stage
            and recorded is not None
            and recorded.stage == stage
        ):
            found = (lane, recorded)
        if lane.id == previous.id:
            break
    return found


def takeover_chain(store: Store, run_id: str) -> list[str]:
    """`run_id`, then the runs it took over that were never taken over by another.

    A take-over that died before it took their claims leaves them with them.
    """
    chain = [run_id]
    row = store.run(run_id)
    while row is not None and row.takeover_of is not None:
        earlier = store.run(row.takeover_of)
        if earlier is None or earlier.id in chain:
            break
        if earlier.state is not RunState.TAKEN_OVER:
            break
        chain.append(earlier.id)
        row = earlier
    return chain
