"""`@tool` as a newcomer meets it: wrong shapes are refused when decorated, duplicate
names are named, and a tool that returns nothing is an error (tether choices)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from tests.host.support import make_ctx

from tether import Runtime, StopClass, ToolContext, tool
from tether.errors import InvalidInput, ToolFailed, UsageError
from tether.host import FunctionTool
from tether.host._tool import call_title

if TYPE_CHECKING:
    from pathlib import Path


def test_a_tool_without_stop_class_is_mutating() -> None:
    """The default stop class is MUTATING: a stop waits for the real result."""

    @tool
    async def Touch(ctx: ToolContext, path: str) -> str:
        return path

    assert Touch.stop_class is StopClass.MUTATING


def test_first_parameter_that_is_not_the_context_is_refused_at_decoration() -> None:
    """`async def Lookup(key: str)` is refused at once, naming the parameter and the fix,
    instead of every call failing later on its input."""
    with pytest.raises(UsageError, match=r"Lookup.*not `key: str`.*ctx: ToolContext"):

        @tool
        async def Lookup(key: str) -> str:
            return key


def test_a_tool_without_parameters_is_refused_at_decoration() -> None:
    """A function that takes nothing cannot be handed its context."""
    with pytest.raises(UsageError, match=r"Ping takes no parameters"):

        @tool
        async def Ping() -> str:
            return "pong"


def test_an_unannotated_ctx_first_parameter_is_accepted() -> None:
    """`async def f(ctx, key: str)` is the context by its name."""

    @tool
    async def Lookup(ctx, key: str) -> str:
        return key

    assert isinstance(Lookup, FunctionTool)
    assert list(Lookup.input_schema()["properties"]) == ["key"]


async def test_a_tool_that_returns_none_fails_instead_of_printing_none(
    tmp_path: Path,
) -> None:
    """A forgotten `return` ends the call with an error, never the output 'None'."""

    @tool
    async def Forgetful(ctx: ToolContext) -> str:
        return None  # type: ignore[return-value]

    with pytest.raises(ToolFailed, match="Forgetful returned None"):
        await Forgetful.run(make_ctx(tmp_path), {})


async def test_a_tool_that_returns_a_non_string_fails_clearly(tmp_path: Path) -> None:
    """A tool must return a string: returning 3 ends the call with an error naming
    the type, never the output '3' the docs say cannot happen."""

    @tool
    async def Count(ctx: ToolContext) -> str:
        return 3  # type: ignore[return-value]

    with pytest.raises(ToolFailed, match=r"Count returned int 3; it must return a str"):
        await Count.run(make_ctx(tmp_path), {})


def test_a_stop_class_given_as_its_word_is_refused_at_decoration() -> None:
    """`@tool(stop_class="read_only")` is refused at once with the names to use,
    instead of an AttributeError deep in the runtime later."""
    with pytest.raises(UsageError, match=r"Look: stop_class must be a StopClass \("):
        # The word instead of a StopClass is the wrong type the refusal is for.
        @tool(stop_class="read_only")  # type: ignore[call-overload]
        async def Look(ctx: ToolContext) -> str:
            return ""


def test_duplicate_tool_names_name_only_the_duplicate(tmp_path: Path) -> None:
    """Two tools named Lookup among the built-ins: the error names Lookup, not every tool."""
    from tether.tools import default_tools

    @tool(name="Read")
    async def MyRead(ctx: ToolContext) -> str:
        return ""

    with pytest.raises(UsageError) as caught:
        Runtime(workspace=tmp_path, tools=[*default_tools(), MyRead])
    message = str(caught.value)
    assert "named Read;" in message
    assert "Bash" not in message


pytestmark = pytest.mark.anyio


def test_a_calls_title_is_its_tools_subject_then_a_common_field_then_json() -> None:
    """One title wherever a call is shown: the subject field first, cut to 80."""

    @tool(stop_class=StopClass.READ_ONLY, subject_field="query")
    async def Find(ctx: ToolContext, query: str, path: str = ".") -> str:
        return ""

    assert Find.title({"path": "src", "query": "needle\nsecond line"}) == (
        "Find: needle"
    )
    assert Find.title({"path": "src"}) == "Find: src"
    assert call_title("Mcp", {"n": 1}) == 'Mcp: {"n": 1}'
    assert call_title("Mcp", {}) == "Mcp"
    long = call_title("Bash", {"command": "x" * 200})
    assert long == "Bash: " + "x" * 79 + "…"


def test_a_tool_without_input_takes_an_empty_object_and_nothing_else() -> None:
    """What its model says, with or without the model built for `{}`."""

    @tool(stop_class=StopClass.READ_ONLY)
    async def Ping(ctx: ToolContext) -> str:
        return "pong"

    model = Ping.input_model
    first, second = Ping.validate({}), Ping.validate({})
    assert first == second == model.model_validate({}).model_dump() == {}
    assert first is not second  # each call gets its own
    with pytest.raises(InvalidInput) as refused:
        Ping.validate({"extra": 1})
    assert refused.value.path == "extra"
    with pytest.raises(InvalidInput):
        Ping.validate([])  # type: ignore[arg-type]
