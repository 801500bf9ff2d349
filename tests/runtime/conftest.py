"""Fixtures for runtime tests: every test here runs against both hosts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.runtime.support import TEST_TOOLS

from tether.testing import runtime_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from tether import Runtime


@pytest.fixture(params=["inprocess", "stdio"])
def host_kind(request: pytest.FixtureRequest) -> str:
    """Every test using this runs against the in-process host and `tether host --stdio`."""
    return str(request.param)


@pytest.fixture
def make_runtime(host_kind: str, workspace: Path) -> Callable[..., Runtime]:
    def make(**kw: Any) -> Runtime:
        tools = kw.pop("tools", TEST_TOOLS)
        kw.setdefault("host", host_kind)
        kw.setdefault("guard", False)
        return runtime_for(workspace, tools, **kw)

    return make


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The runtime tests run on both of anyio's backends (trio keeps no task order)."""
    return str(request.param)


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Trio runs with the in-process host only: over stdio the tools run in the host
    process on its own loop, so trio would repeat only the parent's side, at the cost
    of a second run of the slowest tests."""
    here = Path(__file__).parent
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        if (
            params.get("anyio_backend") == "trio"
            and params.get("host_kind") == "stdio"
            and item.path.is_relative_to(here)
        ):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
