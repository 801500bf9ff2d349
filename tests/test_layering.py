"""Tether's one-way layering, enforced: a module imports only from floors at or below its own.

The floors, lowest first: base (errors, config, _fs, _config, _env, _ids, _jsonrpc, _lazy,
_slotted, ...) -> guard -> stop -> host -> models -> runtime -> runs, acp, _mcpserve, integrations -> testing,
tools, _board -> cli -> the `tether` package itself. A tether choice (style point 4), checked by
parsing imports; no module imports itself through others either, at import time (type-only
imports included) nor when it runs (lazy imports included).

`python tests/test_layering.py` prints the package graph: the floors in order, the
arrows between packages with how many module imports each stands for, the count of
arrows up, and any import circle between modules (`--modules`: each module's imports).
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "tether"
RANK = {
    "base": 0,
    "guard": 1,
    "stop": 2,
    "host": 3,
    "models": 4,
    "runtime": 5,
    "runs": 6,
    "acp": 6,
    "_mcpserve": 6,
    "integrations": 6,
    "testing": 7,
    "tools": 7,
    "_board": 7,
    "cli": 8,
    "__init__": 9,
    "__main__": 9,
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


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _imports_in(name: str, path: Path, tree: ast.AST) -> list[str]:
    package = _package(name, path)
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
    """A module's tether imports all come from its own layer or a lower one (`from ..
    import _extras` imports the module `tether._extras`, not the package)."""
    mine = RANK[_layer(name)]
    upward = sorted(t for t in _full_graph()[name] if RANK[_layer(t)] > mine)
    assert not upward, f"{name} (layer {_layer(name)}) imports upward: {upward}"


def _is_type_checking(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )


def _statements(tree: ast.Module, *, typed: bool, lazy: bool) -> ast.Module:
    """`tree` with the imports left out that do not count: those under `if
    TYPE_CHECKING:` unless `typed`, those inside functions unless `lazy`."""
    for node in ast.walk(tree):
        if not typed and _is_type_checking(node):
            assert isinstance(node, ast.If)
            node.body = [ast.Pass()]
        if not lazy and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.body = [ast.Pass()]
    return tree


def _targets(name: str, path: Path, *, typed: bool, lazy: bool) -> list[str]:
    """The tether imports a module makes, counted as `typed` and `lazy` say."""
    tree = _statements(
        ast.parse(path.read_text(encoding="utf-8")), typed=typed, lazy=lazy
    )
    # `from package import name` imports the module `package.name` when there is one.
    found = _imports_in(name, path, tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is None:
            base = _package(name, path).split(".")
            base = base[: len(base) - (node.level - 1)]
            found.remove(".".join(base))
            found += [".".join([*base, alias.name]) for alias in node.names]
    return found


def _graph(*, typed: bool, lazy: bool) -> dict[str, set[str]]:
    modules = dict(_modules())
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for target in _targets(name, path, typed=typed, lazy=lazy):
            # `from module import name` names something in the module.
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def import_graph() -> dict[str, set[str]]:
    """Every tether module and the tether modules it imports when it runs (lazy imports
    inside functions included, type-only ones not)."""
    return _graph(typed=False, lazy=True)


def module_level_graph() -> dict[str, set[str]]:
    """Every tether module and the tether modules its module-level statements import,
    type-only ones (`if TYPE_CHECKING:`) included: what a reader or a type checker
    follows from the top of the file."""
    return _graph(typed=True, lazy=False)


def full_graph() -> dict[str, set[str]]:
    """Every tether module and every tether module it imports anywhere (type-only and
    lazy imports included): the floors' arrows."""
    return dict(_full_graph())


@functools.cache
def _full_graph() -> dict[str, set[str]]:
    return _graph(typed=True, lazy=True)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected parts of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_arrows(graph: dict[str, set[str]]) -> Counter[tuple[str, str]]:
    """Arrows between floors: (from, to) and how many module imports each stands for."""
    return Counter(
        (_layer(name), _layer(target))
        for name, targets in graph.items()
        for target in targets
        if _layer(name) != _layer(target)
    )


def arrows_up(arrows: Counter[tuple[str, str]]) -> int:
    """How many module imports go from a floor to a higher one."""
    return sum(n for (a, b), n in arrows.items() if RANK[b] > RANK[a])


def test_the_import_graph_has_no_circle() -> None:
    """No module imports itself through others, not even lazily inside a function: a
    circle hides an order of initialisation that one edit can break."""
    graph = import_graph()
    assert len(graph) > 50
    assert circles(graph) == []


def test_no_circle_among_module_level_imports_type_only_ones_included() -> None:
    """Nor at the top of the files, counting `if TYPE_CHECKING:` imports: a type-only
    circle says two modules know each other's insides, and it turns into an import
    circle the day one of those imports is needed at run time."""
    graph = module_level_graph()
    assert len(graph) > 50
    assert circles(graph) == []


def test_the_package_graph_has_no_arrow_up() -> None:
    """The package graph that `python tests/test_layering.py` prints: arrows between
    floors exist (the count is real) and none points up."""
    arrows = package_arrows(full_graph())
    assert arrows[("stop", "guard")] > 0
    assert arrows[("host", "guard")] > 0
    assert arrows_up(arrows) == 0


def test_circles_and_arrows_up_are_found() -> None:
    """The checks above can fail: a circle of three, and an arrow from base to cli."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]
    ]
    assert circles({"a": {"b"}, "b": set()}) == []
    graph = {"tether.errors": {"tether.cli.main"}, "tether.cli.main": set()}
    assert arrows_up(package_arrows(graph)) == 1


def _report() -> None:
    """The package graph, the floors in order, arrows up and any circle."""
    graph = module_level_graph()
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules()}
    members: dict[str, list[str]] = {}
    for name in graph:
        members.setdefault(_layer(name), []).append(name)
    print("floors, lowest first (modules, lines):")
    for floor in sorted(RANK, key=lambda f: (RANK[f], f)):
        names = members.get(floor, [])
        if names:
            lines = sum(sizes[n] for n in names)
            print(
                f"  {RANK[floor]}  {floor:<9} {len(names):3d} modules {lines:6d} lines"
            )
    arrows = package_arrows(full_graph())
    print("arrows between packages (module imports, type-only and lazy included):")
    for (a, b), n in sorted(arrows.items(), key=lambda i: (RANK[i[0][0]], i[0])):
        print(f"  {a:<9} -> {b:<9} {n:3d}")
    print(f"{arrows_up(arrows)} arrows up")
    print(
        "circles at module level (type-only imports included):",
        circles(graph) or "none",
    )
    print(
        "circles when running (lazy imports included):",
        circles(import_graph()) or "none",
    )


if __name__ == "__main__":
    import sys

    _report()
    if "--modules" in sys.argv:  # each module, its size and what it imports
        sizes = {name: len(path.read_text().splitlines()) for name, path in _modules()}
        for name, targets in sorted(module_level_graph().items()):
            print(f"{sizes[name]:6d}  {name} -> {', '.join(sorted(targets)) or '-'}")
