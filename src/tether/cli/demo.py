"""The demo commands: the unattended demo, and one turn whose tools are stopped.

`tether demo`: the unattended demo (a run, a stop, the halt, a take-over); `tether
demo turn`: one turn whose tools are stopped, then the abort report and the ledger.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ._options import seconds_option
from ._output import echo_json

__all__ = ("demo",)


@click.group(invoke_without_command=True)
@seconds_option(
    "--busy",
    default=1.5,
    help="Seconds each implementing agent works (the stop waits for its call).",
)
@click.pass_context
def demo(ctx: click.Context, busy: float) -> None:
    """Run the main job offline: an unattended run that a stop halts and a take-over ends.

    A temporary git repository with three items and a two-stage plan of command-line
    agents, two lanes. Midway a stop is set through the real stop path (in a temporary
    account home): the agents finish their calls, the lanes' uncommitted work is saved
    aside under refs/tether/saved/..., the claims are released and the run exits halted.
    The stop is lifted (the run stays halted), a take-over restores the saved work and
    finishes every item. Exits 0 when all of that happened.

    \b
    Examples:
      tether demo
      tether demo turn --grace 0.5 --host stdio
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..runs._demo import run_demo
    from ._runview import run_view

    with run_view() as say:
        code = run_demo(say, busy=busy)
    sys.exit(code)


@demo.command()
@seconds_option(
    "--grace",
    default=1.0,
    help="PROCESS grace window in seconds.",
)
@click.option(
    "--host",
    "host_kind",
    type=click.Choice(["inprocess", "stdio"]),
    default="inprocess",
    show_default=True,
    help="Which tool host runs the calls.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the report and ledger as JSON."
)
def turn(grace: float, host_kind: str, as_json: bool) -> None:
    """Run a turn with four tool calls in flight and press Stop.

    The calls: a read-only lookup that never returns, a Bash command that ignores
    SIGTERM, a slow file write that has already started, and a write still waiting for
    the person's approval. The stop ends the lookup at once, terminates then kills the
    Bash tree when the grace window closes, waits for the started write's real result,
    and withdraws the prompt so that write never runs. Works offline, in a temporary
    workspace.

    \b
    Examples:
      tether demo turn
      tether demo turn --grace 0.5 --host stdio
      tether demo turn --json | jq .ledger
    """
    import anyio

    result = anyio.run(_run, grace, host_kind)
    if as_json:
        echo_json(result)
    else:
        _show(result)


