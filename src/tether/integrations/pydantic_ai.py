"""tether's honest stop in pydantic-ai: `TetherToolset`, a toolset of tether calls.

Needs the `pydantic-ai` extra: `pip install 'tether[pydantic-ai]'`.
"""

from __future__ import annotations

from ._pydantic_ai import TetherToolset as TetherToolset

__all__ = ("TetherToolset",)
