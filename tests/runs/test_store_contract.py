"""The store contract: every backend passes this same suite (spec 03, claims)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from tether.runs._values import LANE_MOVES_INTO, RUN_MOVES_INTO, AgentSession

from .support import check_lane_of_before, write_lane_of_before

if TYPE_CHECKING:
    from tests.clocks import Clock

    from .conftest import StoreFactory


_S = TypeVar("_S", LaneState, RunState)


def _take(
    store: Store, run: str, lane: str = "lane", lease: float = 60.0
) -> Claim | None:
    return store.take_claim(run, lane, only=None, host="h", pid=1, lease=lease)


def test_queue_keeps_items_in_order_and_refuses_a_second_item_of_one_id(
    store: Store,
) -> None:
    """Items come back in the order added; a repeated id is refused (a tether choice)."""
    assert store.add_item("b", "do b")
    assert store.add_item("a", "do a")
    assert not store.add_item("a", "again")
    assert [(i.id, i.brief, i.state) for i in store.items()] == [
        ("b", "do b", "queued"),
        ("a", "do a", "queued"),
    ]


@pytest.mark.rule("claims")
def test_a_claim_is_taken_once_and_its_epoch_grows_with_each_take(store: Store) -> None:
    """Two takes never get one item; a released item is taken again at a higher epoch."""
    store.add_item("a", "do a")
    first = _take(store, "run1")
    assert first is not None
    assert first.item == "a"
    assert first.epoch == 1
    assert _take(store, "run2") is None
    store.release(first)
    second = _take(store, "run2")
    assert second is not None
    assert second.epoch == 2
    assert second.run == "run2"


@pytest.mark.rule("claims")
def test_a_stale_epoch_is_refused_for_receipt_renewal_release_and_finish(
    store: Store,
) -> None:
    """A lane whose item was re-claimed by a take-over cannot act on it any more."""
    store.add_item("a", "do a")
    old = _take(store, "run1")
    assert old is not None
    new = store.take_over_claim(
        "a", "run2", "lane2", previous="run1", host="h", pid=2, lease=60
    )
    assert new is not None
    assert new.epoch == old.epoch + 1
    receipt = Receipt(
        run="run1", lane="lane", item="a", stage="s", exit_status=0, log_tail=""
    )
    with pytest.raises(StaleClaim, match="no longer current"):
        store.record_receipt(old, receipt)
    with pytest.raises(StaleClaim):
        store.renew(old, 60)
    with pytest.raises(StaleClaim):
        store.release(old)
    with pytest.raises(StaleClaim):
        store.finish(old)
    store.finish(new)
    assert [i.state for i in store.items()] == ["done"]
    assert store.claims() == []


def test_take_over_claim_refuses_an_item_another_run_holds(store: Store) -> None:
    """A take-over of run1 cannot take what run3 holds, nor a finished item."""
    store.add_item("a", "do a")
    store.add_item("b", "do b")
    held = _take(store, "run3")
    assert held is not None
    assert held.item == "a"
    assert (
        store.take_over_claim(
            "a", "run2", "l", previous="run1", host="h", pid=2, lease=9
        )
        is None
    )
    b = _take(store, "run1")
    assert b is not None
    store.finish(b)
    assert (
        store.take_over_claim(
            "b", "run2", "l", previous="run1", host="h", pid=2, lease=9
        )
        is None
    )


def test_renewal_moves_the_expiry_on_the_store_clock(
    store: Store, clock: Clock
) -> None:
    """A lease runs from the store's clock; a renewal extends it from now."""
    store.add_item("a", "do a")
    claim = _take(store, "run1", lease=60)
    assert claim is not None
    assert claim.expires == clock.now + 60
    clock.now += 30
    renewed = store.renew(claim, 60)
    assert renewed.expires == clock.now + 60
    assert store.claims("run1")[0].expires == renewed.expires


def test_take_claim_only_takes_items_of_the_plan(store: Store) -> None:
    """A run whose plan names items claims only those, never the rest of the queue."""
    store.add_item("a", "do a")
    store.add_item("b", "do b")
    claim = store.take_claim("r", "l", only=["b"], host="h", pid=1, lease=5)
    assert claim is not None
    assert claim.item == "b"
    assert store.take_claim("r", "l", only=["b"], host="h", pid=1, lease=5) is None
    assert store.take_claim("r", "l", only=[], host="h", pid=1, lease=5) is None


