"""tether as an Agent Client Protocol agent, so editors that speak ACP can drive it.

`serve_stdio(model=...)` serves ACP (JSON-RPC 2.0, one object per line) on the process's
standard input and output; `AcpServer.serve(receive, send, model=...)` serves it on any
byte stream pair.
"""

from __future__ import annotations

from ._server import AcpServer as AcpServer
from ._server import AcpStatistics as AcpStatistics
from ._stdio import serve_stdio as serve_stdio

__all__ = ("AcpServer", "AcpStatistics", "serve_stdio")
