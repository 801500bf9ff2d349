"""`tether chat`: an agent session in the terminal, with a Stop that tells the truth.

prompt_toolkit reads the person's lines and, while a turn runs, single keys (Esc and
Ctrl-C stop the turn; y / a / n answer a permission prompt; y / n / c and one line per
field answer an MCP server's question); rich prints the streamed
answer, a status line while a model request is waited for (and retried), one status line
per tool call change and the abort report while a stopped turn settles. The session and its transcript live in the account's ledger file, so
`--resume ID` continues one.
"""

from __future__ import annotations

import shlex
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .._term import visible

if TYPE_CHECKING:
    import anyio.abc
    from prompt_toolkit.input import Input
    from rich.console import Console

    from .._config import Config
    from ..models import Model
    from ..runtime import (
        AgentEvent,
        AgentSession,
        ElicitationAnswer,
        ElicitationRequest,
        PendingCall,
        PermissionRequest,
    )

__all__ = ("chat",)

_ANSWERS = {"y": "once", "a": "always", "n": "deny"}
_FORM_ANSWERS = {"y": "accept", "n": "decline", "c": "cancel"}

_SHOWN_LINES = 20
"""Output lines of one call shown on the screen; the rest are counted."""


@click.command()
@click.option(
    "--model",
    "model_spec",
    metavar="SPEC",
    help="openai:<model> (endpoint from TETHER_MODEL_URL, key from TETHER_MODEL_KEY)"
    " or scripted:<file>; default: name in the [model] table of the config file.",
)
@click.option(
    "--system",
    metavar="TEXT",
    help="The system message of every model request; default: system in the [model]"
    " table of the config file, else one naming the workspace and the date"
    ' (--system "" sends none).',
)
@click.option("--resume", "resume_id", metavar="ID", help="Continue a saved session.")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=".",
    show_default=True,
    help="The directory the tools work in.",
)
@click.option(
    "--no-login",
    is_flag=True,
    help="Do not offer to authorise the MCP servers that need it: each is skipped,"
    " with the line naming `tether mcp login NAME`.",
)
def chat(
    model_spec: str | None,
    system: str | None,
    resume_id: str | None,
    workspace: Path,
    no_login: bool,
) -> None:
    """Talk to an agent whose tool calls run through tether.

    Esc or Ctrl-C during a turn stops it and shows what is still settling (a write
    that started runs to its end; an MCP or plugin tool is told to cancel and waited
    for); pressed again, it kills the commands still in their grace window at once and
    stops waiting for the tools whose servers never answered (they end unknown). Ctrl-C or Ctrl-D at the prompt exits. Sessions are
    kept in the account's ledger; the first line shows the session id.

    A streamable-HTTP MCP server that needs authorisation is offered before the
    first turn (`Authorise now? [Y/n]`): yes runs the login of `tether mcp login
    NAME` and connects it; no, or Ctrl-C during the login, goes on without it.
    --no-login, or an output that is not a terminal, skips it without asking.

    \b
    Examples:
      TETHER_MODEL_URL=http://127.0.0.1:8000/v1 TETHER_MODEL_KEY=none \\
        tether chat --model openai:qwen2.5-coder
      tether chat --model scripted:moves.jsonl
      tether chat --model openai:gpt-4o --system "Answer in one sentence."
      tether chat --resume session_3f2a… --model openai:gpt-4o
      tether chat --model scripted:moves.jsonl --no-login
    """
    import anyio

    from .._config import load_config
    from ..errors import Refused, UsageError
    from ..models import ModelError, model_from_spec
    from ._chatlogin import offers_login

    config = load_config()
    spec = model_spec or config.model
    if not spec:
        raise UsageError(
            "no model: pass --model openai:<model> or --model scripted:<file>,"
            " or set name in the [model] table of the config file"
        )
    try:
        model = model_from_spec(spec, config=config)
    except ModelError as exc:
        # A model that cannot be built is a refusal of the command line or the config
        # (exit 2, as `tether acp` and the README say), not a failure of a turn.
        raise UsageError(str(exc)) from None
    if not sys.stdin.isatty():
        raise Refused(
            "tether chat needs a terminal on stdin; programs drive sessions"
            " with tether acp or the Agent API"
        )
    # The resume hint repeats what the command line gave: the model and the system
    # message (the transcript keeps neither).
    hint = f"--model {shlex.quote(spec)}"
    if system is not None:
        hint += f" --system {shlex.quote(system)}"
    else:
        system = config.model_system
    offer = offers_login(no_login=no_login, output_is_terminal=sys.stdout.isatty())
    try:
        anyio.run(_chat, model, config, hint, system, resume_id, workspace, offer)
    except BaseExceptionGroup as group:
        # The runtime's task group wraps an error of the session; show it as itself.
        raise _only_error(group) from None


