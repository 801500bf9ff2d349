"""The claim / lane / save life cycle as a state machine, checked against a model on
both stores: hypothesis picks the order of takes, take-overs, renewals, receipts, saves,
releases and finishes by several runs, stale ones included; after every step the store
and the model agree: one holder per item, epochs only grow, a stale claim acts on
nothing, a finished item is never claimed again, a saved lane's save stays recorded."""

from __future__ import annotations

import contextlib
import itertools
import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tether.errors import StoreError
from tether.runs import (
    Claim,
    LaneRow,
    LaneState,
    Receipt,
    RunRow,
    RunState,
    StaleClaim,
    Store,
)
from tether.runs._sqlite import SqliteStore

from . import pg

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


ITEMS = ("a", "b", "c")
RUNS = ("r1", "r2", "r3")


class ClaimMachine(RuleBasedStateMachine):
    store: Store

    def __init__(self) -> None:
        super().__init__()
        self.holder: dict[str, tuple[str, int] | None] = dict.fromkeys(ITEMS)
        self.epoch: dict[str, int] = dict.fromkeys(ITEMS, 0)
        self.state: dict[str, str] = dict.fromkeys(ITEMS, "queued")
        self.claims: list[Claim] = []  # every claim ever handed out, stale ones too
        self.saved: dict[str, tuple[str, str]] = {}
        self.lanes = 0
        for item in ITEMS:
            self.store.add_item(item, f"do {item}")
        for run in RUNS:
            self.store.create_run(
                RunRow(
                    id=run,
                    state=RunState.RUNNING,
                    host="h",
                    pid=1,
                    pid_start=1.0,
                    started_at=1.0,
                    plan="p",
                    repo="r",
                )
            )

    def _current(self, claim: Claim) -> bool:
        return self.holder[claim.item] == (claim.run, claim.epoch)

    def _lane(self, claim: Claim) -> None:
        self.lanes += 1
        self.store.add_lane(
            LaneRow(
                id=claim.lane,
                run=claim.run,
                item=claim.item,
                state=LaneState.OPEN,
                branch=f"tether/{claim.item}",
                worktree=f"/lanes/{claim.lane}",
            )
        )

    @rule(run=st.sampled_from(RUNS))
    def take(self, run: str) -> None:
        lane = f"lane{self.lanes}"
        claim = self.store.take_claim(run, lane, only=None, host="h", pid=1, lease=60)
        free = [
            i for i in ITEMS if self.state[i] == "queued" and self.holder[i] is None
        ]
        if not free:
            assert claim is None
            return
        assert claim is not None
        assert claim.item == free[0]  # the first free item, in queue order
        assert claim.epoch == self.epoch[claim.item] + 1
        self.epoch[claim.item] = claim.epoch
        self.holder[claim.item] = (run, claim.epoch)
        self.claims.append(claim)
        self._lane(claim)

    @rule(
        run=st.sampled_from(RUNS),
        item=st.sampled_from(ITEMS),
        previous=st.sampled_from(RUNS),
    )
    def take_over(self, run: str, item: str, previous: str) -> None:
        lane = f"lane{self.lanes}"
        claim = self.store.take_over_claim(
            item, run, lane, previous=previous, host="h", pid=1, lease=60
        )
        held = self.holder[item]
        allowed = self.state[item] == "queued" and (held is None or held[0] == previous)
        assert (claim is not None) == allowed
        if claim is not None:
            assert claim.epoch == self.epoch[item] + 1
            self.epoch[item] = claim.epoch
            self.holder[item] = (run, claim.epoch)
            self.claims.append(claim)
            self._lane(claim)

    def _act(self, index: int, act: str) -> None:
        if not self.claims:
            return
        claim = self.claims[index % len(self.claims)]
        current = self._current(claim)
        try:
            if act == "renew":
                self.store.renew(claim, 60)
            elif act == "receipt":
                self.store.record_receipt(
                    claim,
                    Receipt(
                        run=claim.run,
                        lane=claim.lane,
                        item=claim.item,
                        stage="s",
                        exit_status=0,
                        log_tail="",
                    ),
                )
            elif act == "release":
                self.store.release(claim)
            else:
                self.store.finish(claim, failed=act == "fail")
        except StaleClaim:
            assert not current, f"{act} of a current claim refused"
            return
        assert current, f"{act} of a stale claim went through"
        if act == "release":
            self.holder[claim.item] = None
        elif act in ("finish", "fail"):
            self.holder[claim.item] = None
            self.state[claim.item] = "done" if act == "finish" else "failed"

    @rule(
        index=st.integers(0, 50),
        act=st.sampled_from(["renew", "receipt", "release", "finish", "fail"]),
    )
    def act(self, index: int, act: str) -> None:
        self._act(index, act)

    @rule(index=st.integers(0, 50))
    def save(self, index: int) -> None:
        if not self.claims:
            return
        claim = self.claims[index % len(self.claims)]
        saved = (f"refs/tether/saved/{claim.run}/{claim.lane}", f"{index:040x}")
        if claim.lane in self.saved:
            # Saved already: a lane is saved once (LaneState); the record stays.
            with pytest.raises(StoreError, match="is saved: it cannot become saved"):
                self.store.update_lane(claim.lane, state=LaneState.SAVED, saved=saved)
            return
        self.store.update_lane(claim.lane, state=LaneState.SAVED, saved=saved)
        self.saved[claim.lane] = saved

    @invariant()
    def agrees(self) -> None:
        items = {i.id: i for i in self.store.items()}
        held = {c.item: (c.run, c.epoch) for c in self.store.claims()}
        for item in ITEMS:
            assert items[item].state == self.state[item]
            assert held.get(item) == self.holder[item]
        for run in RUNS:
            for lane in self.store.lanes(run):
                if lane.id in self.saved:
                    assert (lane.saved_ref, lane.saved_commit) == self.saved[lane.id]


@pytest.fixture(params=["sqlite", "postgres"])
def machine(request: pytest.FixtureRequest, tmp_path: Path) -> type[ClaimMachine]:
    """The machine bound to a fresh store of the backend for each example."""
    count = itertools.count()

    def fresh(stack: contextlib.ExitStack) -> Store:
        n = next(count)
        if request.param == "postgres":
            from tether.runs._postgres import PostgresStore

            server = request.getfixturevalue("pg_server")
            url = stack.enter_context(pg.fresh_database(server, f"m{os.getpid()}_{n}"))
            store: Store = PostgresStore.open(url)
        else:
            store = SqliteStore.open(tmp_path / f"machine{n}.sqlite3")
        stack.callback(store.close)
        return store

    class Bound(ClaimMachine):
        def __init__(self) -> None:
            self._stack = contextlib.ExitStack()
            self.store = fresh(self._stack)
            super().__init__()

        def teardown(self) -> None:
            self._stack.close()

    return Bound


@pytest.mark.rule("claims")
@pytest.mark.rule("no-crash-strands")
def test_the_claim_life_cycle_matches_its_model(machine: type[ClaimMachine]) -> None:
    machine.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
        ],
    )
    machine.TestCase().runTest()
