"""What a tool is: its stop class, its input schema, its context, and the `@tool` decorator.

A tool is a name, a `StopClass`, an input schema and an async `run(ctx, args)`. The stop
class, never the name, decides what a stop does to a call (spec 01). This module does not
know about permissions, hosts or the runtime.
"""

from __future__ import annotations

import abc
import enum
import inspect
import os
import typing
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import anyio
import attrs
import pydantic

from .._env import TetherEnv
from ..errors import InvalidInput, ToolFailed, UsageError

if TYPE_CHECKING:
    from ._contain import CommandOutcome, Network

__all__ = (
    "Decision",
    "FunctionTool",
    "OnStop",
    "StopClass",
    "StopPolicy",
    "Tool",
    "ToolContext",
    "TypedTool",
    "check_unique_names",
    "default_decision",
    "tool",
)


class StopClass(enum.StrEnum):
    """How a tool may be stopped; the value is the lower-case word reports start with."""

    READ_ONLY = "read_only"
    """Hides no side effect: abandoned at once on a stop, its work cancelled."""
    PROCESS = "process"
    """Backed by a process tree: terminated, a grace window, then killed."""
    MUTATING = "mutating"
    """Changes files: never abandoned once started; its real result is awaited."""
    EXTENSION = "extension"
    """MCP and plugin tools: as MUTATING, the real result is awaited."""

    @property
    def policy(self) -> StopPolicy:
        """What a stop does to a started call of this class.

        The one table both sides of the host seam read.
        """
        return _POLICIES[self]


class OnStop(enum.Enum):
    """What a stop does to a call whose operation has started (spec 01)."""

    ABANDON = "abandon"
    """The runtime stops waiting at once and the call ends TOOL_ABORTED; the host
    cancels its work; what it prints or returns later is discarded."""
    TERMINATE = "terminate"
    """The host sends SIGTERM to its process tree; the runtime waits at most the grace
    window for its end, then has every descendant killed."""
    AWAIT = "await"
    """Never abandoned: the runtime waits for the host's real result."""


@attrs.frozen
class StopPolicy:
    """A row of the stop-class table."""

    on_stop: OnStop
    tells_tool: bool
    """Whether the tool's `ctx.cancelled` is set at the stop (a write is not told: it
    runs to its end as if no stop had come)."""

    @property
    def abandons(self) -> bool:
        """Whether the call ends at the stop, its later output and result not taken."""
        return self.on_stop is not OnStop.AWAIT


_POLICIES: dict[StopClass, StopPolicy] = {
    StopClass.READ_ONLY: StopPolicy(OnStop.ABANDON, tells_tool=True),
    StopClass.PROCESS: StopPolicy(OnStop.TERMINATE, tells_tool=True),
    StopClass.MUTATING: StopPolicy(OnStop.AWAIT, tells_tool=False),
    StopClass.EXTENSION: StopPolicy(OnStop.AWAIT, tells_tool=True),
}


Decision: typing.TypeAlias = typing.Literal["allow", "ask", "deny"]
"""What permission rules and the broker decide for a call."""


def default_decision(stop_class: StopClass) -> Decision:
    """The decision when no rule matches: read-only calls run, every other class asks."""
    return "allow" if stop_class is StopClass.READ_ONLY else "ask"


