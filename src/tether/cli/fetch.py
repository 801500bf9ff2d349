"""`tether fetch`: bring the work of bound accounts' runs into the person's repository.

Each done or halted lane of a run under an agents' account is published as a git
bundle past the commit its work is based on (`tether.runs._bundle`) in that account's directory of the shared folder. This
command, run as the person, copies each bundle by descriptor into a private temp file
(`tether.runs._publish.copy_bundle`: owner, mode and size judged), checks it with the
person's own git (`git bundle verify`, `list-heads` against the published record,
`fetch.fsckObjects`), and fetches its refs from that file: no repository of the other
account is opened, so no `safe.directory` exception is needed and none of its config,
hooks or filters is honoured.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._output import echo_json

if TYPE_CHECKING:
    from ..runs._publish import Seat

__all__ = ("fetch",)

GIT_TIME = 300.0
"""Seconds one git command of the fetch may take."""
_REF_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


@click.command()
@click.option("--run", "run_id", metavar="ID", default=None, help="Only this run.")
@click.option(
    "--into",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="REPO",
    help="The person's repository [default: the one the current directory is in].",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
def fetch(run_id: str | None, into: Path | None, as_json: bool) -> None:
    """Fetch the branches and saved views bound accounts' runs published, as data.

    For each lane that is done or halted: its branch becomes
    refs/remotes/tether/<account>/<item> and its saved view
    refs/tether/saved/<account>/<run>/<lane> in REPO (newer runs last, so an item's
    ref holds its newest work). Review with git log / git diff, merge with git merge.
    Exit 0 when every bundle was fetched (or none was published); 1 when one could not
    be read or checked (the others are fetched); 2 when REPO is not a git repository
    or RUN is not published.

    \b
    Examples:
      tether fetch
      tether fetch --run run_3f9a0c1b2d4e-1 --into ~/src/project
      git log --oneline main..tether/agents/fix-typo
    """
    from ..errors import UsageError
    from ._seatview import seat_runs

    repo = (into or Path.cwd()).absolute()
    top = _git(repo, "rev-parse", "--absolute-git-dir", check=False)
    if top.returncode != 0:
        raise UsageError(
            f"{repo} is not a git repository: give --into the repository to fetch into"
        )
    _, runs, notes = seat_runs()
    failed = False
    for note in notes:
        click.echo(f"tether: {note}", err=True)
        failed = True
    chosen = [r for r in runs if run_id is None or r["id"] == run_id]
    if run_id is not None and not chosen:
        raise UsageError(f"no published run {run_id}; see `tether runs`")
    fetched: list[dict[str, Any]] = []
    from ..runs._publish import PublishUnreadable, seats

    by_uid = {s.account_uid: s for s in seats()}
    for record in reversed(chosen):  # oldest first: an item's ref ends at its newest
        seat = by_uid.get(int(record["account_uid"]))
        if seat is None:
            continue
        for lane in record.get("lanes") or ():
            bundle = lane.get("bundle")
            if not isinstance(bundle, dict) or "file" not in bundle:
                if isinstance(bundle, dict) and "error" in bundle:
                    click.echo(
                        f"tether: {seat.account} {record['id']} {lane.get('item')}: "
                        f"no bundle: {bundle['error']}",
                        err=True,
                    )
                    failed = True
                continue
            try:
                fetched += _fetch_lane(repo, seat, str(record["id"]), lane, bundle)
            except (PublishUnreadable, UsageError) as exc:
                click.echo(
                    f"tether: {seat.account} {record['id']} {lane.get('item')}: {exc}",
                    err=True,
                )
                failed = True
    if as_json:
        echo_json(fetched)
    elif not fetched:
        click.echo("nothing published to fetch")
    else:
        for row in fetched:
            click.echo(
                f"{row['ref']}  {row['commit'][:12]}  ({row['run']} {row['state']})"
            )
    if failed:
        sys.exit(1)


def _git(
    repo: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """The person's own git in their repository (their config is theirs)."""
    from ..errors import UsageError

    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIME,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {args[0]} took longer than {GIT_TIME:g} s") from None
    if check and done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise UsageError(
            f"git {args[0]} failed: {lines[-1] if lines else done.returncode}"
        )
    return done


def _fetch_lane(
    repo: Path, seat: Seat, run: str, lane: dict[str, Any], bundle: dict[str, Any]
) -> list[dict[str, Any]]:
    """Fetch one lane's bundle; the refs made."""
    from ..errors import UsageError
    from ..runs._publish import copy_bundle

    lane_id, item = str(lane.get("lane")), str(lane.get("item"))
    account = (
        seat.account if _REF_PART.match(seat.account) else f"uid-{seat.account_uid}"
    )
    if not (
        _REF_PART.match(run) and _REF_PART.match(lane_id) and _REF_PART.match(item)
    ):
        raise UsageError("its names are not ones tether publishes: not fetched")
    wanted: list[tuple[str, str, str]] = []  # (ref in the bundle, commit, ref here)
    branch_ref, branch_commit = bundle.get("branch_ref"), bundle.get("branch_commit")
    if branch_ref is not None:
        if branch_ref != f"refs/heads/tether/{item}" or not _SHA.match(
            str(branch_commit)
        ):
            raise UsageError(
                f"its branch {branch_ref!r} is not the lane's: not fetched"
            )
        wanted.append(
            (branch_ref, str(branch_commit), f"refs/remotes/tether/{account}/{item}")
        )
    view_ref, view_commit = bundle.get("view_ref"), bundle.get("view_commit")
    if view_ref is not None:
        if view_ref != f"refs/tether/saved/{run}/{lane_id}" or not _SHA.match(
            str(view_commit)
        ):
            raise UsageError(f"its view {view_ref!r} is not the lane's: not fetched")
        wanted.append(
            (view_ref, str(view_commit), f"refs/tether/saved/{account}/{run}/{lane_id}")
        )
    if not wanted:
        return []
    base = bundle.get("base")
    if base is not None:
        if not _SHA.match(str(base)):
            raise UsageError(f"its base {base!r} is not a commit: not fetched")
        if _git(repo, "cat-file", "-e", f"{base}^{{commit}}", check=False).returncode:
            raise UsageError(
                f"{repo} lacks {base}, the commit the work is based on (the agents' "
                "HEAD): fetch it first (from your common upstream), then run tether "
                "fetch again"
            )
    with tempfile.TemporaryDirectory(prefix="tether-fetch-") as tmp:
        file = Path(tmp) / f"{lane_id}.bundle"
        copy_bundle(seat, run, lane_id, file)
        _git(repo, "bundle", "verify", "--quiet", str(file))
        heads = _git(repo, "bundle", "list-heads", str(file)).stdout.split("\n")
        listed: dict[str, str] = {}
        for line in heads:
            commit, _, name = line.partition(" ")
            listed[name] = commit
        for source, commit, _ in wanted:
            if listed.get(source) != commit:
                raise UsageError(
                    f"its bundle holds {source} at {listed.get(source)}, not the "
                    f"published {commit}: not fetched"
                )
        _git(
            repo,
            "-c",
            "fetch.fsckObjects=true",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--no-auto-gc",
            str(file),
            *(f"+{source}:{target}" for source, _, target in wanted),
        )
    return [
        {
            "account": seat.account,
            "run": run,
            "item": item,
            "lane": lane_id,
            "state": lane.get("state"),
            "ref": target,
            "commit": commit,
        }
        for _, commit, target in wanted
    ]
