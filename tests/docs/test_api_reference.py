"""docs/api.md documents every public name, module by module (a tether choice: nothing a
user needs lives only in a private module)."""

from __future__ import annotations

import importlib
import pkgutil
import re

from tests.docs._blocks import ROOT
from tests.test_exports import PUBLIC

import tether

_SECTION = re.compile(r"^## `(tether[\w.]*)`\s*$", re.MULTILINE)


def _sections() -> dict[str, str]:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    found = list(_SECTION.finditer(text))
    return {
        m.group(1): text[m.end() : found[i + 1].start() if i + 1 < len(found) else None]
        for i, m in enumerate(found)
    }


def test_every_public_name_is_in_the_api_reference() -> None:
    """Each name in a public module's `__all__` appears, in backticks, in that module's
    section of docs/api.md."""
    sections = _sections()
    missing = []
    for module_name in PUBLIC:
        if module_name not in sections:
            missing.append(f"section ## `{module_name}`")
            continue
        module = importlib.import_module(module_name)
        missing += [
            f"{module_name}.{name}"
            for name in module.__all__
            if f"`{name}`" not in sections[module_name]
        ]
    assert not missing, f"docs/api.md does not document: {', '.join(missing)}"


def test_the_api_reference_documents_only_public_modules() -> None:
    """Every section of docs/api.md is a public module, so no private name is taught."""
    assert set(_sections()) <= set(PUBLIC)


def test_every_public_package_is_pinned() -> None:
    """A new public module of `tether` joins the export test and the API reference."""
    public = {
        f"tether.{info.name}"
        for info in pkgutil.iter_modules(tether.__path__)
        if not info.name.startswith("_") and info.name != "cli"
    }
    assert public <= set(PUBLIC), (
        f"add to tests/test_exports.py: {public - set(PUBLIC)}"
    )


def test_runtime_problems_is_documented() -> None:
    """`runtime.problems` (skipped plugins and MCP servers) is part of the reference."""
    assert "`runtime.problems`" in _sections()["tether"]
