"""The typed base of the built-in tools and the one decision shared by rules and broker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pydantic
import pytest

from tether._config import Config
from tether.errors import GuardRefused, InvalidInput
from tether.host import FunctionTool, StopClass, ToolContext, tool
from tether.host._broker import Broker, stop_guard
from tether.host._rules import PermissionRules
from tether.host._tool import Tool, TypedTool, default_decision
from tether.host.tools import default_tools
from tether.host.tools.glob import compile_glob

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

BUILTINS = default_tools(Config())


@pytest.mark.parametrize("t", BUILTINS, ids=lambda t: t.name)
def test_builtin_schema_is_its_input_model(t: TypedTool) -> None:
    """Each built-in exposes its input model's schema, closed to unknown fields."""
    assert isinstance(t, TypedTool)
    schema = t.input_schema()
    assert schema == t.input_model.model_json_schema(by_alias=True)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("t", BUILTINS, ids=lambda t: t.name)
def test_builtin_refuses_unknown_field(t: TypedTool) -> None:
    """An unknown field is refused by name, for every built-in alike."""
    with pytest.raises(InvalidInput) as caught:
        t.validate({"no_such_field": 1})
    assert caught.value.path in (*t.input_schema().get("required", ()), "no_such_field")
    with pytest.raises(InvalidInput, match="JSON object"):
        t.validate(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_subclass_gets_schema_and_validation_from_its_model() -> None:
    """A new typed tool writes only its model and `run`."""

    class EchoInput(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        text: str = pydantic.Field(min_length=1, description="What to echo.")

    class Echo(TypedTool):
        name = "Echo"
        stop_class = StopClass.READ_ONLY
        input_model: type[pydantic.BaseModel] = EchoInput

        async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
            return str(args["text"])

    echo = Echo()
    assert echo.input_schema()["properties"]["text"]["description"] == "What to echo."
    assert echo.validate({"text": "hi"}) == {"text": "hi"}
    with pytest.raises(InvalidInput) as caught:
        echo.validate({"text": ""})
    assert caught.value.path == "text"


def test_function_tool_is_typed() -> None:
    """`@tool` builds its input model from the signature and shares the same base."""

    @tool(stop_class=StopClass.READ_ONLY)
    async def lookup(ctx: ToolContext, key: str) -> str:
        return key

    assert isinstance(lookup, TypedTool)
    assert lookup.input_schema() == lookup.input_model.model_json_schema()
    with pytest.raises(InvalidInput) as caught:
        lookup.validate({"key": "k", "extra": 1})
    assert caught.value.path == "extra"


@pytest.mark.parametrize("stop_class", list(StopClass))
def test_rules_and_broker_share_the_default(
    stop_class: StopClass, tmp_path: Path
) -> None:
    """No rules at all and rules that match nothing decide as the one default does."""

    @tool(stop_class=stop_class, name="Thing")
    async def thing(ctx: ToolContext, x: int = 0) -> str:
        return ""

    want = default_decision(stop_class)
    assert Broker(tmp_path).decide(thing, {}) == want
    unrelated = PermissionRules.from_lists(allow=["Other"], deny=["Else"])
    assert Broker(tmp_path, rules=unrelated).decide(thing, {}) == want
    assert unrelated.decide(thing, {}, workspace=tmp_path) == want


PATHS = (
    "src/x.ts",
    "src/a/b/c.tsx",
    "src/x.js",
    "lib/x.ts",
    "src/.hidden.ts",
    "src/a/x.tsx.bak",
    "srcx/y.ts",
)


@pytest.mark.parametrize(
    "pattern", ["src/**/*.{ts,tsx}", "src/*.ts", "src/[a-b]/**", "**/x.[!j]s"]
)
def test_rules_match_paths_in_the_glob_dialect(pattern: str, tmp_path: Path) -> None:
    """A path rule matches exactly the relative paths the Glob tool's pattern does."""
    workspace = tmp_path.resolve()
    read = next(t for t in BUILTINS if t.name == "Read")
    rules = PermissionRules.from_lists(deny=[f"Read({pattern})"])
    regex = compile_glob(pattern)
    for rel in PATHS:
        decided = rules.decide(read, {"file_path": rel}, workspace=workspace)
        want = "deny" if regex.match(rel) else default_decision(read.stop_class)
        assert decided == want, rel
    assert any(regex.match(rel) for rel in PATHS)


@pytest.mark.parametrize("pattern", ["[]a]", "[!]a]", "a[]", "[z-a]", "x[[]y", "[a-"])
def test_glob_odd_classes_compile(pattern: str) -> None:
    """A `]` first in a class is a member; a class that cannot be one is literal text."""
    assert compile_glob(pattern).match(pattern) or "]" in pattern
    assert compile_glob("[]a]").match("]")
    assert not compile_glob("[!]a]").match("]")
    assert compile_glob("[z-a]").match("[z-a]")


def test_guard_reads_a_negated_class_as_glob_does(tmp_path: Path) -> None:
    """`[^x]` negates in the guard as in Glob and bash, so it cannot hide a stop folder."""
    stop_dir = tmp_path / "stopdir"
    stop_dir.mkdir()
    check = stop_guard(lambda: [stop_dir])
    bash = next(t for t in BUILTINS if t.name == "Bash")
    for word in ("sto[^x]dir", "sto[!x]dir", "st?pdir", "stopdi[a-z]"):
        reason = check(bash, {"command": f"rm -r {tmp_path}/{word}"}, tmp_path)
        assert reason is not None, word
    assert check(bash, {"command": f"rm -r {tmp_path}/sto[^p]dir"}, tmp_path) is None


def test_the_broker_remembers_a_tool_only_for_inputs_no_rule_could_judge(
    tmp_path: Path,
) -> None:
    """A read-only tool the guard never stops, under rules that name nothing: a call
    without a judged field gets the class default at once, a path still goes to the
    rules (outside the workspace: ask), and a guard that may refuse sees every call."""

    @tool(stop_class=StopClass.READ_ONLY, name="Look")
    async def look(ctx: ToolContext, file_path: str = "") -> str:
        return ""

    broker = Broker(tmp_path, rules=PermissionRules(), guard=stop_guard())
    for _ in range(2):
        assert broker.decide(look, {}) == "allow"
        assert broker.decide(look, {"file_path": "/elsewhere/x"}) == "ask"
        assert broker.decide(look, {"file_path": str(tmp_path / "x")}) == "allow"
    seen: list[Mapping[str, Any]] = []

    def refuses_every_other(
        tool: Tool, args: Mapping[str, Any], workspace: Path
    ) -> str | None:
        seen.append(args)
        return "no" if len(seen) % 2 == 0 else None

    judged = Broker(tmp_path, rules=PermissionRules(), guard=refuses_every_other)
    assert judged.decide(look, {}) == "allow"
    with pytest.raises(GuardRefused):
        judged.decide(look, {})
    assert len(seen) == 2


def test_the_broker_tells_apart_tools_of_one_name_and_takes_unhashable_ones(
    tmp_path: Path,
) -> None:
    """What it found for a tool holds for that very tool: another of the same name gets
    its own class's default, and a tool that cannot be hashed is decided all the same."""

    @tool(stop_class=StopClass.READ_ONLY, name="Same")
    async def reads(ctx: ToolContext) -> str:
        return ""

    @tool(stop_class=StopClass.MUTATING, name="Same")
    async def writes(ctx: ToolContext) -> str:
        return ""

    class Unhashable(FunctionTool):
        def __eq__(self, other: object) -> bool:  # and so no hash of its own
            return other is self

    broker = Broker(tmp_path, rules=PermissionRules(), guard=stop_guard())
    assert broker.decide(reads, {}) == "allow"
    assert broker.decide(writes, {}) == "ask"
    assert broker.decide(reads, {}) == "allow"
    odd = Unhashable(reads.fn, name="Odd", stop_class=StopClass.READ_ONLY)
    assert broker.decide(odd, {}) == "allow"