def test_runs_lanes_receipts_and_the_ledger_round_trip(store: Store) -> None:
    """What is recorded is read back, in order."""
    run = _running("run1")
    store.create_run(run)
    store.set_run_state("run1", RunState.HALTING)
    assert store.run("run1") == attrs.evolve(run, state=RunState.HALTING)
    assert store.run("nope") is None
    lane = LaneRow(
        id="lane1",
        run="run1",
        item="a",
        state=LaneState.OPEN,
        branch="tether/a",
        worktree="/w",
    )
    store.add_lane(lane)
    store.update_lane("lane1", state=LaneState.SAVED, stage=1, saved=("ref", "c0ffee"))
    (got,) = store.lanes("run1")
    assert (got.state, got.stage, got.saved_ref, got.saved_commit) == (
        LaneState.SAVED,
        1,
        "ref",
        "c0ffee",
    )
    store.add_item("a", "do a")
    claim = _take(store, "run1", "lane1")
    assert claim is not None
    receipt = Receipt(
        run="run1",
        lane="lane1",
        item="a",
        stage="s",
        exit_status=3,
        log_tail="bye",
        commits=("abc",),
        at=7.0,
    )
    store.record_receipt(claim, receipt)
    assert store.receipts("run1") == [receipt]
    store.log("run1", "one")
    store.log("run1", "two", lane="lane1", detail="d")
    store.log("run2", "other")
    assert [(e.kind, e.lane, e.detail) for e in store.events("run1")] == [
        ("one", None, ""),
        ("two", "lane1", "d"),
    ]


def _lane_in(store: Store, lane: str, path: list[LaneState]) -> None:
    store.add_lane(
        LaneRow(
            id=lane,
            run="run1",
            item=lane,
            state=LaneState.OPEN,
            branch=f"tether/{lane}",
            worktree=f"/w/{lane}",
        )
    )
    for state in path:
        store.update_lane(lane, state=state)


def _lane(store: Store, lane: str) -> LaneRow:
    return next(row for row in store.lanes("run1") if row.id == lane)


def _path_to(moves: dict[_S, frozenset[_S]], start: _S, state: _S) -> list[_S]:
    """The shortest legal path from `start` to `state` (`start` itself: none)."""
    reached: dict[_S, list[_S]] = {start: []}
    while state not in reached:
        for to, froms in moves.items():
            for before in list(reached):
                if before in froms and to not in reached:
                    reached[to] = reached[before] + [to]
    return reached[state]


def test_a_store_makes_exactly_the_lane_moves_lanestate_allows(store: Store) -> None:
    """Every (from, to) pair: the legal moves are made, the rest refused unchanged."""
    n = 0
    for before in LaneState:
        for to in LaneState:
            n += 1
            lane = f"l{n}"
            _lane_in(store, lane, _path_to(LANE_MOVES_INTO, LaneState.OPEN, before))
            if before in LANE_MOVES_INTO[to]:
                store.update_lane(lane, state=to, note="moved")
                assert _lane(store, lane).state is to
            else:
                with pytest.raises(StoreError, match=f"lane {lane} is {before.value}"):
                    store.update_lane(lane, state=to, note="moved")
                got = _lane(store, lane)
                assert (got.state, got.note) == (before, None)
    with pytest.raises(StoreError, match="not in the store"):
        store.update_lane("nope", state=LaneState.DONE)
    assert {LaneState.DONE, LaneState.HALTED}.isdisjoint(
        set().union(*LANE_MOVES_INTO.values())
    ), "done and halted are final"


def test_a_store_makes_exactly_the_run_moves_runstate_allows(store: Store) -> None:
    """Every (from, to) pair: the legal moves are made, the rest refused unchanged.

    A tether choice, as for lanes: a run a peer found dead cannot come back by writing
    its own state, and two take-overs of one run cannot both mark it taken over.
    """
    n = 0
    for before in RunState:
        for to in RunState:
            n += 1
            run = f"run{n}"
            store.create_run(_running(run))
            for state in _path_to(RUN_MOVES_INTO, RunState.RUNNING, before):
                store.set_run_state(run, state)
            if before in RUN_MOVES_INTO[to]:
                store.set_run_state(run, to)
                assert _state_of(store, run) is to
            else:
                with pytest.raises(StoreError, match=f"run {run} is {before.value}"):
                    store.set_run_state(run, to)
                assert _state_of(store, run) is before
    with pytest.raises(StoreError, match="not in the store"):
        store.set_run_state("nope", RunState.DEAD)
    assert {RunState.DONE, RunState.TAKEN_OVER}.isdisjoint(
        set().union(*RUN_MOVES_INTO.values())
    ), "done and taken-over are final"