@attrs.define(eq=False)
class ToolContext:
    """What every tool call is handed: its ids, the workspace, the stop and progress.

    `cancelled` is set when a stop reaches the call. A tool may watch it to end early;
    a tool that ignores it is still released by the runtime (S5).
    """

    call_id: str
    session_id: str
    workspace: Path
    _cancelled: anyio.Event | None = attrs.field(default=None, init=False)
    _on_progress: Callable[[str], None] | None = attrs.field(
        default=None, alias="on_progress"
    )
    _processes: int = attrs.field(default=0, init=False)
    _asking: str = attrs.field(default="", init=False)

    @property
    def cancelled(self) -> anyio.Event:
        """Set when a stop reaches the call (made on first use: most calls never look)."""
        if self._cancelled is None:
            self._cancelled = anyio.Event()
        return self._cancelled

    @property
    def processes_running(self) -> int:
        """How many process trees started by `run_process()` are not reaped yet."""
        return self._processes

    @property
    def asking(self) -> str:
        """The question the call waits on the person to answer now ("": none)."""
        return self._asking

    def ask_person(self, question: str) -> None:
        """Say the call now waits on the person's answer to `question` ("": no longer).

        A stop that comes meanwhile withdraws the question, and its report says so.
        """
        self._asking = question

    def _end(self) -> None:
        """The call is over: later progress goes nowhere.

        The context no longer holds the host's call either, so both are freed as soon
        as nothing uses them.
        """
        self._on_progress = None

    def progress(self, text: str) -> None:
        """Report progress output of the call (never blocks; dropped after a stop)."""
        if self._on_progress is not None:
            self._on_progress(text)

    def resolve(self, path: str) -> Path:
        """Return `path` made absolute against the workspace (no checks)."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.workspace / p

    async def run_process(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        limit: int = 30_000,
        stream: bool = False,
        writable: Sequence[Path] = (),
        pass_env: Collection[str] = (),
        network: Network = "host",
    ) -> CommandOutcome:
        """Run a program as a process tree tied to this call; return how it ended.

        The program runs in the same containment as Bash (its own PID namespace and
        the wall of S15, where the kernel allows it: only the workspace, the
        `writable` paths the tool declares and a private `TMPDIR` can be written), in
        `cwd` (default: the workspace), with `env` (default: this process's
        environment) plus `TETHER_AGENT=1`, without tether's secrets unless named in
        `pass_env`, and stdin `/dev/null`; `network="none"` gives it loopback only. The call is not over while any of its
        processes runs: a stop sends SIGTERM to the tree and waits for its end; when
        the call is cancelled (the grace window closed, or a READ_ONLY call abandoned)
        every process of the tree is killed and reaped before the cancellation goes on.
        Output is kept bounded (`limit` bytes, head and tail); with `stream` it is also
        reported as progress.

        ```python
        @tool(stop_class=StopClass.READ_ONLY)
        async def git_log(ctx: ToolContext, n: int = 10) -> str:
            done = await ctx.run_process(["git", "log", f"-{n}", "--oneline"])
            return done.output
        ```

        Raises:
            ToolFailed: the program could not start (the message says why).
        """
        from ._proctree import run_command

        base = dict(os.environ if env is None else env)
        base[TetherEnv.AGENT] = "1"
        self._processes += 1
        try:
            return await run_command(
                argv,
                cwd=self.workspace if cwd is None else cwd,
                env=base,
                stop=self.cancelled,
                on_output=self.progress if stream else _ignore,
                timeout=timeout,
                limit=limit,
                workspace=self.workspace,
                writable=writable,
                pass_env=pass_env,
                network=network,
            )
        except OSError as exc:
            raise ToolFailed(
                f"{argv[0] if argv else 'the program'} could not start: {exc}"
            ) from None
        finally:
            # run_command returns (or raises) only once its tree is reaped.
            self._processes -= 1


def _ignore(text: str) -> None:
    del text


class Tool(abc.ABC):
    """A tool the host can run. Subclass for tools whose schema is not Python types."""

    name: str
    stop_class: StopClass
    description: str = ""
    subject_field: str | None = None
    """The input field permission rules match against (`command`, `file_path`)."""
    looks_up: bool = False
    """Whether the host awaits `look_up()` before the permission rules judge a call."""

    @abc.abstractmethod
    def input_schema(self) -> dict[str, Any]:
        """Return the JSON schema of the tool's input."""

    @abc.abstractmethod
    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Return the validated input.

        Raises:
            InvalidInput: the input does not match the schema; `.path` names the field.
        """

    @abc.abstractmethod
    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Run the call and return its text output.

        Raises:
            ToolFailed: the tool failed; the message goes back to the model.
        """

    async def look_up(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Return `args` with what the rules must judge looked up, once (`looks_up`).

        WebFetch resolves its URL's host here, so that the rules judge the address it
        will connect to and no second resolution can differ (S15). Awaited in the
        call's task, so a stop cancels it. The default returns `args` unchanged.
        """
        return dict(args)

    def subject(self, args: Mapping[str, Any]) -> str | None:
        """Return what permission rules match for this call (a command, a path)."""
        if self.subject_field is None:
            return None
        value = args.get(self.subject_field)
        return value if isinstance(value, str) else None

    def title(self, args: Mapping[str, Any]) -> str:
        """Return the call's one-line title (`Bash: make test`): see `call_title`."""
        return call_title(self.name, args, self.subject_field)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.stop_class.name}>"


TITLE_WIDTH = 80
"""Characters of a call's subject its title keeps (the rest is cut to `…`)."""
_SUBJECT_FIELDS = ("command", "file_path", "path", "pattern", "url", "prompt")
"""Input fields that commonly name what a call works on, for tools without a subject
field of their own (an MCP server's)."""


