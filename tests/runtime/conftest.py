"""Fixtures for runtime tests: every test here runs against both hosts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import Runtime


@pytest.fixture(params=["inprocess", "stdio"])
def host_kind(request: pytest.FixtureRequest) -> str:
    """Every test using this runs against the in-process host and `tether host --stdio`."""
    return str(request.param)


@pytest.fixture
def make_runtime(host_kind: str, workspace: Path) -> Callable[..., Runtime]:
    def make(**kw: Any) -> Runtime:
        options: dict[str, Any] = {
            "workspace": workspace,
            "tools": TEST_TOOLS,
            "permissions": ALLOW_ALL,
            "grace": 0.3,
            "abort_bound": 0.5,
            "host": host_kind,
            "guard": False,
        }
        options.update(kw)
        return Runtime(**options)

    return make