def _running(run: str, *, host: str = "h", pid: int = 5) -> RunRow:
    """A run row as a run records itself (running)."""
    return RunRow(
        id=run,
        state=RunState.RUNNING,
        host=host,
        pid=pid,
        pid_start=1.5,
        started_at=2.5,
        plan="/p.toml",
        repo="/r",
    )


def _state_of(store: Store, run: str) -> RunState:
    row = store.run(run)
    assert row is not None
    return row.state


def test_the_store_file_is_owner_only_and_a_loose_one_is_refused(
    tmp_path: os.PathLike[str],
) -> None:
    """The SQLite file is created 0600; a file others may write is refused (spec 02)."""
    from pathlib import Path

    from tether.errors import StoreError

    path = Path(tmp_path) / "s" / "runs.sqlite3"
    SqliteStore.open(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o666)
    with pytest.raises(StoreError, match="chmod go-w"):
        SqliteStore.open(path)


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["take", "release", "finish", "renew", "takeover"]),
        st.integers(0, 1),
        st.integers(0, 3),
    ),
    max_size=40,
)


@pytest.mark.rule("claims")
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_OPS)
def test_two_runs_never_hold_one_item_over_any_interleaving(
    store_factory: StoreFactory, ops: list[tuple[str, int, int]]
) -> None:
    """Two runs on two connections to one store, their acts interleaved every way
    hypothesis finds: no item is ever held by both, nor finished twice."""
    stores = [store_factory(), store_factory()]
    try:
        _interleave(stores, ops)
    finally:
        for store in stores:
            store.close()


def _interleave(stores: list[Store], ops: list[tuple[str, int, int]]) -> None:
    tag = os.urandom(4).hex()
    runs = [f"r0-{tag}", f"r1-{tag}"]
    items = [f"i{n}-{tag}" for n in range(3)]
    for item in items:
        stores[0].add_item(item, "b")
    held: list[list[Claim]] = [[], []]
    finished: list[str] = []
    for op, who, n in ops:
        store, run = stores[who], runs[who]
        try:
            if op == "take":
                claim = store.take_claim(
                    run, "l", only=items, host="h", pid=who, lease=60
                )
                if claim is not None:
                    held[who].append(claim)
            elif op == "takeover":
                item = items[n % len(items)]
                claim = store.take_over_claim(
                    item, run, "l", previous=runs[1 - who], host="h", pid=who, lease=60
                )
                if claim is not None:
                    held[who].append(claim)
            elif held[who]:
                claim = held[who][n % len(held[who])]
                if op == "release":
                    store.release(claim)
                    held[who].remove(claim)
                elif op == "finish":
                    store.finish(claim)
                    held[who].remove(claim)
                    finished.append(claim.item)
                else:
                    store.renew(claim, 60)
        except StaleClaim:
            held[who] = [c for c in held[who] if c is not claim]
        current = {c.item: c for c in store.claims() if c.item in items}
        assert len(finished) == len(set(finished))
        for item in items:
            # However the acts interleave, at most one run's claim on an item is current.
            believers = [
                c
                for who_ in (0, 1)
                for c in held[who_]
                if c.item == item
                and item in current
                and (c.run, c.epoch) == (current[item].run, current[item].epoch)
            ]
            assert len(believers) <= 1


def _dead_pid() -> int:
    """A pid whose process has exited (and been reaped)."""
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.rule("several-machines")
def test_a_run_of_another_host_is_judged_by_its_leases_on_the_store_clock(
    store_factory: StoreFactory, clock: Clock
) -> None:
    """Two store users that are two hosts: host beta never judges alpha's pid (it may
    name any process there), only alpha's leases on the store's clock; alpha itself
    judges its own run by its process."""
    from tether.runs._liveness import process_start
    from tether.runs._takeover import effective_state

    alpha, beta = store_factory(), store_factory()
    dead = RunRow(
        id="run-gone",
        state=RunState.RUNNING,
        host="alpha",
        pid=_dead_pid(),
        pid_start=1.0,
        started_at=clock.now,
        plan="/p.toml",
        repo="/r",
    )
    alive = attrs.evolve(
        dead, id="run-alive", pid=os.getpid(), pid_start=process_start()
    )
    for run, item in ((dead, "a"), (alive, "b")):
        alpha.create_run(run)
        alpha.add_item(item, "do it")
        claim = alpha.take_claim(
            run.id, "l", only=[item], host="alpha", pid=run.pid, lease=60
        )
        assert claim is not None

    def state(store: Store, run: RunRow, here_id: str) -> RunState:
        row = store.run(run.id)
        assert row is not None
        return effective_state(store, row, here_id=here_id)

    # Beta: leases still current, so both runs count as alive whatever their pids.
    assert state(beta, dead, "beta") is RunState.RUNNING
    assert state(beta, alive, "beta") is RunState.RUNNING
    # Alpha: its own run whose process is gone is dead at once, leases or not.
    assert state(alpha, dead, "alpha") is RunState.DEAD
    assert "process" in alpha.events("run-gone")[-1].detail
    # Past the lease on the store's clock, beta finds the live run dead by its leases;
    # alpha, which can see the process, still counts it alive.
    clock.now += 61
    assert state(alpha, alive, "alpha") is RunState.RUNNING
    assert state(beta, alive, "beta") is RunState.DEAD
    assert beta.events("run-alive")[-1].detail == (
        "its leases expired on the store's clock (host alpha)"
    )


