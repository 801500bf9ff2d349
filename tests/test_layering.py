"""Tether's one-way layering, enforced: a module imports only from layers at or below its own.

base (errors, _fs, _config, _env, _ids, _jsonrpc) -> stop -> host -> models -> runtime ->
runs, acp -> testing -> cli. A tether choice (style point 4), checked by parsing imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "tether"
RANK = {
    "base": 0,
    "stop": 1,
    "host": 2,
    "models": 3,
    "runtime": 4,
    "runs": 5,
    "acp": 5,
    "testing": 6,
    "tools": 6,
    "cli": 7,
    "__init__": 8,
    "__main__": 8,
}


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2:
        return "__init__"
    head = parts[1]
    if head in RANK:
        return head
    return "base"


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        out.append((name, path))
    return out


def _imports(name: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append(target)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [t for t in found if t == "tether" or t.startswith("tether.")]


@pytest.mark.parametrize(
    ("name", "path"), _modules(), ids=lambda v: str(v) if isinstance(v, str) else ""
)
def test_no_module_imports_from_a_higher_layer(name: str, path: Path) -> None:
    """A module's tether imports all come from its own layer or a lower one."""
    mine = RANK[_layer(name)]
    upward = [t for t in _imports(name, path) if RANK[_layer(t)] > mine]
    assert not upward, f"{name} (layer {_layer(name)}) imports upward: {upward}"
