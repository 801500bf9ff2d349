"""A lane whose last stage ends during a halt: the halt waits for no view of it.

Spec 05: stop seen -> halted within 2 s whatever a lane holds; what is derived (the
view of a lane's uncommitted work) comes after. A lane that finishes its last stage
while the run halts is done, not saved aside; the view of what it left uncommitted is
made once the run is marked halted, as a saved lane's is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from tests.waiting import wait_until

from tether.runs import LaneState, RunState
from tether.stop import set_stop

from .support import (
    WAIT_FOR_GO,
    git,
    make_repo,
    open_default_store,
    run_id_of,
    start,
    write_plan,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


BIG = 8 << 20
"""Bytes of uncommitted work the lane leaves: its view must read them all."""
HALT_BOUND = 2.0
"""Seconds from the agent's receipt to the run marked halted (spec 05: 2 s)."""


@pytest.mark.rule("halt-order")
def test_a_last_stage_ending_during_a_halt_gets_its_view_after_the_halt(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["one"],
        stages=[
            (
                "implement",
                f"head -c {BIG} /dev/urandom > big.bin; echo more >> README.md; "
                + WAIT_FOR_GO.format(stage="impl"),
            )
        ],
    )
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(lambda: (marks / "one.impl").exists(), what="the agent busy")
    set_stop("test")
    store = open_default_store()
    wait_until(
        lambda: any(e.kind == "stop-observed" for e in store.events(run)),
        what="stop seen",
    )
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3, proc.communicate()

    events = store.events(run)
    (lane,) = store.lanes(run)
    at = {(e.kind, e.lane): e for e in events}
    receipt = at["receipt", lane.id]
    done = at["lane-done", lane.id]
    halted = at["halted", None]
    view = at["saved", lane.id]
    # Its last stage ended during the halt: the lane is done, the run halted first,
    # its view made after.
    assert receipt.seq < done.seq < halted.seq < view.seq
    assert halted.at - receipt.at <= HALT_BOUND
    assert lane.state is LaneState.DONE
    assert store.run(run).state is RunState.HALTED  # type: ignore[union-attr]
    assert lane.saved_ref is not None
    assert git(repo, "cat-file", "-s", f"{lane.saved_ref}:big.bin") == str(BIG)
    assert git(repo, "show", f"{lane.saved_ref}:README.md") == "hello\nmore"
