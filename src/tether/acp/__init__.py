"""tether as an Agent Client Protocol agent, so editors that speak ACP can drive it.

`serve_stdio(model=...)` serves ACP (JSON-RPC 2.0, one object per line) on the process's
standard input and output; `AcpServer.serve(receive, send, model=...)` serves it on any
byte stream pair.

The names are imported on first use: `tether acp` answers the editor's `initialize`
before the SDK is loaded (`_early.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ._server import AcpServer as AcpServer
    from ._server import AcpStatistics as AcpStatistics
    from ._stdio import serve_stdio as serve_stdio

__all__, __getattr__, __dir__ = _lazy_exports(
    __name__,
    {"._server": ("AcpServer", "AcpStatistics"), "._stdio": ("serve_stdio",)},
)
