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
    return _imports_in(name, path, ast.parse(path.read_text(encoding="utf-8")))


def _imports_in(name: str, path: Path, tree: ast.Module) -> list[str]:
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


def _runtime_imports(name: str, path: Path) -> list[str]:
    """The tether imports a module makes when it runs (lazy ones too), not the ones
    made for type checking only (`if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            node.body = [ast.Pass()]
    # `from package import name` imports the module `package.name` when there is one.
    found = _imports_in(name, path, tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is None:
            package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            found.remove(".".join(base))
            found += [".".join([*base, alias.name]) for alias in node.names]
    return found


def import_graph() -> dict[str, set[str]]:
    """Every tether module and the tether modules it imports (lazy imports included)."""
    modules = dict(_modules())
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for target in _runtime_imports(name, path):
            # `from module import name` names something in the module.
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


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


def test_the_import_graph_has_no_circle() -> None:
    """No module imports itself through others, not even lazily inside a function: a
    circle hides an order of initialisation that one edit can break."""
    graph = import_graph()
    assert len(graph) > 50
    assert circles(graph) == []


def test_circles_are_found() -> None:
    """The check above can fail: a circle of three, and one through a lazy import."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]
    ]
    assert circles({"a": {"b"}, "b": set()}) == []


if __name__ == "__main__":
    # `python tests/test_layering.py`: the import graph, module sizes and any circle.
    graph = import_graph()
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules()}
    edges = sum(len(t) for t in graph.values())
    print(f"{len(graph)} modules, {edges} imports between them")
    for name in sorted(graph):
        print(f"{sizes[name]:6d}  {name} -> {', '.join(sorted(graph[name])) or '-'}")
    print("circles:", circles(graph) or "none")