def _only_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


def ledger_path() -> Path:
    """The account's ledger file of chat sessions."""
    from .._config import paths

    return paths().state_dir / "sessions.sqlite"


class _Terminal:
    """The chat's screen and keys: renders agent events, asks for permission, stops."""

    def __init__(self, console: Console, keys: Input) -> None:
        self.console = console
        self.keys = keys
        self.session: AgentSession | None = None
        self.always: set[str] = set()
        self.question: tuple[anyio.Event, list[str]] | None = None
        """The one prompt on the screen that a key answers, if any."""
        self.keys_answer = _ANSWERS
        """The keys that answer the prompt on the screen, and what each means."""
        self.typing: tuple[anyio.Event, list[str]] | None = None
        """The form field being typed, if any: set at Enter, with the line typed."""
        self.asking: anyio.Lock | None = None
        """Held while a prompt waits: a second request is asked after the first."""
        self.stopping = False
        self.killing = False
        self.turn_over: anyio.Event | None = None
        """Set when the running turn has settled (the countdown ends with it)."""
        self.block = 0
        """Lines of the stop's countdown at the bottom of the screen (0: none)."""
        self.task_group: anyio.abc.TaskGroup | None = None
        self.in_text = False
        self.titles: dict[str, str] = {}
        self.shown: dict[str, anyio.Event] = {}
        """Per call id: its request line is on the screen (a prompt comes after it)."""
        self.output_lines: dict[str, int] = {}
        """Per call id: the output lines it printed so far (the first 20 are shown)."""
        self.waiting = False
        """The last line on the screen says that the model is being waited for."""

    # -- rendering ----------------------------------------------------------------

    def _line(self, text: str, style: str = "") -> None:
        self._clear_waiting()
        if self.in_text:
            self.console.print()
            self.in_text = False
        self.block = 0
        # What a tool printed or a model wrote never reaches the terminal as a control
        # sequence (S16): each escape is shown as text.
        self.console.print(visible(text), style=style, markup=False, highlight=False)

    def _clear_waiting(self) -> None:
        """Take the "waiting for the model" line off the screen (output has begun)."""
        if not self.waiting:
            return
        self.waiting = False
        if self.console.is_terminal:
            # Up to the start of the waiting line, then clear to the end of the screen.
            self.console.file.write("\x1b[1F\x1b[J")

    def _show_waiting(self, attempt: int, reason: str | None) -> None:
        text = "waiting for the model…"
        if attempt > 1 and reason:
            text = f"waiting for the model: {reason}"
        # One row, so that taking it back is one row up.
        self._line(text[: max(20, self.console.width - 1)], "dim")
        self.waiting = True

    def _block(self, lines: list[str], style: str) -> None:
        """Print `lines` in place of the countdown printed last, if nothing came since."""
        if self.block and self.console.is_terminal:
            # Up to the block's first line, then clear to the end of the screen.
            self.console.file.write(f"\x1b[{self.block}F\x1b[J")
        width = max(20, self.console.width - 1)
        for text in lines:
            self._line(text[:width], style)
        self.block = len(lines)

    async def on_event(self, event: AgentEvent) -> None:
        from ..runtime import (
            MessageChunk,
            ModelWaiting,
            ToolCallEnded,
            ToolCallProgress,
            ToolCallRequested,
            ToolCallStarted,
            TurnEnded,
        )

        match event:
            case ModelWaiting(attempt=attempt, reason=reason):
                self._show_waiting(attempt, reason)
            case MessageChunk(text=text):
                self._clear_waiting()
                self.console.print(visible(text), end="", markup=False, highlight=False)
                self.in_text = True
            case ToolCallRequested(call_id=call_id, title=title, stop_class=stop_class):
                word = str(stop_class) if stop_class is not None else "unknown"
                self._line(f"● {title}  ({word})", "bold")
                self.titles[call_id] = title
                self._shown(call_id).set()
            case ToolCallStarted(tool=tool):
                self._line(f"  {tool}: running", "cyan")
            case ToolCallProgress(call_id=call_id, text=text):
                lines = text.splitlines()
                printed = self.output_lines.get(call_id, 0)
                self.output_lines[call_id] = printed + len(lines)
                for line in lines[: max(0, _SHOWN_LINES - printed)]:
                    self._line(f"  │ {line[:200]}", "dim")
            case ToolCallEnded(
                call_id=call_id, tool=tool, state=state, code=code, content=content
            ):
                more = self.output_lines.pop(call_id, 0) - _SHOWN_LINES
                if more > 0:
                    self._line(
                        f"  │ … {more} more line{'s' if more > 1 else ''}", "dim"
                    )
                first = _end_summary(content)
                mark = "✓" if code is None else "✗"
                style = "green" if code is None else "red"
                self._line(f"  {mark} {tool}: {state}  {first}".rstrip(), style)
            case TurnEnded(stop_reason=reason, error=error):
                self._clear_waiting()
                if reason == "cancelled":
                    self._line("stopped: the turn has settled", "yellow")
                elif reason == "error":
                    self._line(f"error: {error}", "red")
                elif reason != "end_turn":
                    self._line(f"turn ended: {reason}", "yellow")
                elif self.in_text:
                    self._line("")

    def _shown(self, call_id: str) -> anyio.Event:
        import anyio

        return self.shown.setdefault(call_id, anyio.Event())

    # -- keys ---------------------------------------------------------------------

    def on_keys(self) -> None:
        """Read the keys typed while a turn runs (prompt_toolkit's reader callback)."""
        from prompt_toolkit.keys import Keys

        pressed = self.keys.read_keys() + self.keys.flush_keys()
        for key in pressed:
            if key.key in (Keys.Escape, Keys.ControlC):
                assert self.task_group is not None
                self.task_group.start_soon(self.stop)
            elif self.typing is not None:
                self._type(key.key, key.data)
            elif self.question is not None and key.data.lower() in self.keys_answer:
                # One key per prompt: a key typed before the next prompt shows
                # answers nothing.
                answered, choice = self.question
                self.question = None
                choice.append(self.keys_answer[key.data.lower()])
                answered.set()

    def _type(self, key: object, data: str) -> None:
        """One key of a form field: Enter ends the line, Backspace takes one back."""
        from prompt_toolkit.keys import Keys

        assert self.typing is not None
        done, line = self.typing
        if key in (Keys.ControlM, Keys.ControlJ):
            self.typing = None
            self.console.file.write("\n")
            done.set()
        elif key in (Keys.ControlH, Keys.Backspace):
            if line:
                line.pop()
                self.console.file.write("\b \b")
        elif data.isprintable():
            line.append(data)
            self.console.file.write(data)
        self.console.file.flush()

    async def stop(self) -> None:
        """Stop the turn and show what still settles, then what it became.

        A second press while it settles kills the process trees at once.
        """
        if self.session is None:
            return
        if self.stopping:
            await self.kill()
            return
        self.stopping = True
        self._line("stopping…", "yellow")
        report = await self.session.abort(reason="Esc pressed")
        self._show_pending(report.pending)
        await self._count_down()

    async def kill(self) -> None:
        """The second press: kill now, and stop waiting for silent servers.

        Process trees still in their grace window are killed at once; extensions whose
        servers have not answered end unknown.
        """
        if self.killing or self.session is None:
            return
        self.killing = True
        from ..host import StopClass
        from ..runtime import CallState

        waited = {
            p.call_id: p.tool
            for p in self.session.pending()
            if p.stop_class is StopClass.EXTENSION
        }
        self._line("killing now: process trees are killed without their grace window")
        report = await self.session.abort(reason="Esc pressed again", kill=True)

        for record in report.calls:
            if record.call_id in waited and record.state is CallState.END_UNKNOWN:
                self._line(
                    f"stopped waiting for {_extension(record.tool)}: it ended unknown "
                    "(the server never answered; its effect is unknown)",
                    "yellow",
                )
        self._show_pending(report.pending)

    def _show_pending(self, pending: tuple[PendingCall, ...]) -> None:
        from ..host import StopClass
        from ..runtime import PendingPhase

        lines = []
        for p in pending:
            if (
                p.stop_class is StopClass.EXTENSION
                and p.phase is PendingPhase.STARTED
                and not self.killing
            ):
                lines.append(
                    f"waiting for {_extension(p.tool)}: press Esc again to stop waiting"
                )
            else:
                lines.append(f"stopping: waiting for {p.tool} to finish ({p.why})")
        if not self.killing and any(p.stop_class is StopClass.PROCESS for p in pending):
            lines.append("  Esc or Ctrl-C again kills now")
        if lines:
            self._block(lines, "yellow")

    async def _count_down(self) -> None:
        """Show the stop's pending calls again as their grace windows count down.

        It goes on until the turn has settled.
        """
        import anyio

        assert self.session is not None
        shown = self.session.pending()
        while self.turn_over is not None and not self.turn_over.is_set():
            with anyio.move_on_after(0.25):
                await self.turn_over.wait()
            if self.turn_over.is_set():
                return
            now = self.session.pending()
            if now != shown and now:
                self._show_pending(now)
            shown = now

    async def approve(self, request: PermissionRequest) -> bool:
        """Ask the person whether a call may run: once, always (this tool), or not."""
        import anyio

        if self.asking is None:
            self.asking = anyio.Lock()
        # Calls of one model message ask at the same time; one prompt is on the
        # screen at once, so each key answers the prompt it was typed for.
        async with self.asking:
            return await self._ask(request)

    async def _ask(self, request: PermissionRequest) -> bool:
        import anyio

        if request.tool in self.always:
            return True
        # The call's request line is printed first (events arrive on their own task);
        # bounded, so a prompt is never held back by the screen.
        with anyio.move_on_after(1.0):
            await self._shown(request.call_id).wait()
        answered = anyio.Event()
        choice: list[str] = []
        self.question = (answered, choice)
        subject = self.titles.get(request.call_id, request.tool)
        self._line(f"? allow {subject}  [y] once  [a] always  [n] deny", "bold magenta")
        try:
            await answered.wait()
        finally:
            self.question = None
        if choice[0] == "always":
            self.always.add(request.tool)
        self._line(f"  {choice[0]}", "magenta")
        return choice[0] != "deny"

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        """Put an MCP server's question to the person: answer, decline or cancel.

        Answered field by field, one line each. A stop withdraws it (this task is
        cancelled).
        """
        import anyio

        if self.asking is None:
            self.asking = anyio.Lock()
        async with self.asking:
            try:
                return await self._elicit(request)
            except anyio.get_cancelled_exc_class():
                self.question = self.typing = None
                self.keys_answer = _ANSWERS
                self._line("  question withdrawn by the stop", "yellow")
                raise

    async def _elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        import anyio

        from ..runtime import ElicitationAnswer

        with anyio.move_on_after(1.0):
            await self._shown(request.call_id).wait()
        self._line(f"? {request.server} asks: {request.message}", "bold magenta")
        self._line("  [y] answer  [n] decline  [c] cancel", "magenta")
        answered = anyio.Event()
        choice: list[str] = []
        self.question, self.keys_answer = (answered, choice), _FORM_ANSWERS
        try:
            await answered.wait()
        finally:
            self.question, self.keys_answer = None, _ANSWERS
        self._line(f"  {choice[0]}", "magenta")
        if choice[0] != "accept":
            return ElicitationAnswer("decline" if choice[0] == "decline" else "cancel")
        properties = request.schema.get("properties", {})
        required = set(request.schema.get("required", []))
        content: dict[str, object] = {}
        for name, field in properties.items():
            value = await self._field(name, field, name in required)
            if value is not None:
                content[name] = value
        return ElicitationAnswer("accept", content)

    async def _field(self, name: str, field: dict[str, Any], required: bool) -> object:
        """Read one field until its line is valid; None: left empty and optional."""
        import anyio

        hint = _field_hint(field)
        label = str(field.get("title") or name)
        while True:
            self.console.print(
                visible(f"  {label}{' *' if required else ''} ({hint}): "),
                end="",
                markup=False,
                highlight=False,
            )
            done, line = anyio.Event(), list[str]()
            self.typing = (done, line)
            try:
                await done.wait()
            finally:
                self.typing = None
            value, problem = _field_value("".join(line).strip(), field, required)
            if not problem:
                return value
            self._line(f"  {problem}", "red")

    async def run_turn(self, session: AgentSession, text: str) -> None:
        """Run one turn with the keys in raw mode, so Esc and Ctrl-C stop it."""
        import anyio

        self.stopping = False
        self.killing = False
        self.turn_over = anyio.Event()
        async with anyio.create_task_group() as tg:
            self.task_group = tg
            with self.keys.raw_mode(), self.keys.attach(self.on_keys):
                try:
                    await session.prompt(text)
                finally:
                    self.turn_over.set()
        self.task_group = None


