"""`tether run` and `tether takeover` as one function: set up, run, write the digest.

The signal handling lives here too: the first SIGINT is a stop for this run (a halt in
the spec's order), the second kills every agent tree at once, the worktrees are then
saved aside within a bound, and the run exits 130 with its claims left for the restart
path.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from .._accounts import who
from .._config import paths
from .._env import TetherEnv
from ..errors import StoreError, TetherError, UsageError
from ..stop import ReadOutcome, StopStore, stop_reason
from ..stop._setup import make_state_dir
from ._bundle import make_bundle
from ._digest import write_digest
from ._open import open_store, store_url
from ._plan import Plan, load_plan
from ._publish import Publisher, publish_dir
from ._run import ExitCode, Run
from ._takeover import prepare_takeover
from ._values import LaneState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..stop import StopWatch
    from ._clock import RunClock
    from ._store import Store

__all__ = ("KILL_BOUND", "run_plan")

KILL_BOUND = 5.0
"""Seconds the saves after a second Ctrl-C may take before the run exits."""


def _refused_by_a_stop(watch: StopWatch, say: Callable[[str], None]) -> bool:
    """Say why a run does not start while a stop stands; True when it does not.

    Started, it would claim nothing and stay a halted run until someone took it over;
    refused, nothing is recorded.
    """
    reading = watch.read()
    if reading.outcome is not ReadOutcome.STOPPED:
        return False
    setter = "?" if reading.set_by_uid is None else who(reading.set_by_uid)
    why = stop_reason(reading)
    say(
        f"not started: a stop set by {setter} stands"
        + (f" ({why})" if why else "")
        + "; nothing was claimed or recorded; start the run again once it is lifted"
    )
    return True


async def run_plan(
    plan_path: Path | None,
    *,
    say: Callable[[str], None],
    store_option: str | None = None,
    takeover: str | None = None,
    poll: float | None = None,
    save_retry: float = 10.0,
    handle_sigint: bool = True,
    follow: bool = False,
    on_start: Callable[[Run], None] | None = None,
    beside: Callable[[Run], Awaitable[None]] | None = None,
    clock: RunClock | None = None,
) -> ExitCode:
    """Run a plan (or take over a run) to its end; returns the exit code.

    `say` gets the run's lines, the first being `run <id>`. `beside` (a live view) is
    run as a task beside the run while it works and cancelled when the run ends.

    Raises:
        UsageError: the plan or the store cannot be used.
        Refused: the take-over is not allowed now.
    """
    # A fresh account has no state dir yet; the own store of stops lives inside it.
    # Made as `tether stop` makes it (one rule for no set-up).
    try:
        make_state_dir()
    except OSError as exc:
        raise StoreError(
            f"the account's state dir {paths().state_dir} cannot be made: {exc}"
        ) from None
    stop_store = StopStore.from_setup()
    watch = stop_store.watch()
    store = None
    try:
        if takeover is not None and plan_path is None:
            probe = open_store(store_url(store_option))
            row = probe.run(takeover)
            probe.close()
            if row is None:
                raise UsageError(f"no run {takeover}; see `tether runs`")
            plan_path = Path(row.plan)
        assert plan_path is not None
        plan = load_plan(plan_path)
        check_models(plan)
        await check_parts(plan)
        if takeover is None and _refused_by_a_stop(watch, say):
            return ExitCode.HALTED
        store = open_store(store_url(store_option, plan.store))
        for item in plan.items:
            store.add_item(item.id, item.brief)
        run = Run.start(
            plan,
            store,
            watch,
            say,
            takeover=None
            if takeover is None
            else await prepare_takeover(store, takeover, watch),
            poll=poll,
            save_retry=save_retry,
            follow=follow,
            clock=clock,
        )
        if os.environ.get(TetherEnv.WRITABLE) and any(
            stage.agent is None for stage in plan.stages
        ):
            say(
                f"{TetherEnv.WRITABLE} is not honoured by builtin stages (their tools "
                "write only their lane); it reaches the command and preset stages"
            )
        publisher = _publisher(run, watch)
        if on_start is not None:
            on_start(run)
        code = await _execute(run, handle_sigint, beside, publisher)
        if code is ExitCode.KILLED:
            for line in killed_lines(store, run.id):
                say(line)
        else:
            for line in await run_summary(store, run.id, plan.repo):
                say(line)
        try:
            where = write_digest(store, run.id, watch)
        except OSError as exc:
            say(f"the digest could not be written: {exc}")
        else:
            say(f"digest: {where}")
        if publisher is not None:
            await publisher.finish()
        return code
    finally:
        if store is not None:
            store.close()


def killed_lines(store: Store, run_id: str) -> list[str]:
    """The lines a second Ctrl-C ends with: the run, each lane's save, what goes on.

    Where each lane's work was saved aside (or that the take-over saves it first), and
    the command that takes the run over.
    """
    from ._lane_git import lossless_save

    lines = [f"run {run_id} killed by a second Ctrl-C; its claims stay held"]
    for lane in store.lanes(run_id):
        where = lossless_save(lane) if lane.state is LaneState.SAVED else None
        if where is not None:
            lines.append(f"{lane.item}: its worktree is saved aside in {where}")
        elif lane.state is LaneState.DONE:
            lines.append(f"{lane.item}: done; its branch {lane.branch} holds its work")
        else:
            lines.append(
                f"{lane.item}: not saved yet; the take-over saves {lane.worktree} first"
            )
    lines.append(f"go on with: tether takeover {run_id}")
    return lines


SUMMARY_SUBJECTS = 3
"""Commit subjects the end-of-run summary shows per branch (the newest)."""


async def run_summary(store: Store, run_id: str, repo: Path) -> list[str]:
    """The run's end, item by item: its branch and the commits on it, or its save.

    `ITEM: done, branch tether/ITEM: 2 commits (implement / check)`; a failed item
    says where it failed, a halted one where its work was saved. The commits are
    those of the branch that the person's HEAD lacks (subjects bounded: an agent
    wrote them).
    """
    from ._lane_git import GitFailed, git

    lines = [f"run {run_id}, item by item:"]
    for lane in store.lanes(run_id):
        state = lane.state.value
        if lane.state is LaneState.DONE:
            state = lane.note or "done"
        try:
            out = await git(
                "log", "--format=%s", f"HEAD..refs/heads/{lane.branch}", cwd=repo
            )
        except GitFailed:
            commits = "none (nothing committed)"
        else:
            subjects = [x[:60] for x in out.splitlines()]
            shown = " / ".join(reversed(subjects[:SUMMARY_SUBJECTS]))
            more = "… / " if len(subjects) > SUMMARY_SUBJECTS else ""
            count = f"{len(subjects)} commit{'' if len(subjects) == 1 else 's'}"
            commits = f"{count} ({more}{shown})" if subjects else "no commit"
        line = f"  {lane.item}: {state}; branch {lane.branch}: {commits}"
        if commits.startswith("none"):
            line = f"  {lane.item}: {state}; no branch (nothing committed)"
        if lane.saved_ref and lane.state is not LaneState.DONE:
            line += f"; saved at {lane.saved_ref}"
        lines.append(line)
    return lines if len(lines) > 1 else []


async def check_parts(plan: Plan) -> None:
    """Refuse a plan whose parts are missing, before anything is recorded or claimed.

    A part is missing when the plan's `repo` is not a git repository, or a stage names
    an agent command that is not found.

    Raises:
        UsageError: one line naming the file, the field and what to do.
    """
    import shutil

    from ._lane_git import GitFailed, git

    if not plan.repo.is_dir():
        raise UsageError(
            f"{plan.path}: repo: {plan.repo} does not exist; give the path of a git "
            "repository (relative to the plan's folder)"
        )
    try:
        await git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=plan.repo)
    except GitFailed:
        raise UsageError(
            f"{plan.path}: repo: {plan.repo} is not a git repository with a commit; "
            "run `git init` and commit once there, or name another"
        ) from None
    for index, stage in enumerate(plan.stages):
        if stage.agent is None or "{" in stage.agent[0]:
            continue
        program = stage.agent[0]
        found = (
            os.access(program, os.X_OK)
            if os.path.isabs(program)
            else "/" in program or shutil.which(program) is not None
        )
        if not found:
            raise UsageError(
                f"{plan.path}: stage[{index}].agent: {program!r} is not found on PATH "
                f"(stage {stage.name!r}); install it or give its full path"
            )


def check_models(plan: Plan) -> None:
    """Refuse at the start a builtin stage whose model cannot be used.

    Raises:
        UsageError: the model spec or its script is wrong; the line says which stage.
    """
    from ..models import model_from_spec

    for stage in plan.stages:
        if stage.agent is None and stage.model is not None:
            try:
                model_from_spec(stage.model)
            except TetherError as exc:
                raise UsageError(
                    f"{plan.path}: stage {stage.name!r}: the model cannot be used: {exc}"
                ) from None


def _publisher(run: Run, watch: StopWatch) -> Publisher | None:
    """What publishes the run for the person when it honours another account's stop."""
    root = publish_dir(watch)
    if root is None:
        return None
    publisher = Publisher(
        root,
        watch.store.place.person_uid,
        run.store,
        run.id,
        lane_log=run.log_path,
        repo=run.plan.repo,
        bundler=make_bundle,
        say=run.say,
    )
    run.on_change = publisher.changed
    return publisher


async def _execute(
    run: Run,
    handle_sigint: bool,
    beside: Callable[[Run], Awaitable[None]] | None,
    publisher: Publisher | None = None,
) -> ExitCode:
    result: list[ExitCode] = []
    async with anyio.create_task_group() as tg:

        async def work() -> None:
            result.append(await run.execute())
            tg.cancel_scope.cancel()

        async def sigint() -> None:
            with anyio.open_signal_receiver(signal.SIGINT) as signals:
                presses = 0
                async for _ in signals:
                    presses += 1
                    if presses == 1:
                        run.request_halt("ctrl-c")
                    else:
                        await run.kill()
                        tg.cancel_scope.deadline = anyio.current_time() + KILL_BOUND

        tg.start_soon(work)
        if beside is not None:
            view = beside

            async def alongside() -> None:
                await view(run)

            tg.start_soon(alongside)
        if handle_sigint:
            tg.start_soon(sigint)
        if publisher is not None:
            tg.start_soon(publisher.serve)
    if run.killed:
        return ExitCode.KILLED
    return result[0] if result else ExitCode.FAILED
