"""Names a package re-exports, imported on first use, from one grouping.

The `tether guard --claude-hook` command runs before every agent tool call, so packages
on its import path load their re-exports only when a name is asked for.

A lazy face writes its names once, as a grouping `{".module": ("Name", ...)}` whose
keys are spelled as the face's own `from .module import` would spell them; `__all__`
and the name-to-module map are derived from it here. Type checkers cannot see through
a module `__getattr__`, so the face also keeps its `if TYPE_CHECKING:` imports (one per
name); `tests/test_lazy_faces.py` holds them and the grouping to the same names.
Nothing here imports `typing` or `importlib` at run time (the hook's budget).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence

TYPE_CHECKING = False  # `typing` is not imported at run time (the per-call hook)
if TYPE_CHECKING:
    from typing import Any

__all__ = ("absolute", "lazy_exports")


def absolute(anchor: str, relative: str) -> str:
    """The module `from <relative> import ...` names when written in package `anchor`."""
    rest = relative.lstrip(".")
    up = len(relative) - len(rest) - 1
    base = anchor.rsplit(".", up)[0] if up > 0 else anchor
    return f"{base}.{rest}" if rest else base


def lazy_exports(
    module: str, groups: Mapping[str, Sequence[str]]
) -> tuple[tuple[str, ...], Callable[[str], Any], Callable[[], list[str]]]:
    """Return a module's `__all__`, `__getattr__` and `__dir__` for lazy re-exports.

    Each re-exported name is imported on first use.

    `module` is the face's `__name__`; `groups` maps each module the names come from,
    relative to the face's package as in a `from` statement, to the names it gives.
    """
    face = sys.modules[module]
    anchor = face.__package__ or module
    where: dict[str, str] = {}
    for source, names in groups.items():
        where.update(dict.fromkeys(names, absolute(anchor, source)))
    names = tuple(sorted(where))

    def getattr_(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        # The builtin, not `importlib.import_module`: `importlib` (and `warnings`
        # with it) is not loaded on the hook's path, which asks for `tether.guard.Judge`.
        __import__(source)
        value = getattr(sys.modules[source], name)
        setattr(face, name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(face), *names})

    return names, getattr_, dir_