async def _chat(
    model: Model,
    config: Config,
    hint: str,
    system: str | None,
    resume_id: str | None,
    workspace: Path,
    offer_login: bool,
) -> None:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.input import create_input

    from .._term import rich_console
    from ..host._mcpperson import person_authorises
    from ..runtime import Agent, Runtime, default_system
    from ._chatlogin import LoginOffer

    console = rich_console()
    keys = create_input()
    terminal = _Terminal(console, keys)
    lines: PromptSession[str] = PromptSession()
    async with AsyncExitStack() as stack:
        runtime = Runtime(
            workspace=workspace,
            ledger=ledger_path(),
            approver=terminal.approve,
            elicitor=terminal.elicit,
            config=config,
        )
        if offer_login:
            # Only while its servers start: nothing started later asks the person.
            with person_authorises(LoginOffer(console, keys, config)):
                await stack.enter_async_context(runtime)
        else:
            await stack.enter_async_context(runtime)
        for problem in runtime.problems:
            console.print(f"note: {problem}", style="yellow", markup=False)
        agent = Agent(
            runtime,
            model,
            system=default_system(runtime.workspace) if system is None else system,
        )
        if resume_id:
            session = agent.resume(resume_id, on_event=terminal.on_event)
        else:
            session = agent.session(on_event=terminal.on_event)
        terminal.session = session
        console.print(
            f"session {session.id} · {model.name}"
            " · Esc or Ctrl-C stops a turn · Ctrl-D exits",
            style="dim",
            markup=False,
        )
        if resume_id:
            _show_history(console, session)
        while True:
            try:
                text = await lines.prompt_async("you: ")
            except (KeyboardInterrupt, EOFError):
                break
            if text.strip():
                await terminal.run_turn(session, text)
        # The model too: resuming needs one, and a config may name none or another.
        console.print(
            f"bye: resume with tether chat --resume {session.id} {hint}",
            style="dim",
            markup=False,
        )


