"""The lazy public faces (`tether._lazy`): each name is written once in a grouping, and
the `if TYPE_CHECKING:` imports that type checkers read name the same things.

A face's `__all__` and its name-to-module map are derived from its grouping at run time;
the type-only imports cannot be (a type checker does not run code, and the per-call hook
may import neither `typing` nor `ast`), so this test holds the two to each other.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tether._lazy import absolute

SRC = Path(__file__).parent.parent / "src" / "tether"


def _faces() -> list[Path]:
    return sorted(
        path
        for path in SRC.rglob("*.py")
        if path.name != "_lazy.py" and "lazy_exports(" in path.read_text()
    )


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _grouping(tree: ast.AST) -> dict[str, tuple[str, ...]]:
    """The grouping a face hands `lazy_exports` (a literal, as the faces write it)."""
    call = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id.endswith("lazy_exports")
    )
    groups: dict[str, tuple[str, ...]] = ast.literal_eval(call.args[1])
    return groups


def disagreements(source: str) -> list[str]:
    """Where a face's type-only imports and its grouping differ, in words; [] when
    they name the same (module, name) pairs and each import re-exports its name as is."""
    tree = ast.parse(source)
    typed: set[tuple[str, str]] = set()
    grouped: set[tuple[str, str]] = set()
    problems: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.level:
                    module = "." * stmt.level + (stmt.module or "")
                    for alias in stmt.names:
                        if alias.asname != alias.name:
                            problems.append(f"{alias.name} is not `as {alias.name}`")
                        typed.add((module, alias.name))
    for module, names in _grouping(tree).items():
        grouped.update((module, name) for name in names)
    problems += [
        f"type-only import of {m}.{n} is not grouped" for m, n in typed - grouped
    ]
    problems += [f"grouped {m}.{n} has no type-only import" for m, n in grouped - typed]
    return sorted(problems)


@pytest.mark.parametrize("path", _faces(), ids=lambda p: _module_name(p))
def test_a_face_types_exactly_the_names_it_groups(path: Path) -> None:
    """Every grouped name has its type-only import from the same module, and back."""
    assert disagreements(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", _faces(), ids=lambda p: _module_name(p))
def test_a_face_gives_what_its_grouping_says(path: Path) -> None:
    """`__all__` is the grouping's names, and each is the object of its source module."""
    name = _module_name(path)
    face = importlib.import_module(name)
    groups = _grouping(ast.parse(path.read_text(encoding="utf-8")))
    assert sorted(face.__all__) == sorted(n for names in groups.values() for n in names)
    assert set(face.__all__) <= set(dir(face))
    anchor = face.__package__ or name
    for source, names in groups.items():
        module = importlib.import_module(absolute(anchor, source))
        for export in names:
            assert getattr(face, export) is getattr(module, export), (name, export)


def test_the_check_finds_what_disagrees() -> None:
    """A name grouped but not typed, one typed but not grouped, and one renamed."""
    face = """
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._a import A as A
    from ._b import B as Bee
    from ._c import C as C
__all__, __getattr__, __dir__ = lazy_exports(__name__, {"._a": ("A", "Z"), "._b": ("B",)})
"""
    assert disagreements(face) == [
        "B is not `as B`",
        "grouped ._a.Z has no type-only import",
        "type-only import of ._c.C is not grouped",
    ]


def test_relative_names_resolve_as_a_from_statement_reads_them() -> None:
    """`.x` in the package itself, `..x` in its parent, `.` the package."""
    assert absolute("tether.stop", "._board") == "tether.stop._board"
    assert absolute("tether.stop", "..guard") == "tether.guard"
    assert absolute("tether", ".host._mcp") == "tether.host._mcp"
    assert absolute("tether.stop", ".") == "tether.stop"
