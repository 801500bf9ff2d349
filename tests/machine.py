"""What the machine offers the tests: the optional tools, and the rule for their absence.

A test that needs a tool the machine may lack (an agent CLI, Node.js, FUSE, ACL tools,
Chromium, PostgreSQL) finds it with `which` and, when it is missing, calls `missing`:
the test skips with what to install, except in CI (`CI=true`), which installs
everything (`.ci/run`) and so fails instead.

`TETHER_TEST_HIDE` (names separated by commas) makes `which` report those tools
missing, to check on a well-stocked machine what a fresh one does, for tools found
outside PATH too (Debian's PostgreSQL programs): with PATH narrowed to hide the rest,
`CI= TETHER_TEST_HIDE=initdb ./scripts/test tests/runs/test_postgres.py` skips.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

HIDE = "TETHER_TEST_HIDE"


def hidden(name: str) -> bool:
    """Whether `TETHER_TEST_HIDE` names the tool `name`."""
    return name in {n.strip() for n in os.environ.get(HIDE, "").split(",")}


def which(name: str) -> str | None:
    """The tool's path on PATH, or None when it is missing or hidden."""
    return None if hidden(name) else shutil.which(name)


def missing(what: str, why: str) -> NoReturn:
    """Skip the test, saying `why` (what to install); in CI, where `what` must run, fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run {what}: {why}")
    pytest.skip(why)
