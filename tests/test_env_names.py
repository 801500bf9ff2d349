"""`tether._env`: every `TETHER_*` name is spelled there once and named from there elsewhere."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tether._env import PREFIX, SET_FOR_CHILDREN, TetherEnv, names

SRC = Path(__file__).parent.parent / "src" / "tether"
ENV = SRC / "_env.py"
_NAME = re.compile(r"TETHER_[A-Z0-9_]*")
_QUOTED = re.compile(r"[\"']TETHER_")


def _spelled_outside_env() -> list[str]:
    found: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        # A literal that is a name opens with its quote right before `TETHER_`.
        if path == ENV or not _QUOTED.search(text):
            continue
        found.extend(
            f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _NAME.fullmatch(node.value)
        )
    return found


def test_no_module_but_env_spells_a_tether_variable_name() -> None:
    """A tether choice (style point 8): a string that is a `TETHER_*` name, or the
    prefix itself, appears only in `tether/_env.py`; every other module names
    `TetherEnv.<NAME>`, so a name is renamed or listed in one place."""
    assert _spelled_outside_env() == []


def test_every_name_is_listed_once_and_starts_with_the_prefix() -> None:
    """`names()` lists each variable once, every one `TETHER_`-prefixed, and the
    names tether sets for what it starts are among them."""
    listed = names()
    assert len(set(listed)) == len(listed)
    assert all(name.startswith(PREFIX) for name in listed)
    assert TetherEnv.STORE in listed
    assert set(listed) >= SET_FOR_CHILDREN
