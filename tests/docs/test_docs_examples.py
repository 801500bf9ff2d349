"""Every example in README.md and docs/*.md runs as printed (a tether choice: docs are code).

Python blocks run as scripts in a fresh folder with a fresh tether home; blocks that name a
file (`# lookup.py`) are written there first; blocks with top-level `await` run in an event
loop. Shell and console blocks run their `tether` commands, which must at least exist with
the options shown. TOML blocks parse, and those of the account's config load as config.
See `tests/docs/_blocks.py` for the marks that skip a block or run it on both hosts.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tests.cli._run import tether
from tests.docs._blocks import Block, all_blocks, blocks, documents

pytestmark = pytest.mark.slow


_RUN_TOP_LEVEL_AWAIT = """\
import ast, inspect, sys, anyio
path = sys.argv[1]
code = compile(open(path).read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
scope = {"__name__": "__main__"}
async def main():
    await eval(code, scope)
anyio.run(main)
"""
_SHELL = {"sh", "shell", "bash", "console"}
_CLICK_USAGE = (
    "No such command",
    "No such option",
    "Missing argument",
    "Got unexpected extra argument",
    "Invalid value",
)


def _cases() -> list[object]:
    cases: list[object] = []
    for block in all_blocks():
        if block.mark == "skip" or block.lang not in {
            "python",
            "toml",
            "json",
            *_SHELL,
        }:
            continue
        if block.mark == "both-hosts":
            cases.extend(
                pytest.param(block, host, id=f"{block.where}-{host}")
                for host in ("inprocess", "stdio")
            )
        else:
            cases.append(pytest.param(block, None, id=block.where))
    return cases


def _files_before(block: Block, folder: Path) -> None:
    """Write the file blocks of the same document that come before `block`."""
    for earlier in blocks(block.doc):
        if earlier.line >= block.line:
            break
        name = earlier.file_name
        if earlier.lang == "python" and name is not None:
            (folder / name).write_text(earlier.text, encoding="utf-8")


def _run_python(block: Block, host: str | None, folder: Path) -> None:
    text = block.text
    if host is not None:
        assert 'host="inprocess"' in text, f"{block.where}: both-hosts needs host=..."
        text = text.replace('host="inprocess"', f'host="{host}"')
    name = block.file_name or f"example_{block.line}.py"
    script = folder / name
    script.write_text(text, encoding="utf-8")
    try:
        compile(text, name, "exec")
        argv = [sys.executable, name]
    except SyntaxError:
        argv = [sys.executable, "-c", _RUN_TOP_LEVEL_AWAIT, name]
    if block.file_name is not None:
        argv = [sys.executable, "-c", f"import {Path(name).stem}"]
    proc = subprocess.run(
        argv, cwd=folder, capture_output=True, text=True, timeout=90, check=False
    )
    assert proc.returncode == 0, (
        f"{block.where} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    )


def _commands(block: Block) -> list[list[str]]:
    """The command lines of a shell or console block, as argument lists."""
    out = []
    for line in block.text.splitlines():
        if block.lang == "console":
            if not line.startswith("$ "):
                continue  # output shown after a command
            line = line[2:]
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def _run_shell(block: Block, folder: Path) -> None:
    for words in _commands(block):
        assert words[0] == "tether", (
            f"{block.where}: `{shlex.join(words)}` cannot run offline in a test; "
            "mark the block <!-- docs-test: skip (why) -->"
        )
        proc = tether(*words[1:], cwd=folder)
        usage = [u for u in _CLICK_USAGE if u in proc.stderr]
        assert not (proc.returncode == 2 and usage), (
            f"{block.where}: `{shlex.join(words)}` is not a valid command: {proc.stderr}"
        )


def _check_toml(block: Block, folder: Path) -> None:
    data = tomllib.loads(block.text)
    if block.file_name is not None:
        return  # another program's file (a plugin's pyproject.toml)
    from tether.config import load_config

    config_file = folder / "config.toml"
    config_file.write_text(block.text, encoding="utf-8")
    load_config(config_file)
    assert isinstance(data, dict)


@pytest.mark.parametrize(("block", "host"), _cases())
def test_documented_example_runs_as_printed(
    block: Block, host: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each example of the README and docs runs as printed (python on both hosts where
    marked; shell commands exist with their options; config examples load)."""
    folder = tmp_path / "example"
    folder.mkdir()
    monkeypatch.chdir(folder)
    _files_before(block, folder)
    if block.lang == "python":
        _run_python(block, host, folder)
    elif block.lang == "toml":
        _check_toml(block, folder)
    elif block.lang == "json":
        json.loads(block.text)
    else:
        _run_shell(block, folder)


def test_every_skipped_example_says_why() -> None:
    """A block marked not runnable carries its reason, and marks are known words."""
    for block in all_blocks():
        if block.mark is None:
            continue
        assert block.mark in {"skip", "both-hosts"}, f"{block.where}: {block.mark}?"
        if block.mark == "skip":
            assert (block.why or "").strip(), f"{block.where}: skip needs (why)"


def test_the_readme_api_example_runs_on_both_hosts() -> None:
    """The README's API example is marked to run on the in-process and the stdio host."""
    readme = [b for b in all_blocks() if b.doc.name == "README.md"]
    marked = [b for b in readme if b.mark == "both-hosts"]
    assert marked, "README.md: the API example needs <!-- docs-test: both-hosts -->"
    assert all("Runtime(" in b.text for b in marked)


def test_no_example_imports_a_private_module() -> None:
    """Examples use public names only: no `tether._x` or `tether.y._z` import."""
    for block in all_blocks():
        if block.lang != "python":
            continue
        for line in block.text.splitlines():
            words = line.split()
            if words[:1] in (["from"], ["import"]) and len(words) > 1:
                assert not any(
                    part.startswith("_") for part in words[1].split(".")[1:]
                ), f"{block.where}: private import `{line.strip()}`"


def test_documents_name_no_private_module() -> None:
    """Prose does not send readers to private modules (`tether.host._plugins`)."""
    private = re.compile(r"\btether(?:\.\w+)*\._\w+")
    for doc in documents():
        found = private.findall(doc.read_text(encoding="utf-8"))
        assert not found, f"{doc.name} names private modules: {found}"
