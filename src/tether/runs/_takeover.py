"""The restart path and take-over: find a run that died, save its worktrees, step on.

A run whose ledger says it works but whose process is gone (pid and start time on its
host) or whose leases all expired (another host) is dead. Before anything else its
worktrees are saved aside (nothing in a worktree is deleted unsaved); a take-over then
re-claims what is still free and restores the saved work into fresh worktrees — only
while no stop stands (spec 03).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .._threads import in_thread
from ..errors import Refused, UsageError
from ..stop import ReadOutcome, StopWatch
from ._lanes import SaveFailed, save_aside, saved_ref
from ._liveness import here, is_dead
from ._store import Store, crash_point
from ._values import ACTIVE_RUN_STATES, LaneRow, LaneState, RunRow, RunState

__all__ = ("effective_state", "prepare_takeover")


def _leases_expired(store: Store, run: RunRow, now: float) -> bool:
    """Whether the run's own heartbeat and every claim's lease ended before `now`."""
    if run.expires is not None and run.expires >= now:
        return False
    return all(claim.expires < now for claim in store.claims(run.id))


def effective_state(
    store: Store, run: RunRow, *, here_id: str | None = None
) -> RunState:
    """A run's state, after the restart path: an active run whose process died is dead.

    A run of this host (`here_id`, default `here()`) is judged by its process; a run of
    another host by its leases, on the store's clock. A dead run found this way is
    recorded as such in the store.
    """
    if run.state not in ACTIVE_RUN_STATES or not is_dead(
        run,
        leases_expired=_leases_expired(store, run, store.now()),
        here_id=here_id,
    ):
        return run.state
    if run.host == (here_id if here_id is not None else here()):
        why = f"process {run.pid} on {run.host} is gone"
    else:
        why = f"its leases expired on the store's clock (host {run.host})"
    store.set_run_state(run.id, RunState.DEAD)
    store.log(run.id, "dead", detail=why)
    return RunState.DEAD


async def prepare_takeover(
    store: Store,
    run_id: str,
    watch: StopWatch,
    say: Callable[[str], None],
    *,
    here_id: str | None = None,
) -> tuple[RunRow, list[LaneRow]]:
    """Check that `run_id` may be taken over, save its worktrees, list its open lanes.

    Returns:
        The run, and the lanes whose items a take-over works on (saved work first).

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
        raise Refused("a stop stands: lift it first with `tether lift`, then take over")
    if reading.outcome is ReadOutcome.HOLD:
        raise Refused(
            f"the stop cannot be read clearly ({reading.reason}); fix that first"
        )
    lanes = store.lanes(run_id)
    for lane in lanes:
        if lane.state not in (LaneState.OPEN, LaneState.IN_CALL, LaneState.HELD):
            continue
        if not await in_thread(Path(lane.worktree).exists):
            continue
        ref = saved_ref(run_id, lane.id)
        try:
            commit = await save_aside(
                Path(lane.worktree), ref, message=f"{run_id} {lane.id}"
            )
        except SaveFailed as exc:
            store.log(run_id, "save-failed", lane=lane.id, detail=str(exc))
            say(f"{lane.item}: left held: {exc}")
            continue
        store.update_lane(lane.id, state=LaneState.SAVED, saved=(ref, commit))
        store.log(
            run_id, "saved", lane=lane.id, detail=f"{ref} {commit} (restart path)"
        )
        say(f"{lane.item}: saved aside as {commit[:12]} (restart path)")
    crash_point("takeover")
    work = [
        lane
        for lane in store.lanes(run_id)
        if lane.state in (LaneState.SAVED, LaneState.HALTED)
    ]
    return previous, work