def _extension(tool: str) -> str:
    """An extension tool as the person knows it: `<tool> on <server>` for MCP tools."""
    parts = tool.split("__")
    if len(parts) == 3 and parts[0] == "mcp":
        return f"{parts[2]} on {parts[1]}"
    return tool


def _end_summary(content: str) -> str:
    """The end line's text of a call: its first line, and for a stopped call its output.

    A stopped call's output so far is printed on the lines after the first; the end
    line says it in brief (the one line, or the count and the last).
    """
    lines = content.splitlines()
    if not lines:
        return ""
    first = lines[0][:160]
    rest = lines[1:]
    if not first.endswith("Output so far:"):
        return first
    if len(rest) == 1:
        return f"{first} {rest[0][:100]}"
    return f"{first} {len(rest)} lines, the last: {rest[-1][:100]}"


def _show_history(console: Console, session: AgentSession, last: int = 6) -> None:
    """Print the end of a resumed session's transcript, one line per message."""
    shown = [m for m in session.messages if m.role in ("user", "assistant")][-last:]
    console.print(
        f"resumed: {len(session.messages)} messages, the last ones:",
        style="dim",
        markup=False,
    )
    for message in shown:
        text = " ".join(message.content.split())[:100]
        calls = ", ".join(c.name for c in message.tool_calls)
        who = "you" if message.role == "user" else "agent"
        tail = (" [cut by a stop]" if message.cut else "") + (
            f" [{calls}]" if calls else ""
        )
        console.print(f"  {who}: {text}{tail}", style="dim", markup=False)


