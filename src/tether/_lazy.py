"""Names a package re-exports, imported on first use.

The `tether guard --claude-hook` command runs before every agent tool call, so packages
on its import path load their re-exports only when a name is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

TYPE_CHECKING = False  # `typing` is not imported at run time (the per-call hook)
if TYPE_CHECKING:
    from typing import Any

__all__ = ("lazy_exports",)


def lazy_exports(
    package: str, where: Mapping[str, str], names: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return a module's `__getattr__` and `__dir__` for re-exports imported on use.

    `where` maps each exported name to the submodule (relative to `package`) that
    defines it.
    """
    import sys

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib  # on the first name asked for: the hook asks for none

        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return getattr_, dir_
