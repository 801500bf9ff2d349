"""The optional parts (extras): a setting that needs one not installed is refused with the
line that says how to install it, and nothing outside its own modules needs it.

An extra is "not installed" here the way Python sees a missing package: its top-level
module is hidden (`sys.modules[name] = None`, which `find_spec` and `import` both honour),
in this process or in a child that runs the real command.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tether import Runtime, _extras
from tether.config import load_config
from tether.errors import UsageError
from tether.host.tools import default_tools, standard_tools
from tether.runs import open_store

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tether"

# Each extra's distributions and the top-level modules they install.
DISTRIBUTIONS = {
    "psycopg": "psycopg",
    "Pillow": "PIL",
    "mcp": "mcp",
    "agent-client-protocol": "acp",
    "starlette": "starlette",
    "uvicorn": "uvicorn",
    "sse-starlette": "sse_starlette",
    "openai-agents": "agents",
    "pydantic-ai-slim": "pydantic_ai",
}
# The only modules that may import an extra's module at import time.
IMPORTERS = {
    "psycopg": {"tether/runs/_postgres.py"},
    "PIL": {"tether/host/tools/_render_png.py"},
    "mcp": {
        "tether/host/_mcp.py",
        "tether/host/_mcpauth.py",
        "tether/host/_mcplogin.py",
        "tether/host/_mcptask.py",
    },
    "acp": {
        "tether/acp/_elicit.py",
        "tether/acp/_mcp_servers.py",
        "tether/acp/_permissions.py",
        "tether/acp/_server.py",
        "tether/acp/_session.py",
        "tether/acp/_updates.py",
    },
    "starlette": {"tether/_board/_app.py"},
    "sse_starlette": {"tether/_board/_app.py"},
    "uvicorn": set(),
    "agents": {"tether/integrations/openai_agents/_adapter.py"},
    "pydantic_ai": {"tether/integrations/_pydantic_ai.py"},
}


def _distribution(requirement: str) -> str:
    name = requirement
    for stop in "[<>=!~ ;":
        name = name.split(stop, 1)[0]
    return name


def _hidden(*modules: str) -> str:
    return "".join(f"import sys; sys.modules[{m!r}] = None; " for m in modules)


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )


def test_pyproject_extras_match_the_modules_they_install() -> None:
    """Each extra of pyproject.toml installs what `EXTRAS` says; none is a core need."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    assert set(optional) == {*_extras.EXTRAS, "all"}
    for extra, modules in _extras.EXTRAS.items():
        installed = {DISTRIBUTIONS[_distribution(r)] for r in optional[extra]}
        assert installed == set(modules), extra
    core = {_distribution(r) for r in project["dependencies"]}
    assert not core & set(DISTRIBUTIONS), "an extra's distribution is a core need"
    assert optional["all"] == [f"tether[{','.join(_extras.EXTRAS)}]"]


def test_only_their_own_modules_import_the_extras() -> None:
    """A library user without an extra imports the rest of tether unharmed."""
    found: dict[str, set[str]] = {module: set() for module in IMPORTERS}
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body + [
            n for t in tree.body if isinstance(t, ast.Try) for n in t.body
        ]:
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                top = name.split(".", 1)[0]
                if top in found:
                    found[top].add(str(path.relative_to(SRC.parent)))
    assert found == IMPORTERS


def test_a_postgres_store_without_the_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(UsageError, match=r"pip install 'tether\[postgres\]'"):
        open_store("postgresql://tether@127.0.0.1:1/tether")


def test_generate_images_without_a_renderer_is_left_out_and_said(
    monkeypatch: pytest.MonkeyPatch, tether_home: Path
) -> None:
    config = load_config()
    assert "GenerateImages" in {t.name for t in default_tools(config)}
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert "GenerateImages" not in {t.name for t in default_tools(config)}
    problems: list[str] = []
    standard_tools(config, problems)
    assert any("pip install 'tether[images]'" in p for p in problems), problems


@pytest.mark.anyio
async def test_mcp_servers_without_the_sdk_are_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, tether_home: Path, workspace: Path
) -> None:
    config_file = tether_home / "config.toml"
    config_file.write_text(f'[mcpServers.fx]\ncommand = "{sys.executable}"\n')
    config = load_config(config_file)
    monkeypatch.setitem(sys.modules, "mcp", None)
    async with Runtime(workspace=workspace, guard=False, config=config) as rt:
        assert any("pip install 'tether[mcp]'" in p for p in rt.problems), rt.problems
        assert not any(t.name.startswith("mcp__") for t in rt.tools)


@pytest.mark.parametrize(
    ("hidden", "module", "extra"),
    [
        ("mcp", "tether.tools", "mcp"),
        ("acp", "tether.acp", "acp"),
        ("agents", "tether.integrations.openai_agents", "openai-agents"),
        ("pydantic_ai", "tether.integrations.pydantic_ai", "pydantic-ai"),
    ],
)
def test_importing_a_part_without_its_extra_names_the_extra(
    hidden: str, module: str, extra: str
) -> None:
    name = {
        "mcp": "McpTools",
        "acp": "AcpServer",
        "pydantic-ai": "TetherToolset",
    }.get(extra, "TetherTools")
    done = _run(f"{_hidden(hidden)}import {module} as m; m.{name}")
    assert done.returncode == 1
    assert "ImportError: tether's" in done.stderr
    assert f"pip install 'tether[{extra}]'" in done.stderr


def test_tether_acp_without_the_extra_exits_2_before_answering() -> None:
    done = _run(
        f"{_hidden('acp')}from tether.cli import main; sys.argv = ['tether', 'acp']; "
        "main()"
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # no `initialize` answer: the editor shows the failure
    assert "tether acp needs tether's 'acp' extra" in done.stderr
    assert "pip install 'tether[acp]'" in done.stderr
