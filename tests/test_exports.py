"""The public surface: every public name of a public module is in its `__all__`, every
`__all__` name exists, and no `_private` name is re-exported (a tether choice)."""

from __future__ import annotations

import collections.abc
import enum
import importlib
import inspect
import typing

import pytest

PUBLIC = [
    "tether",
    "tether.acp",
    "tether.config",
    "tether.errors",
    "tether.guard",
    "tether.host",
    "tether.integrations",
    "tether.integrations.openai_agents",
    "tether.integrations.pydantic_ai",
    "tether.models",
    "tether.runtime",
    "tether.runs",
    "tether.stop",
    "tether.testing",
    "tether.tools",
]


@pytest.mark.parametrize("module_name", PUBLIC)
def test_all_lists_exactly_the_public_names(module_name: str) -> None:
    """`__all__` holds every public class and function defined or re-exported, and only those."""
    module = importlib.import_module(module_name)
    declared = set(module.__all__)
    for name in declared:
        assert hasattr(module, name), f"{module_name}.__all__ names missing {name}"
        assert not name.startswith("_"), f"{module_name} exports private {name}"
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", "").startswith("tether")
    }
    assert public <= declared, (
        f"{module_name}: public but not in __all__: {public - declared}"
    )


def test_spec_public_api_names() -> None:
    """The names spec 01 fixes are importable from where the spec says."""
    import tether
    from tether import ErrorCode, Runtime, StopClass, ToolAborted, ToolContext, tool
    from tether.tools import default_tools

    for name in (
        "ErrorCode",
        "Runtime",
        "StopClass",
        "ToolAborted",
        "ToolContext",
        "tool",
    ):
        assert name in tether.__all__, f"tether.__all__ lacks {name}"
    assert issubclass(ErrorCode, enum.Enum)
    assert issubclass(StopClass, enum.Enum)
    assert issubclass(ToolAborted, BaseException)
    assert inspect.isclass(Runtime)
    assert inspect.isclass(ToolContext)
    assert callable(tool)
    assert callable(default_tools)


def test_what_a_newcomer_needs_has_a_public_name() -> None:
    """Loading the config, MCP and plugin tools, permission rules and the approver's
    types are public (no `_module` import needed)."""
    from tether import Approver, PermissionRequest
    from tether.config import Config, load_config, paths
    from tether.host import PermissionRules
    from tether.tools import McpTools, load_plugins

    assert load_config().source is None
    assert isinstance(load_config(), Config)
    assert paths().config_file.name == "config.toml"
    assert PermissionRules.from_lists(allow=["Read"]).allow[0].text == "Read"
    assert PermissionRequest.__module__.startswith("tether.")
    assert typing.get_origin(Approver) is collections.abc.Callable
    assert callable(McpTools.open)
    assert load_plugins().problems == ()


def test_the_stop_still_gives_the_guard_it_gave() -> None:
    """`tether.stop` re-exports the guard's names from `tether.guard`, the same objects."""
    import tether.guard
    import tether.stop

    for name in ("GuardVerdict", "guard_tool_call"):
        assert name in tether.stop.__all__
        assert getattr(tether.stop, name) is getattr(tether.guard, name)


def test_what_other_floors_share_of_the_host_is_public() -> None:
    """The runs, the ACP server, the runtime and the CLI reach the host's shared names
    through `tether.host`: processes (`run_command`), who aborts (`AbortSource`), the
    rules, the containment."""
    import tether.host
    from tether.runtime import AbortReport

    for name in ("AbortSource", "run_command", "PermissionRules", "containment"):
        assert name in tether.host.__all__, name
    assert typing.get_args(tether.host.AbortSource) == (
        "user",
        "turn",
        "deadline",
        "shutdown",
        "halt",
    )
    assert typing.get_type_hints(AbortReport)["source"] == tether.host.AbortSource


def test_every_tether_error_is_drawn_in_the_error_tree() -> None:
    """`tether.errors`' docstring draws the whole tree: every subclass of `TetherError`
    defined anywhere in the package is named in it."""
    import importlib
    import pkgutil

    import tether
    from tether import errors

    for found in pkgutil.walk_packages(tether.__path__, "tether."):
        if found.name.endswith(("__main__", "._supervisor_start")):
            continue
        importlib.import_module(found.name)

    def subclasses(cls: type) -> set[type]:
        direct: set[type] = set(cls.__subclasses__())
        return direct.union(*(subclasses(c) for c in direct))

    ours = {
        c for c in subclasses(errors.TetherError) if c.__module__.startswith("tether")
    }
    drawing = errors.__doc__ or ""
    missing = sorted(c.__name__ for c in ours if f"── {c.__name__} " not in drawing)
    assert missing == []


# `tether.testing` imports the runtime where it is used: the stdio host imports it.
@pytest.mark.parametrize("module_name", [m for m in PUBLIC if m != "tether.testing"])
def test_the_public_value_classes_fields_resolve_at_run_time(module_name: str) -> None:
    """A user's `typing.get_type_hints` (cattrs and the like) resolves every field of a
    public attrs class: the names its annotations use are imported at run time."""
    import attrs

    module = importlib.import_module(module_name)
    for name in module.__all__:
        value = getattr(module, name)
        if isinstance(value, type) and attrs.has(value):
            typing.get_type_hints(value)
