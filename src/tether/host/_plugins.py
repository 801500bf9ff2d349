"""Plugin tools: Python entry points in the group `tether.tools`.

A distribution offers tools by naming, in its entry points, a `Tool` instance, a list of
them, or a callable taking no arguments that returns either:

```toml
# the plugin's pyproject.toml
[project.entry-points."tether.tools"]
shout = "my_plugin:shout"            # a Tool (for instance made with @tool)
more = "my_plugin:make_tools"        # a callable returning a list of Tool
```

A plugin that fails to import, names something that is not a tool, or raises while
building its tools is reported in `problems` (entry point and reason) and skipped; it
never stops the host or the other plugins.

Stop class. Plugin tools are `EXTENSION`, whatever class the plugin declares: once
started, a stop waits for their real result, and by default they need permission. A
plugin's own claim to be read-only would otherwise let it run unasked and be abandoned
mid-work; an allow rule (`allow = ["peek"]`) is how a person lets one run unasked.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

import attrs

from ._tool import StopClass, Tool, ToolContext

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

__all__ = ("GROUP", "PluginProblem", "PluginTool", "PluginTools", "load_plugins")

GROUP = "tether.tools"
"""The entry-point group plugin tools are found in."""


@attrs.frozen
class PluginProblem:
    """A plugin entry point that was skipped, and why."""

    entry_point: str
    """The entry point's name."""
    value: str
    """What it points at (`module:attribute`)."""
    reason: str

    def __str__(self) -> str:
        return f"plugin {self.entry_point!r} ({self.value}): {self.reason}"


class PluginTool(Tool):
    """A plugin's tool, with the stop class tether gives it (see the module notes)."""

    def __init__(
        self, inner: Tool, *, entry_point: str, distribution: str | None
    ) -> None:
        self.inner = inner
        self.entry_point = entry_point
        self.distribution = distribution
        self.name = inner.name
        self.description = inner.description
        self.subject_field = inner.subject_field
        self.stop_class = StopClass.EXTENSION

    def input_schema(self) -> dict[str, Any]:
        """Return the plugin tool's input schema."""
        return self.inner.input_schema()

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validate the input with the plugin tool's own rules."""
        return self.inner.validate(raw)

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Run the plugin tool."""
        return await self.inner.run(ctx, args)

    def subject(self, args: Mapping[str, Any]) -> str | None:
        """Return the plugin tool's permission subject."""
        return self.inner.subject(args)


@attrs.frozen
class PluginTools:
    """What loading the plugins gave: tools and problems, in entry-point order."""

    tools: tuple[PluginTool, ...] = ()
    problems: tuple[PluginProblem, ...] = ()


def _tools_of(obj: object) -> list[Tool]:
    """Return the tools an entry point's object stands for.

    Raises:
        TypeError: the object is neither a tool, a list of tools, nor a callable
            returning one of those.
    """
    if isinstance(obj, Tool):
        return [obj]
    if isinstance(obj, list | tuple):
        bad = [item for item in obj if not isinstance(item, Tool)]
        if bad:
            raise TypeError(f"the list holds {type(bad[0]).__name__}, not a Tool")
        return list(obj)
    if callable(obj):
        made = _call(obj)
        if isinstance(made, Tool):
            return [made]
        if isinstance(made, list | tuple) and all(isinstance(i, Tool) for i in made):
            return list(made)
        raise TypeError(f"calling it gave {type(made).__name__}, not a Tool or a list")
    raise TypeError(f"it is {type(obj).__name__}, not a Tool, a list, or a callable")


def _call(fn: Callable[[], object]) -> object:
    return fn()


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_plugins(points: Iterable[EntryPoint] | None = None) -> PluginTools:
    """Load every plugin tool of the `tether.tools` entry-point group.

    Args:
        points: the entry points to load; None reads the installed distributions.
    """
    found = entry_points(group=GROUP) if points is None else points
    tools: list[PluginTool] = []
    problems: list[PluginProblem] = []
    names: set[str] = set()
    for point in found:
        dist = point.dist.name if point.dist is not None else None
        try:
            made = _tools_of(point.load())
        except (Exception, SystemExit) as exc:  # a plugin never stops the host
            problems.append(PluginProblem(point.name, point.value, _describe(exc)))
            continue
        for inner in made:
            name = getattr(inner, "name", None)
            if not isinstance(name, str) or not name:
                reason = f"a tool of type {type(inner).__name__} has no name"
                problems.append(PluginProblem(point.name, point.value, reason))
                continue
            if not isinstance(getattr(inner, "stop_class", None), StopClass):
                reason = f"tool {name!r} has no StopClass"
                problems.append(PluginProblem(point.name, point.value, reason))
                continue
            if name in names:
                reason = f"tool name {name!r} is already taken; skipped"
                problems.append(PluginProblem(point.name, point.value, reason))
                continue
            names.add(name)
            tools.append(PluginTool(inner, entry_point=point.name, distribution=dist))
    return PluginTools(tuple(tools), tuple(problems))
