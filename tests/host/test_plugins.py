"""Plugin tools from the `tether.tools` entry-point group of a real (temp) distribution."""

from __future__ import annotations

import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from tether.host import StopClass, ToolContext
from tether.host._plugins import GROUP, PluginTool, load_plugins

if TYPE_CHECKING:
    from pathlib import Path

MODULE = '''
from __future__ import annotations

from tether.host import StopClass, ToolContext, tool


@tool
async def shout(ctx: ToolContext, text: str) -> str:
    """Say it louder."""
    return text.upper()


@tool(stop_class=StopClass.READ_ONLY)
async def peek(ctx: ToolContext, key: str) -> str:
    """Look something up."""
    return f"value of {key}"


@tool(stop_class=StopClass.PROCESS, name="runner")
async def run_it(ctx: ToolContext, command: str) -> str:
    return command


@tool(stop_class=StopClass.EXTENSION)
async def remote(ctx: ToolContext) -> str:
    return "remote"


def make_tools():
    return [peek, run_it]


def explode():
    raise RuntimeError("no API key configured")


def wrong_kind():
    return 42


NOT_A_TOOL = "hello"
MIXED = [remote, "oops"]
'''

ENTRY_POINTS = """
[tether.tools]
shout = tether_test_plugin:shout
factory = tether_test_plugin:make_tools
remote = tether_test_plugin:remote
missing = tether_test_plugin_gone:thing
noattr = tether_test_plugin:nothing_here
wrongtype = tether_test_plugin:NOT_A_TOOL
raises = tether_test_plugin:explode
wrongreturn = tether_test_plugin:wrong_kind
mixed = tether_test_plugin:MIXED
again = tether_test_plugin:shout

[other.group]
ignored = tether_test_plugin:shout
"""


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a distribution with a module and its entry points on sys.path."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "tether_test_plugin.py").write_text(MODULE, encoding="utf-8")
    info = root / "tether_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tether-test-plugin\nVersion: 0.1\n",
        encoding="utf-8",
    )
    (info / "entry_points.txt").write_text(
        textwrap.dedent(ENTRY_POINTS), encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "tether_test_plugin", raising=False)
    return root


def _mine(tools: tuple[PluginTool, ...]) -> dict[str, PluginTool]:
    return {t.name: t for t in tools if t.distribution == "tether-test-plugin"}


def test_good_plugins_load(plugin_dir: Path) -> None:
    """Tools named by entry points load, in order, with the plugin's schema."""
    loaded = load_plugins()
    tools = _mine(loaded.tools)
    assert list(tools) == ["shout", "peek", "runner", "remote"]
    shout = tools["shout"]
    assert shout.entry_point == "shout"
    assert shout.description == "Say it louder."
    assert shout.input_schema()["required"] == ["text"]
    assert shout.validate({"text": "hi"}) == {"text": "hi"}
    assert shout.inner.name == "shout"


def test_stop_class_rules(plugin_dir: Path) -> None:
    """Every plugin tool is EXTENSION, whatever class it declares (spec 01 table)."""
    tools = _mine(load_plugins().tools)
    assert tools["shout"].inner.stop_class is StopClass.MUTATING
    assert tools["peek"].inner.stop_class is StopClass.READ_ONLY
    for name in ("shout", "peek", "runner", "remote"):
        assert tools[name].stop_class is StopClass.EXTENSION


@pytest.mark.anyio
async def test_plugin_tool_runs(plugin_dir: Path, workspace: Path) -> None:
    """A loaded plugin tool runs with the context and its validated input."""
    shout = _mine(load_plugins().tools)["shout"]
    ctx = ToolContext(call_id="c1", session_id="s1", workspace=workspace)
    assert await shout.run(ctx, shout.validate({"text": "quiet"})) == "QUIET"
    runner = _mine(load_plugins().tools)["runner"]
    assert runner.subject({"command": "ls"}) is None  # no subject field declared


def test_broken_plugins_reported_and_skipped(plugin_dir: Path) -> None:
    """Each broken entry point is reported with its name and reason; none crashes."""
    loaded = load_plugins()
    reasons = {
        p.entry_point: p.reason
        for p in loaded.problems
        if p.value.startswith("tether_test_plugin")
    }
    assert set(reasons) == {
        "missing",
        "noattr",
        "wrongtype",
        "raises",
        "wrongreturn",
        "mixed",
        "again",
    }
    assert "ModuleNotFoundError" in reasons["missing"]
    assert "nothing_here" in reasons["noattr"]
    assert "str" in reasons["wrongtype"]
    assert "no API key configured" in reasons["raises"]
    assert "int" in reasons["wrongreturn"]
    assert "str" in reasons["mixed"]
    assert "already taken" in reasons["again"]
    problem = next(p for p in loaded.problems if p.entry_point == "raises")
    assert str(problem).startswith("plugin 'raises' (tether_test_plugin:explode): ")
    assert "ignored" not in {t.entry_point for t in loaded.tools}


def test_group_name() -> None:
    """Plugins are read from the `tether.tools` group."""
    assert GROUP == "tether.tools"
