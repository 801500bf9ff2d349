"""Several machines on one PostgreSQL store: real `tether run` processes, real server.

Two hosts are two values of `TETHER_MACHINE_ID` on this one machine: a run records
that id, and the restart path judges a run of another id by its leases only.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import signal
from collections import Counter
from typing import TYPE_CHECKING

import psycopg
import pytest
from tests.docs._blocks import ROOT, Block, blocks
from tests.waiting import wait_until

from tether.runs import RunState
from tether.runs._postgres import PostgresStore
from tether.stop import lift_stop, set_stop

from .support import (
    OPENED,
    WAIT_FOR_GO,
    git,
    make_repo,
    run_id_of,
    start,
    tether,
    write_plan,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


COMMIT = (
    'echo "$TETHER_ITEM by $TETHER_RUN" > out.txt && git add out.txt && '
    "git -c user.email=a@b -c user.name=agent commit -qm {item}"
)


def _open(url: str) -> PostgresStore:
    store = PostgresStore.open(url)
    OPENED.append(store)
    return store


def test_a_run_on_a_postgres_store_finishes_its_items_and_every_view_shows_it(
    tmp_path: Path, pg_url: str
) -> None:
    """`tether run --store URL` finishes every item; `runs`, `runs show --json`,
    `queue list` and `status --json` read the same store (by flag or TETHER_STORE)."""
    repo = make_repo(tmp_path)
    plan = write_plan(
        tmp_path, repo, items=["one", "two", "three"], stages=[("only", COMMIT)]
    )
    done = tether("run", str(plan), "--store", pg_url)
    assert done.returncode == 0, done.stdout + done.stderr
    run = done.stdout.splitlines()[0].split()[1]
    shown = json.loads(tether("runs", "show", run, "--json", "--store", pg_url).stdout)
    assert shown["state"] == "done"
    assert sorted((lane["item"], lane["state"]) for lane in shown["lanes"]) == [
        ("one", "done"),
        ("three", "done"),
        ("two", "done"),
    ]
    env = {"TETHER_STORE": pg_url}
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert json.loads(tether("runs", "--json", env=env).stdout) == [
        {"id": run, "state": "done", "account": me}
    ]
    queue = json.loads(tether("queue", "list", "--json", env=env).stdout)
    assert {(i["id"], i["state"]) for i in queue} == {
        ("one", "done"),
        ("two", "done"),
        ("three", "done"),
    }
    status = json.loads(tether("status", "--json", env=env).stdout)
    assert (run, "done") in {(r["id"], r["state"]) for r in status["runs"]}
    store = _open(pg_url)
    kinds = [e.kind for e in store.events(run)]
    assert kinds[0] == "run-start"
    assert kinds.count("claim") == kinds.count("lane-done") == 3
    assert store.claims() == []


@pytest.mark.rule("several-machines")
def test_two_hosts_running_at_once_never_hold_one_item(
    tmp_path: Path, pg_url: str
) -> None:
    """Two `tether run` processes of two hosts on one queue of six items: each item is
    claimed once and finished by exactly one of them; nothing stays claimed."""
    repo = make_repo(tmp_path)
    items = [f"i{n}" for n in range(6)]
    # The verb is tested on its own (tests/runs/test_postgres.py); here the queue
    # is only the ground both hosts stand on.
    queued = _open(pg_url)
    assert all(queued.add_item(item, "b") for item in items)
    plan = write_plan(tmp_path, repo, items=[], stages=[("only", "true")], lanes=3)
    procs = [
        start("run", str(plan), "--store", pg_url, env={"TETHER_MACHINE_ID": host})
        for host in ("alpha", "beta")
    ]
    assert [p.wait(timeout=90) for p in procs] == [0, 0]
    store = _open(pg_url)
    runs = store.runs()
    assert sorted(r.host for r in runs) == ["alpha", "beta"]
    finished = Counter(
        lane.item
        for run in runs
        for lane in store.lanes(run.id)
        if lane.state.value == "done"
    )
    assert finished == Counter(items)
    claims = Counter(
        e.detail.split()[0]
        for r in runs
        for e in store.events(r.id)
        if e.kind == "claim"
    )
    assert claims == Counter(items)
    assert store.claims() == []


@pytest.mark.rule("several-machines")
def test_another_host_takes_over_a_dead_run_only_once_its_leases_expired(
    tmp_path: Path, pg_url: str
) -> None:
    """A run of host alpha is SIGKILLed mid-stage. Host beta cannot see alpha's pids:
    its take-over is refused while the leases live, and goes through once they expired
    on the database's clock; the item is then finished at a higher epoch."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["one"],
        stages=[("work", WAIT_FOR_GO.format(stage="w")), ("commit", COMMIT)],
        # The lease outlasts a `tether takeover` process's start on a loaded machine.
        extra="heartbeat = 0.5\nlease = 12",
    )
    alpha = {"TETHER_MACHINE_ID": "alpha", "MARKS": str(marks)}
    beta = {"TETHER_MACHINE_ID": "beta", "MARKS": str(marks)}
    proc = start("run", str(plan), "--store", pg_url, env=alpha)
    run = run_id_of(proc)
    wait_until(lambda: (marks / "one.w").exists(), what="the agent busy")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    store = _open(pg_url)
    (claim,) = store.claims(run)
    assert claim.host == "alpha"
    refused = tether("takeover", run, "--store", pg_url, env=beta)
    assert refused.returncode == 2
    assert "is alive" in refused.stderr
    # A bound, not a hope: wait until the server's clock is past the lease.
    # Time is a parameter: the leases are made to have expired on the store's clock
    # (as 12 s later) instead of waiting for it.
    with psycopg.connect(pg_url, autocommit=True) as db:
        for table in ("claims", "runs"):
            db.execute(
                f"UPDATE {table} SET expires = extract(epoch FROM clock_timestamp()) - 1 "
                f"WHERE {'run' if table == 'claims' else 'id'} = %s",
                (run,),
            )
    assert store.now() > store.claims(run)[0].expires
    (marks / "go").touch()
    taken = tether("takeover", run, "--store", pg_url, env=beta)
    assert taken.returncode == 0, taken.stdout + taken.stderr
    new = taken.stdout.splitlines()[0].split()[1]
    assert store.run(run).state is RunState.TAKEN_OVER  # type: ignore[union-attr]
    dead = [e.detail for e in store.events(run) if e.kind == "dead"]
    assert dead == ["its leases expired on the store's clock (host alpha)"]
    assert f"one epoch {claim.epoch + 1}" in [
        e.detail for e in store.events(new) if e.kind == "claim"
    ]
    assert [i.state for i in store.items()] == ["done"]
    assert store.run(new).host == "beta"  # type: ignore[union-attr]


