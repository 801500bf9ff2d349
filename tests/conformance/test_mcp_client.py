"""The official MCP conformance suite, client mode, against tether's MCP client.

`@modelcontextprotocol/conformance` (pinned with the Node.js it needs in this folder's
package.json; `npm ci --prefix tests/conformance` installs both, as `.ci/run` does) runs
every client scenario a revision of MCP requires, 2025-11-25 and 2026-07-28, each against
`client.py`: a `Runtime` configured with the scenario's server as a streamable-HTTP
`mcpServers` entry. A scenario passes when its checks hold a success and no failure or
warning (the suite's own rule). `baseline.toml` names the scenarios tether's client is
known to fail, with the reason; this test fails when any other scenario fails, and when
one of them passes (the baseline only shrinks).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
from tests.machine import NODE_INSTALL, missing, node

if TYPE_CHECKING:
    from collections.abc import Iterator

HERE = Path(__file__).parent
SUITE = HERE / "node_modules" / "@modelcontextprotocol" / "conformance"
BASELINE = HERE / "baseline.toml"
REVISIONS = ("2025-11-25", "2026-07-28")
WORKERS = 2
"""Scenario clients run at once (the suite starts a revision's all together)."""
CLIENT_TIMEOUT_MS = 120_000
"""How long the suite waits for one scenario's client, queued behind others included."""

_RESULT_DIR = re.compile(r"^(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def _missing(why: str) -> NoReturn:
    """Skip with the reason; CI must run the suite, so there it fails."""
    missing("the MCP conformance suite", why)


def _baseline() -> dict[str, dict[str, str]]:
    with BASELINE.open("rb") as file:
        baseline: dict[str, dict[str, str]] = tomllib.load(file)
    return baseline


def verdicts(results: Path) -> dict[str, list[str]]:
    """Each scenario the suite ran: the checks it failed (none: it passed).

    A scenario with no successful check failed too (its client never got far enough to
    be judged; the suite's summary counts that as a pass).
    """
    found: dict[str, list[str]] = {}
    for checks_file in results.rglob("checks.json"):
        folder = checks_file.parent.relative_to(results).as_posix()
        match = _RESULT_DIR.match(folder)
        assert match is not None, folder
        checks: list[dict[str, Any]] = json.loads(checks_file.read_text())
        failed = [
            f"{c['id']}: {c['status']} {c.get('errorMessage') or c.get('description')}"
            for c in checks
            if c["status"] in ("FAILURE", "WARNING")
        ]
        if not failed and not any(c["status"] == "SUCCESS" for c in checks):
            stderr = (checks_file.parent / "stderr.txt").read_text()[-400:]
            failed = [f"no check succeeded; the client said: {stderr.strip()}"]
        found[match["scenario"]] = failed
    return found


@pytest.fixture(scope="module")
def warm_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`client.py --serve`, and the environment that sends the suite's clients to it."""
    node_path = node("the MCP conformance suite")
    if not (SUITE / "dist" / "index.js").exists():
        _missing(f"the MCP conformance suite is not installed ({NODE_INSTALL})")
    home = tmp_path_factory.mktemp("home")
    socket_path = tmp_path_factory.mktemp("sock") / "client.sock"
    env = {
        **os.environ,
        "TETHER_HOME": str(home),
        "TETHER_CONFORMANCE_SOCKET": str(socket_path),
        "TETHER_CONFORMANCE_NODE": node_path,
    }
    argv = [sys.executable, str(HERE / "client.py"), "--serve", str(socket_path)]
    serving = subprocess.Popen(
        [*argv, str(WORKERS)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert serving.stdout is not None
        assert serving.stdout.readline() == "ready\n"
        yield env
    finally:
        serving.kill()
        serving.wait()
        if serving.stdout is not None:
            serving.stdout.close()


def test_baseline_says_why() -> None:
    """Every baselined scenario names a revision the suite runs and gives its reason."""
    baseline = _baseline()
    assert set(baseline) <= set(REVISIONS), baseline.keys()
    for revision, scenarios in baseline.items():
        for scenario, reason in scenarios.items():
            assert isinstance(reason, str), (revision, scenario)
            assert reason.strip(), (revision, scenario)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("revision", REVISIONS)
def test_required_scenarios(
    revision: str, warm_client: dict[str, str], tmp_path: Path
) -> None:
    """Every client scenario the revision requires passes, but for the baseline's."""
    command = f"{sys.executable} -I -S {HERE / 'forked.py'}"
    assert " " not in sys.executable + str(HERE), (
        "the suite splits its command at spaces"
    )
    suite = [warm_client["TETHER_CONFORMANCE_NODE"], str(SUITE / "dist" / "index.js")]
    options = ["--requirements", revision, "--timeout", str(CLIENT_TIMEOUT_MS)]
    subprocess.run(
        [
            *suite,
            "client",
            "--command",
            command,
            *options,
            "--output-dir",
            str(tmp_path),
        ],
        env=warm_client,
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    results = verdicts(tmp_path)
    assert "tools_call" in results, sorted(results)
    expected = _baseline().get(revision, {})
    unexpected = {s: f for s, f in results.items() if f and s not in expected}
    passing = sorted(s for s in expected if results.get(s) == [])
    gone = sorted(set(expected) - set(results))
    problems = []
    if unexpected:
        problems.append(f"failing, and not in {BASELINE.name}: {unexpected}")
    if passing:
        problems.append(f"passing now: delete them from {BASELINE.name}: {passing}")
    if gone:
        problems.append(f"not run by the suite: delete from {BASELINE.name}: {gone}")
    assert not problems, "\n".join(problems)
