"""Public access to the built-in tools: `from tether.tools import default_tools`."""

from __future__ import annotations

from .host.tools import default_tools as default_tools

__all__ = ("default_tools",)