def call_title(
    name: str, args: Mapping[str, Any], subject_field: str | None = None
) -> str:
    """A call's one-line title: the tool and what it works on (`Bash: make test`).

    The one source of titles, wherever a call is shown (the agent's events, chat, an
    editor's ACP updates, a session loaded again): the tool's `subject_field` first,
    then the common subject fields; an input with none of them is shown as JSON.
    """
    for field in (
        (subject_field, *_SUBJECT_FIELDS) if subject_field else _SUBJECT_FIELDS
    ):
        value = args.get(field)
        if isinstance(value, str) and value.strip():
            return f"{name}: {_cut(value.strip().splitlines()[0])}"
    if not args:
        return name
    import json  # only here: most calls have a subject

    return f"{name}: {_cut(json.dumps(dict(args), default=str))}"


def _cut(line: str) -> str:
    return line if len(line) <= TITLE_WIDTH else line[: TITLE_WIDTH - 1] + "…"


def _error_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "<input>"


_Direct: typing.TypeAlias = (
    "tuple[Callable[[object], object], Callable[..., Any]] | None"
)
"""A model's `validate_python` and `to_python`, or None where they must not be used."""


def _direct(model: type[pydantic.BaseModel]) -> _Direct:
    """The validator and serializer of a model that keeps pydantic's own, or None.

    A built model that keeps pydantic's `model_validate` and `model_dump` gets them;
    found once per model: a tool's input model is not rebuilt once its tool is in use.
    """
    try:
        return _DIRECT[model]
    except KeyError:
        if not model.__pydantic_complete__:
            return None  # asked again once it is built
        plain = (
            getattr(model.model_validate, "__func__", None) is _MODEL_VALIDATE
            and model.model_dump is _MODEL_DUMP
        )
        found = _DIRECT[model] = (
            (
                model.__pydantic_validator__.validate_python,
                model.__pydantic_serializer__.to_python,
            )
            if plain
            else None
        )
    return found


_MODEL_VALIDATE = getattr(pydantic.BaseModel.model_validate, "__func__", None)
_MODEL_DUMP = pydantic.BaseModel.model_dump
_DIRECT: dict[type[pydantic.BaseModel], _Direct] = {}
"""Input models' validator and serializer (tools' models live as long as the tools)."""


def validate_with(
    model: type[pydantic.BaseModel], raw: Mapping[str, Any]
) -> dict[str, Any]:
    """Validate `raw` with a pydantic model, turning errors into `InvalidInput`."""
    if type(raw) is not dict:
        if not isinstance(raw, Mapping):
            raise InvalidInput("input must be a JSON object", path="<input>")
        raw = dict(raw)
    try:
        direct = _direct(model)
        if direct is not None:
            # What `model_validate(raw).model_dump()` does, without its argument
            # handling: half the cost, on every call.
            validate, dump = direct
            dumped: dict[str, Any] = dump(validate(raw), by_alias=False)
            return dumped
        return model.model_validate(raw).model_dump()
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        path = _error_path(first["loc"])
        raise InvalidInput(
            f"invalid input at {path}: {first['msg']}", path=path
        ) from None