@pytest.mark.rule("several-machines")
def test_an_idle_run_of_another_host_lives_by_its_own_heartbeat(
    store_factory: StoreFactory, clock: Clock
) -> None:
    """A run holding no claim (idle, between items) is not found dead by another host
    while its own heartbeat is current; it is once the heartbeat's lease ran out."""
    from tether.runs._takeover import effective_state

    alpha, beta = store_factory(), store_factory()
    run = RunRow(
        id="run-idle",
        state=RunState.RUNNING,
        host="alpha",
        pid=_dead_pid(),
        pid_start=1.0,
        started_at=clock.now,
        plan="/p.toml",
        repo="/r",
    )
    alpha.create_run(run)
    alpha.beat(run.id, 60)
    seen = beta.run(run.id)
    assert seen is not None
    assert seen.expires == clock.now + 60
    assert effective_state(beta, seen, here_id="beta") is RunState.RUNNING
    clock.now += 30
    alpha.beat(run.id, 60)
    clock.now += 45
    seen = beta.run(run.id)
    assert seen is not None
    assert effective_state(beta, seen, here_id="beta") is RunState.RUNNING
    clock.now += 16
    assert effective_state(beta, seen, here_id="beta") is RunState.DEAD


@pytest.mark.rule("several-machines")
def test_a_run_found_dead_on_a_stale_read_keeps_the_state_it_moved_to(
    store_factory: StoreFactory, clock: Clock
) -> None:
    """Two peers read a run as running past its lease; it ends (done) before the first
    marks it, and the second marks it dead before the other: each gets the store's word,
    and only the one that moved it records why (a regression of `set_run_state`)."""
    from tether.runs._takeover import effective_state

    own, beta, gamma = store_factory(), store_factory(), store_factory()
    for run_id in ("run-ended", "run-twice"):
        own.create_run(_running(run_id, host="alpha", pid=_dead_pid()))
    stale_ended, stale_twice = beta.run("run-ended"), gamma.run("run-twice")
    assert stale_ended is not None
    assert stale_twice is not None
    clock.now += 61
    own.set_run_state("run-ended", RunState.DONE)
    assert effective_state(beta, stale_ended, here_id="beta") is RunState.DONE
    assert [e.kind for e in own.events("run-ended")] == []
    assert effective_state(beta, stale_twice, here_id="beta") is RunState.DEAD
    assert effective_state(gamma, stale_twice, here_id="gamma") is RunState.DEAD
    assert [e.kind for e in own.events("run-twice")] == ["dead"]


def test_a_store_file_of_an_earlier_version_gains_the_run_heartbeat(
    tmp_path: os.PathLike[str],
) -> None:
    """A SQLite store whose runs table has no `expires` column opens, keeps its rows,
    and records heartbeats from then on."""
    import sqlite3
    from pathlib import Path

    path = Path(tmp_path) / "s" / "runs.sqlite3"
    SqliteStore.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN expires")
        conn.execute(
            "INSERT INTO runs (id, state, host, pid, pid_start, started_at, plan, repo) "
            "VALUES ('old', 'done', 'h', 1, 1.0, 2.0, '/p', '/r')"
        )
    conn.close()
    store = SqliteStore.open(path, clock=lambda: 100.0)
    try:
        old = store.run("old")
        assert old is not None
        assert old.expires is None
        store.beat("old", 5)
        assert store.run("old").expires == 105.0  # type: ignore[union-attr]
    finally:
        store.close()