@pytest.mark.rule("several-machines")
def test_saved_work_is_restored_only_where_it_is_and_never_lost(
    tmp_path: Path, pg_url: str
) -> None:
    """Alpha halts with uncommitted work saved aside in its repository. Beta, whose
    clone lacks that ref, cannot restore it: its lane does not open, it says how to
    fetch the ref, and the item goes back to the queue. Alpha then takes the item up,
    restores the saved work (its lossless copy) and finishes it."""
    (tmp_path / "a").mkdir()
    repo_a = make_repo(tmp_path / "a")
    marks = tmp_path / "marks"
    marks.mkdir()
    stages = [
        ("work", "echo saved > notes.txt; " + WAIT_FOR_GO.format(stage="w")),
        ("commit", "git add -A && git -c user.email=a@b -c user.name=a commit -qm x"),
    ]
    plan_a = write_plan(tmp_path / "a", repo_a, items=["one"], stages=stages)
    alpha = {"TETHER_MACHINE_ID": "alpha", "MARKS": str(marks)}
    beta = {"TETHER_MACHINE_ID": "beta", "MARKS": str(marks)}
    proc = start("run", str(plan_a), "--store", pg_url, env=alpha)
    run = run_id_of(proc)
    wait_until(lambda: (marks / "one.w").exists(), what="the agent busy")
    set_stop("moving machines")
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3
    lift_stop()
    store = _open(pg_url)
    (lane,) = store.lanes(run)
    assert lane.saved_commit is not None
    # Beta is another machine: an account home of its own, so neither alpha's lossless
    # copy nor (in its clone) the saved ref is there.
    beta["TETHER_HOME"] = str(tmp_path / "b-home")
    (tmp_path / "b").mkdir()
    repo_b = tmp_path / "b" / "repo"
    git(tmp_path / "b", "clone", "-q", "--no-local", str(repo_a), str(repo_b))
    plan_b = write_plan(tmp_path / "b", repo_b, items=["one"], stages=stages)
    there = tether("run", str(plan_b), "--takeover", run, "--store", pg_url, env=beta)
    assert there.returncode == 1, there.stdout + there.stderr
    assert f"its saved work {lane.saved_commit[:12]}" in there.stdout
    assert "refs/tether/saved/*" in there.stdout
    assert [(i.state, i.claimed_by) for i in store.items()] == [("queued", None)]
    here = tether("run", str(plan_a), "--store", pg_url, env=alpha)
    assert here.returncode == 0, here.stdout + here.stderr
    assert "restored" in here.stdout
    assert git(repo_a, "show", "tether/one:notes.txt") == "saved"
    assert [i.state for i in store.items()] == ["done"]


def _section_blocks(title: str) -> list[Block]:
    doc = ROOT / "docs" / "runs.md"
    lines = doc.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"## {title}") + 1
    end = next(
        (n for n in range(start, len(lines)) if lines[n].startswith("## ")), len(lines)
    )
    return [b for b in blocks(doc) if start < b.line <= end]


def test_the_several_machines_examples_of_the_docs_run_against_a_real_server(
    tmp_path: Path, pg_url: str
) -> None:
    """Every command of docs/runs.md "Several machines" runs, exit 0, with the example
    URL replaced by the test server's; its plan chooses that store."""
    from tether.runs import load_plan, store_url

    found = _section_blocks("Several machines")
    commands = [b for b in found if b.lang == "console"]
    plans = [b for b in found if b.lang == "toml"]
    assert commands
    assert plans
    example = "postgresql://tether:secret@db.internal:5432/tether"
    for block in commands:
        for line in block.text.splitlines():
            if not line.startswith("$ "):
                continue
            words = shlex.split(line[2:].replace(example, pg_url))
            assert words[0] == "tether"
            done = tether(*words[1:])
            assert done.returncode == 0, f"{block.where}: {line}\n{done.stderr}"
    make_repo(tmp_path)
    for block in plans:
        plan = tmp_path / "plan.toml"
        plan.write_text(block.text.replace('repo = "."', 'repo = "repo"'), "utf-8")
        chosen = store_url(None, load_plan(plan).store)
        assert chosen.startswith("postgresql://")
    queued = json.loads(tether("queue", "list", "--json", "--store", pg_url).stdout)
    assert [i["id"] for i in queued] == ["fix-typo"]
