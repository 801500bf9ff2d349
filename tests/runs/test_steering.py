"""Seeing and steering a run, through real `tether` processes on real repositories: a
plan refused before anything is recorded, a failed item queued again, a lane's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .support import make_repo, tether, write_plan

pytestmark = pytest.mark.slow


def _no_runs() -> bool:
    return json.loads(tether("runs", "--json").stdout or "[]") == []


def test_a_plan_whose_repo_is_missing_or_not_git_is_refused_before_any_run(
    tmp_path: Path,
) -> None:
    plan = write_plan(
        tmp_path, tmp_path / "nowhere", items=["x"], stages=[("only", "true")]
    )
    missing = tether("run", str(plan))
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert f"{plan}: repo: " in missing.stderr
    assert "does not exist" in missing.stderr
    assert "PosixPath" not in missing.stderr
    assert missing.stdout == ""
    plain = tmp_path / "plain"
    plain.mkdir()
    plan = write_plan(tmp_path, plain, items=["x"], stages=[("only", "true")])
    not_git = tether("run", str(plan))
    assert not_git.returncode == 2
    assert "is not a git repository" in not_git.stderr
    assert _no_runs()
    listed = json.loads(tether("queue", "list", "--json").stdout or "[]")
    assert listed == []  # nothing recorded, nothing claimed


def test_an_agent_command_that_is_not_found_is_refused_before_any_run(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'repo = "{repo}"\n[[stage]]\nname = "implement"\n'
        "agent = ['claudee', '-p', '{brief}']\n[[item]]\nid = \"x\"\nbrief = \"b\"\n",
        encoding="utf-8",
    )
    result = tether("run", str(plan))
    assert result.returncode == 2
    assert "stage[0].agent: 'claudee' is not found on PATH" in result.stderr
    assert _no_runs()


@pytest.mark.slow
def test_a_failed_item_is_queued_again_by_retry_and_done_by_the_next_run(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    failing = write_plan(
        tmp_path, repo, items=["x"], stages=[("only", "echo broken build >&2; exit 3")]
    )
    first = tether("run", str(failing))
    assert first.returncode == 1
    assert "1 item(s) failed: x; once fixed, `tether queue retry x`" in first.stdout
    # The failed line says how to read why; run as printed, it shows the agent's words.
    why = first.stdout.split("; why: ", 1)[1].splitlines()[0]
    assert why.startswith("tether logs run_")
    assert "broken build" in tether(*why.split()[1:]).stdout
    again = tether("run", str(failing))
    assert "retry" not in again.stdout  # nothing failed in this run: it took nothing
    refused = tether("queue", "retry", "nope")
    assert refused.returncode == 2
    assert "no item 'nope'" in refused.stderr
    fixed = write_plan(tmp_path, repo, items=["x"], stages=[("only", "echo ok > ok")])
    assert tether("queue", "retry", "x").stdout == "queued again: x\n"
    not_failed = tether("queue", "retry", "x")
    assert not_failed.returncode == 2
    assert "is queued, not failed" in not_failed.stderr
    done = tether("run", str(fixed))
    assert done.returncode == 0, done.stdout + done.stderr
    states = json.loads(tether("queue", "list", "--json").stdout)
    assert [(i["id"], i["state"]) for i in states] == [("x", "done")]
    assert (
        tether("queue", "retry", "--all-failed").stdout == "queued again: 0 item(s)\n"
    )


def test_tether_logs_prints_what_each_lane_s_agent_printed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    plan = write_plan(
        tmp_path, repo, items=["aa", "bb"], stages=[("only", "echo hello $TETHER_ITEM")]
    )
    run = tether("run", str(plan))
    assert run.returncode == 0, run.stdout + run.stderr
    run_id = run.stdout.split()[1]
    both = tether("logs", run_id)
    assert both.returncode == 0, both.stderr
    assert "== aa (lane_" in both.stdout
    assert "hello aa" in both.stdout
    assert "hello bb" in both.stdout
    one = tether("logs", run_id, "b")  # a unique prefix of the item
    assert "hello bb" in one.stdout
    assert "hello aa" not in one.stdout
    assert "==" not in one.stdout
    unknown = tether("logs", run_id, "zz")
    assert unknown.returncode == 2
    assert "matches no lane" in unknown.stderr
    follow = tether("logs", run_id, "aa", "--follow")  # a finished run: prints, ends
    assert "hello aa" in follow.stdout


def test_a_stage_ended_by_its_timeout_says_so_on_screen_in_receipt_and_digest(
    tmp_path: Path,
) -> None:
    from tether.runs._open import open_store, store_url

    repo = make_repo(tmp_path)
    plan = write_plan(
        tmp_path,
        repo,
        items=["slow"],
        stages=[("only", "sleep 30")],
        extra="",
    )
    text = plan.read_text(encoding="utf-8").replace(
        'name = "only"', 'name = "only"\ntimeout = 0.5'
    )
    plan.write_text(text, encoding="utf-8")
    result = tether("run", str(plan))
    assert result.returncode == 1, result.stdout + result.stderr
    said = "timed out after 0.5 s; its tree was killed"
    assert f"slow: only failed, {said}" in result.stdout
    store = open_store(store_url())
    try:
        (receipt,) = store.receipts(result.stdout.split()[1])
    finally:
        store.close()
    assert said in receipt.log_tail
    digest = result.stdout.rsplit("digest: ", 1)[1].strip()
    assert f"receipt slow / only: {said}" in Path(digest).read_text(encoding="utf-8")


def test_a_stage_writes_what_it_declares_and_nothing_else_of_the_account(
    tmp_path: Path,
) -> None:
    """S15 through a run: the agent writes its lane and the folder its stage declares
    (`writable`); a folder of the account it did not declare stays as it was."""
    from tether.host import containment

    if containment().kind != "namespace":
        import pytest

        pytest.skip(f"the wall needs namespace containment: {containment().reason}")
    repo = make_repo(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    script = f"echo in > {shared}/made; echo out > {other}/made; echo lane > lane.txt"
    plan = write_plan(tmp_path, repo, items=["w"], stages=[("only", script)])
    text = plan.read_text(encoding="utf-8").replace(
        'name = "only"', f'name = "only"\nwritable = ["{shared}"]'
    )
    plan.write_text(text, encoding="utf-8")
    result = tether("run", str(plan))
    assert (shared / "made").read_text(encoding="utf-8") == "in\n"
    assert not (other / "made").exists()
    assert result.returncode == 0, result.stdout + result.stderr
    log = tether("logs", result.stdout.split()[1]).stdout
    assert "Read-only file system" in log  # the write outside, refused by the wall