async def _run(grace: float, host_kind: str) -> dict[str, Any]:
    import os
    import tempfile
    import time

    import anyio

    from ..errors import ToolAborted
    from ..host.tools import default_tools
    from ..runtime import PermissionRequest, Runtime, ToolProgress
    from ..testing import Hang, SlowWrite

    log: list[str] = []
    started = time.perf_counter()

    def say(text: str) -> None:
        log.append(f"{time.perf_counter() - started:6.3f}s  {text}")

    prompt_pending = anyio.Event()

    async def approver(request: PermissionRequest) -> bool:
        if request.input.get("path") == "approved.txt":
            say(f"approver: {request.tool} {request.input.get('path')} approved")
            return True
        say(
            f"approver: asking the person about {request.tool} {request.input.get('path')}…"
        )
        prompt_pending.set()
        try:
            await anyio.sleep_forever()
        finally:
            say("approver: prompt withdrawn by the stop")
        return False  # pragma: no cover - sleep_forever ends only by cancellation

    with tempfile.TemporaryDirectory(prefix="tether-demo-") as ws:
        tools = [Hang, SlowWrite, *[t for t in default_tools() if t.name == "Bash"]]
        async with Runtime(
            workspace=ws,
            tools=tools,
            permissions={"allow": ["Hang", "Bash"], "ask": ["SlowWrite"]},
            approver=approver,
            grace=grace,
            abort_bound=1.0,
            host=host_kind,  # type: ignore[arg-type]
            guard=False,
        ) as rt:
            events = rt.subscribe()
            session = rt.session()
            outcomes: dict[str, str] = {}
            calls: list[tuple[str, dict[str, Any]]] = [
                ("Hang", {"marker": ".hang-cancelled"}),
                (
                    "Bash",
                    {
                        "command": "trap 'echo got TERM, ignoring it' TERM; echo working; while true; do sleep 0.1; done"
                    },
                ),
                (
                    "SlowWrite",
                    {
                        "path": "approved.txt",
                        "text": "written after the stop",
                        "seconds": grace + 0.5,
                    },
                ),
                (
                    "SlowWrite",
                    {"path": "never.txt", "text": "must not exist", "seconds": 0},
                ),
            ]
            async with anyio.create_task_group() as tg, session.turn() as turn:

                async def call(n: int, name: str, args: dict[str, Any]) -> None:
                    label = f"{n}:{name}"
                    try:
                        result = await turn.call(name, args)
                        outcomes[label] = f"result: {result.output.strip()[:60]}"
                    except ToolAborted as exc:
                        partial = exc.partial_output.strip().replace("\n", " | ")
                        outcomes[label] = (
                            f"TOOL_ABORTED, partial output: {partial[:60]!r}"
                        )
                    say(f"call {label} returned: {outcomes[label]}")

                for n, (name, args) in enumerate(calls, 1):
                    tg.start_soon(call, n, name, args)
                starts = 0
                with anyio.fail_after(30):
                    async for event in events:
                        if isinstance(event, ToolProgress) and event.text.strip() in (
                            "started",
                            "working",
                        ):
                            starts += 1
                            if starts == 3:
                                break
                    await prompt_pending.wait()
                say("Stop pressed: session.abort()")
                report = await session.abort(reason="demo stop")
                say(
                    f"abort() returned in {report.elapsed * 1000:.1f} ms; settled={report.settled}"
                )
            await session.settled()
            say("turn.settled")
            ledger = session.ledger_calls()
            wrote = sorted(os.listdir(ws))
    return {
        "log": log,
        "report": {
            "settled": report.settled,
            "elapsed_ms": round(report.elapsed * 1000, 3),
            "pending": [
                {"call_id": p.call_id, "tool": p.tool, "why": p.why}
                for p in report.pending
            ],
        },
        "ledger": [
            {
                "call_id": r.call_id,
                "tool": r.tool,
                "stop_class": r.stop_class,
                "state": str(r.state),
                "code": None if r.code is None else str(r.code),
                "settled": r.settled,
                "file": _file_of(r.input),
            }
            for r in ledger
        ],
        "outcomes": outcomes,
        "files_in_workspace": wrote,
    }


def _file_of(recorded_input: str | None) -> str | None:
    """The file a call names in its input (`path`, `file_path`), if any."""
    try:
        data = json.loads(recorded_input or "")
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    found = data.get("file_path", data.get("path"))
    return found if isinstance(found, str) else None


def _show(result: dict[str, Any]) -> None:
    from rich.table import Table

    from .._term import rich_console

    console = rich_console()
    console.print("[bold]A turn with four calls in flight, then Stop[/bold]")
    for line in result["log"]:
        console.print(f"  {line}", highlight=False)
    report = result["report"]
    table = Table(
        title=f"AbortReport (settled={report['settled']}, {report['elapsed_ms']} ms)"
    )
    # Whole call ids, never cut: they are what `tether ledger` and the log name.
    width = max((len(r["call_id"]) for r in result["ledger"]), default=4)
    table.add_column("call", no_wrap=True, min_width=width)
    table.add_column("tool")
    table.add_column("why it still runs")
    for p in report["pending"]:
        table.add_row(p["call_id"], p["tool"], p["why"])
    console.print(table)
    settled = all(r["settled"] for r in result["ledger"])
    ledger = Table(
        title="Ledger after turn.settled"
        + (": every call settled" if settled else ": NOT every call settled")
    )
    ledger.add_column("call", no_wrap=True, min_width=width)
    for column in ("tool", "file", "class", "state"):
        ledger.add_column(column)
    for r in result["ledger"]:
        ledger.add_row(
            r["call_id"],
            r["tool"],
            r["file"] or "",
            r["stop_class"],
            r["state"]
            if r["code"] in (None, "TOOL_ABORTED")
            else (f"{r['state']} {r['code']}"),
        )
    console.print(ledger)
    console.print(
        f"Files in the workspace: {', '.join(result['files_in_workspace']) or 'none'}"
    )
