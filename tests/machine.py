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
import re
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

HIDE = "TETHER_TEST_HIDE"

NODE_PACKAGES = Path(__file__).parent / "conformance"
"""The folder whose package.json pins Node.js 22 and the Node packages the tests run
(the MCP conformance suite, the ACP TypeScript SDK); `NODE_INSTALL` installs them, as
`.ci/run` does."""
NODE_INSTALL = "npm ci --prefix tests/conformance"


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


def node(what: str) -> str:
    """The Node.js 22 (or later) that runs `what`: the one `NODE_PACKAGES` pins, else one
    on PATH; missing (see `missing`) when there is none."""
    local = NODE_PACKAGES / "node_modules" / ".bin" / "node"
    if local.exists() and not hidden("node"):
        return str(local)
    found = which("node")
    if found is None:
        missing(what, f"node is not installed ({NODE_INSTALL})")
    version = subprocess.run(
        [found, "--version"], capture_output=True, text=True, check=False
    ).stdout
    if not re.match(r"v(2[2-9]|[3-9]\d)\.", version):
        missing(
            what,
            f"{what} needs Node.js 22 or later, not {version.strip()} "
            f"({NODE_INSTALL} installs it)",
        )
    return found