def test_a_lane_keeps_its_stage_name_agent_session_and_held_reason(
    store: Store,
) -> None:
    """The facts a take-over and the views read come back as typed values: a stage of
    two words, a transcript path with a space, a later session in place of an earlier
    one, and facts given at `add_lane` (a tether choice: columns, not the ledger)."""
    _lane_in(store, "lane1", [LaneState.IN_CALL])
    assert (_lane(store, "lane1").stage_name, _lane(store, "lane1").session) == (
        None,
        None,
    )
    store.update_lane("lane1", stage_name="write tests")
    first = AgentSession("write tests", "s-1", Path("/state/my lanes/l.transcript"))
    store.record_session("lane1", first)
    store.update_lane("lane1", held_reason='it\'s "full"')
    got = _lane(store, "lane1")
    assert (got.stage_name, got.session, got.held_reason, got.state) == (
        "write tests",
        first,
        'it\'s "full"',
        LaneState.IN_CALL,
    )
    later = AgentSession("review", "7f3c9a")
    store.record_session("lane1", later)
    (got,) = store.item_lanes("lane1")
    assert got.session == later
    assert got.stage_name == "write tests"
    row = attrs.evolve(
        got, id="lane2", stage_name="s", session=first, held_reason="r", note="n"
    )
    store.add_lane(row)
    assert _lane(store, "lane2") == row


def test_every_save_of_a_lane_is_kept_in_order_and_a_refused_move_keeps_none(
    store: Store,
) -> None:
    """`saved_refs` lists each save's view ref, oldest first, per lane; a save whose
    state move the store refused is not kept (a tether choice: one transaction)."""
    _lane_in(store, "lane1", [])
    _lane_in(store, "lane2", [])
    assert store.saved_refs("run1") == {}
    store.update_lane("lane1", state=LaneState.SAVED, saved=("r/1", "c1"))
    store.update_lane("lane2", saved=("r/2", "c2"))
    store.update_lane("lane1", saved=("r/1b", "c3"))
    with pytest.raises(StoreError):
        store.update_lane("lane2", state=LaneState.OPEN, saved=("r/no", "c4"))
    assert store.saved_refs("run1") == {"lane1": ["r/1", "r/1b"], "lane2": ["r/2"]}
    assert store.saved_refs("run2") == {}
    assert (_lane(store, "lane1").saved_ref, _lane(store, "lane1").saved_commit) == (
        "r/1b",
        "c3",
    )


def test_a_store_file_of_before_the_lane_facts_opens_and_records_them(
    tmp_path: os.PathLike[str],
) -> None:
    """A SQLite store of the first schema (lanes without fact columns, no saves) opens,
    keeps its lanes, takes each one's last stage and saves from its ledger once, and
    records sessions from then on."""
    import sqlite3

    path = Path(tmp_path) / "s" / "runs.sqlite3"
    SqliteStore.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE lanes")
        conn.execute("DROP TABLE saves")  # the first schema had neither
        conn.execute(_LANES_BEFORE_FACTS)
        write_lane_of_before(
            lambda sql, args: conn.execute(sql.replace("%s", "?"), args)
        )
    conn.close()
    store = SqliteStore.open(path)
    try:
        check_lane_of_before(store)
    finally:
        store.close()
    SqliteStore.open(path).close()  # opened again: nothing left to migrate


_LANES_BEFORE_FACTS = """
CREATE TABLE lanes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    run TEXT NOT NULL,
    item TEXT NOT NULL,
    state TEXT NOT NULL,
    branch TEXT NOT NULL,
    worktree TEXT NOT NULL,
    stage INTEGER NOT NULL DEFAULT 0,
    saved_ref TEXT,
    saved_commit TEXT,
    note TEXT
)
"""
"""The lanes table as the first schema made it."""


def test_docs_runs_shows_the_lanes_moves_as_the_stores_hold_them() -> None:
    """docs/runs.md's table of lane moves is LANE_MOVES_INTO, row for row."""
    assert _docs_table("| to | from |", LaneState) == LANE_MOVES_INTO


def test_docs_runs_shows_the_runs_moves_as_the_stores_hold_them() -> None:
    """docs/runs.md's table of run moves is RUN_MOVES_INTO, row for row."""
    assert _docs_table("| run to | from |", RunState) == RUN_MOVES_INTO


def _docs_table(head: str, kind: type[_S]) -> dict[_S, set[_S]]:
    import re

    text = (Path(__file__).parents[2] / "docs" / "runs.md").read_text()
    table = text[text.index(head) :].split("\n\n", 1)[0]
    return {
        kind(row[0]): {kind(s) for s in row[1:]}
        for line in table.splitlines()[2:]
        if (row := re.findall(r"`([a-z-]+)`", line))
    }