def _choices(field: dict[str, Any]) -> list[Any]:
    """The values an enum field allows (`enum`, or `oneOf` of `const`s)."""
    if "enum" in field:
        return list(field["enum"])
    return [option.get("const") for option in field.get("oneOf", [])]


def _field_hint(field: dict[str, Any]) -> str:
    """How a field of an MCP form is typed: its type, choices, default."""
    choices = _choices(field)
    kind = field.get("type", "string")
    hint = "one of " + ", ".join(map(str, choices)) if choices else str(kind)
    if kind == "boolean":
        hint = "y/n"
    if "default" in field:
        hint += f"; Enter: {field['default']}"
    return hint


def _field_value(
    text: str, field: dict[str, Any], required: bool
) -> tuple[object, str]:
    """The value typed for a field, or the problem with it.

    MCP's form schema is flat: string, number, integer, boolean, enum.
    """
    if not text:
        if "default" in field:
            return field["default"], ""
        return None, "an answer is needed" if required else ""
    choices = _choices(field)
    if choices:
        if text in map(str, choices):
            return choices[[str(c) for c in choices].index(text)], ""
        return None, "one of " + ", ".join(map(str, choices))
    kind = field.get("type", "string")
    if kind == "boolean":
        if text.lower() in ("y", "yes", "true"):
            return True, ""
        if text.lower() in ("n", "no", "false"):
            return False, ""
        return None, "y or n"
    if kind in ("integer", "number"):
        try:
            return (int(text) if kind == "integer" else float(text)), ""
        except ValueError:
            return None, f"a number{' (whole)' if kind == 'integer' else ''}"
    return text, ""