class TypedTool(Tool):
    """A tool whose input is a pydantic model: its schema and validation come from it.

    A subclass sets `input_model` (with `extra="forbid"`: an unknown field is refused)
    and writes `run`; it overrides `validate` only for checks the model cannot express,
    calling `super().validate(raw)` first.
    """

    input_model: type[pydantic.BaseModel]
    """The model of the input; its field descriptions reach the model in the schema."""

    def input_schema(self) -> dict[str, Any]:
        """Return the JSON schema of `input_model` (aliases as field names)."""
        return self.input_model.model_json_schema(by_alias=True)

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validate `raw` against `input_model`.

        Raises:
            InvalidInput: the input does not match; `.path` names the field.
        """
        return validate_with(self.input_model, raw)


class FunctionTool(TypedTool):
    """A tool made from an async function by `@tool`; input schema from its parameters."""

    def __init__(
        self,
        fn: Callable[..., Awaitable[str]],
        *,
        name: str | None = None,
        stop_class: StopClass,
        description: str | None = None,
        subject_field: str | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise UsageError(f"@tool needs an async function, got {fn!r}")
        self.fn = fn
        self.name = name or fn.__name__
        if not isinstance(stop_class, StopClass):
            # A StrEnum compares equal to its word, so "read_only" would pass as one
            # until the first `is` check or `.name` met it.
            words = ", ".join(f"StopClass.{c.name}" for c in StopClass)
            raise UsageError(
                f"tool {self.name}: stop_class must be a StopClass ({words}),"
                f" not {stop_class!r}"
            )
        self.stop_class = stop_class
        self.description = description or inspect.getdoc(fn) or ""
        self.subject_field = subject_field
        self.input_model = _model_from_signature(fn, self.name)
        self._takes_nothing = (
            self.input_model if not self.input_model.model_fields else None
        )
        """The input model when it has no field: it takes `{}` only (the model forbids
        extra fields), and has nothing to check or fill in."""

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validate `raw` against `input_model`.

        Raises:
            InvalidInput: the input does not match; `.path` names the field.
        """
        if type(raw) is dict and not raw and self.input_model is self._takes_nothing:
            return {}  # what the model gives for `{}`, without building an instance
        return validate_with(self.input_model, raw)

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Call the function with the context and the validated input."""
        result = await self.fn(ctx, **args)
        if result is None:
            # A forgotten `return` would otherwise reach the model as the text 'None'.
            raise ToolFailed(f"tool {self.name} returned None; it must return a string")
        if not isinstance(result, str):
            raise ToolFailed(
                f"tool {self.name} returned {type(result).__name__} {result!r:.80};"
                " it must return a string (json.dumps() a structure)"
            )
        return result


def check_unique_names(tools: Sequence[Tool]) -> None:
    """Refuse a tool set in which two tools share a name, naming only the duplicates.

    Raises:
        UsageError: a name is used twice.
    """
    seen: set[str] = set()
    twice: list[str] = []
    for t in tools:
        if t.name in seen and t.name not in twice:
            twice.append(t.name)
        seen.add(t.name)
    if twice:
        names = ", ".join(twice)
        raise UsageError(
            f"two tools are named {names}; give one of them another name "
            "(@tool(name=...))"
        )


def _model_from_signature(
    fn: Callable[..., Any], name: str
) -> type[pydantic.BaseModel]:
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:
        raise UsageError(
            f"tool {name}: a type hint cannot be resolved ({exc}); import the names "
            "its hints use at module level"
        ) from None
    params = list(inspect.signature(fn).parameters.values())
    _check_context_first(params, hints, name)
    fields: dict[str, Any] = {}
    for param in params[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"tool {name}: *args and **kwargs are not supported")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    config = pydantic.ConfigDict(extra="forbid")
    return pydantic.create_model(f"{name}Input", __config__=config, **fields)


def _check_context_first(
    params: list[inspect.Parameter], hints: Mapping[str, Any], name: str
) -> None:
    """Refuse a function whose first parameter is not the context.

    Without this the first input field would silently take the context's place and every
    call would fail on its input.
    """
    fix = f"write `async def {name}(ctx: ToolContext, ...)`"
    if not params:
        raise UsageError(f"tool {name} takes no parameters; {fix}")
    first = params[0]
    if first.kind not in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
        raise UsageError(f"tool {name}: the first parameter must be the context; {fix}")
    hint = hints.get(first.name)
    if hint is None:
        if first.name in ("ctx", "context"):
            return
        shown = first.name
    elif isinstance(hint, type) and issubclass(hint, ToolContext):
        return
    else:
        shown = f"{first.name}: {getattr(hint, '__name__', hint)}"
    raise UsageError(
        f"tool {name}: the first parameter must be the context, not `{shown}`; {fix}"
    )


_Fn = Callable[..., Awaitable[str]]


@overload
def tool(fn: _Fn, /) -> FunctionTool: ...
@overload
def tool(
    *,
    stop_class: StopClass = ...,
    name: str | None = ...,
    description: str | None = ...,
    subject_field: str | None = ...,
) -> Callable[[_Fn], FunctionTool]: ...
def tool(
    fn: _Fn | None = None,
    /,
    *,
    stop_class: StopClass = StopClass.MUTATING,
    name: str | None = None,
    description: str | None = None,
    subject_field: str | None = None,
) -> FunctionTool | Callable[[_Fn], FunctionTool]:
    """Make a tool of an async function `(ctx: ToolContext, ...) -> str`.

    The name defaults to the function's name and the input schema comes from the
    parameters after `ctx`. Without a `stop_class` a tool is `MUTATING`: a stop never
    abandons it, which is the safe choice when nothing says otherwise.
    """

    def make(f: _Fn) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            stop_class=stop_class,
            description=description,
            subject_field=subject_field,
        )

    return make(fn) if fn is not None else make
