"""A run owns its life: `Run.start` makes and records it whole, with the take-over it
makes; it keeps its lanes while they work and lets each go as its end says."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from tether.errors import Refused
from tether.runs import RunState, Store
from tether.runs._lane_life import LaneEnd
from tether.runs._plan import load_plan
from tether.runs._run import ExitCode, Run
from tether.runs._sqlite import SqliteStore
from tether.runs._takeover import prepare_takeover
from tether.stop import StopStore
from tether.stop._setup import make_state_dir

from .support import make_repo, write_plan

if TYPE_CHECKING:
    from pathlib import Path

    from tether.runs._plan import Plan
    from tether.stop import StopWatch


def _parts(
    tmp_path: Path, stages: list[tuple[str, str]]
) -> tuple[Plan, Store, StopWatch]:
    make_state_dir()
    plan = load_plan(
        write_plan(tmp_path, make_repo(tmp_path), items=["a", "b"], stages=stages)
    )
    store = SqliteStore.open(tmp_path / "store" / "runs.sqlite3")
    for item in plan.items:
        store.add_item(item.id, item.brief)
    return plan, store, StopStore.from_setup().watch()


def _state(store: Store, run: str) -> RunState:
    row = store.run(run)
    assert row is not None
    return row.state


@pytest.mark.anyio
async def test_two_takeovers_of_one_run_mark_it_once_and_the_later_claims_nothing(
    tmp_path: Path,
) -> None:
    """Both were made ready while the run was halted; the one that marks it second is
    refused before it claims anything, and its own run ends done (a tether choice,
    held by the store's run moves: taken-over is final)."""
    plan, store, watch = _parts(tmp_path, [("one", "true")])
    said: list[str] = []
    old = Run.start(plan, store, watch, said.append).id
    store.set_run_state(old, RunState.HALTING)
    store.set_run_state(old, RunState.HALTED)
    first = await prepare_takeover(store, old, watch)
    second = await prepare_takeover(store, old, watch)
    said.clear()
    taker = Run.start(plan, store, watch, said.append, takeover=first)
    with pytest.raises(Refused, match=f"run {old} was taken over by another"):
        Run.start(plan, store, watch, said.append, takeover=second)
    late = store.runs()[-1]
    assert (late.takeover_of, late.state) == (old, RunState.DONE)
    assert store.claims(late.id) == []
    assert _state(store, old) is RunState.TAKEN_OVER
    assert [e.detail for e in store.events(old) if e.kind == "taken-over"] == [
        f"by {taker.id}"
    ]
    assert said[0] == f"run {taker.id}"
    assert said[1] == f"taking over {old}: 0 lane(s) to restore"
    store.close()


def test_a_run_a_peer_found_dead_keeps_the_stores_word_and_says_so(
    tmp_path: Path,
) -> None:
    """Its own halt does not bring it back to halting: the move is refused, recorded
    and told (a tether choice: the claims' epochs fence its lanes)."""
    plan, store, watch = _parts(tmp_path, [("one", "true")])
    said: list[str] = []
    run = Run.start(plan, store, watch, said.append)
    store.set_run_state(run.id, RunState.DEAD)
    run.request_halt("stop", "by the person")
    assert _state(store, run.id) is RunState.DEAD
    assert "state-refused" in [e.kind for e in store.events(run.id)]
    assert any(f"run {run.id} is dead in the store" in line for line in said)
    store.close()


@pytest.mark.anyio
async def test_a_run_keeps_its_lanes_while_they_work_and_lets_each_go_at_its_end(
    tmp_path: Path,
) -> None:
    """The run's registry holds a lane from its opening until it ends, whichever way;
    a held lane alone stays (its claim still renewed). A tether choice."""
    plan, store, watch = _parts(tmp_path, [("one", '[ "$TETHER_ITEM" = a ]')])
    run = Run.start(plan, store, watch, lambda line: None)
    seen: list[set[str]] = []
    # Called at every record of the run: a lane's `lane-open`, `stage-start`, ...
    run.on_change = lambda: seen.append({lane.row.item for lane in run.lanes.values()})
    with anyio.fail_after(30):
        code = await run.execute()
    assert code is ExitCode.FAILED
    assert {"a", "b"} <= set().union(*seen)
    assert dict(run.lanes) == {}
    assert [end for end in LaneEnd if end.stays] == [LaneEnd.HELD]
    store.close()
