"""The answer to the editor's first `initialize`, before the ACP SDK is loaded.

An editor starts `tether acp` and waits for the answer to `initialize` before it shows
the agent as ready (spec 05: at most 0.3 s). Loading the SDK's schema (hundreds of
pydantic models) takes several times that, so `tether acp` reads its first line itself:
a well-formed `initialize` request is answered from here, with exactly what
`AcpServer.initialize` answers (`initialize_result` is the one source of both), and
everything else read is handed to the server unread. Any other first line (malformed,
another method, parameters this module does not check) goes to the server, which answers
it as it answers every line.

Nothing here imports the SDK, pydantic or anyio.
"""

from __future__ import annotations

import json
import os
import select
import sys
from typing import Any, Final

__all__ = (
    "PROTOCOL_VERSION",
    "agent_version",
    "answer_initialize",
    "initialize_result",
)

PROTOCOL_VERSION: Final = 1
"""The ACP protocol version tether speaks (the SDK's `acp.PROTOCOL_VERSION`)."""

_FIRST_LINE_LIMIT: Final = 1 << 20
"""Bytes read for the first line at most; a longer one goes to the server as it is."""

_CHECKED_PARAMS: Final = frozenset(
    {"protocolVersion", "clientCapabilities", "clientInfo", "_meta"}
)


def agent_version() -> str:
    """The installed version of tether, from its `.dist-info` folder's name.

    Found on `sys.path` as `importlib.metadata` finds it (first match), without that
    module's import cost; `importlib.metadata` only if no folder is found.
    """
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("tether-") and name.endswith(".dist-info"):
                return name[len("tether-") : -len(".dist-info")]
    import importlib.metadata

    return importlib.metadata.version("tether")


def initialize_result(protocol_version: int) -> dict[str, Any]:
    """The `initialize` result (wire names): the version agreed on and what tether can do."""
    return {
        "protocolVersion": min(protocol_version, PROTOCOL_VERSION),
        "agentCapabilities": {
            "loadSession": True,
            "sessionCapabilities": {
                "list": {},
                "resume": {},
                "close": {},
                "delete": {},
            },
            "promptCapabilities": {"embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": False},
        },
        "agentInfo": {"name": "tether", "title": "tether", "version": agent_version()},
    }


def _early_answer(line: bytes) -> tuple[bytes, dict[str, Any]] | None:
    """The answer to `line` if it is a well-formed `initialize` request.

    Returned with the client's capabilities the request gave (wire names).
    """
    try:
        frame = json.loads(line)
    except ValueError:
        return None
    if not isinstance(frame, dict) or frame.get("jsonrpc") != "2.0":
        return None
    if frame.get("method") != "initialize" or "id" not in frame:
        return None
    request_id = frame["id"]
    params = frame.get("params")
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        return None
    if not isinstance(params, dict) or not params.keys() <= _CHECKED_PARAMS:
        return None
    version = params.get("protocolVersion")
    if not isinstance(version, int) or isinstance(version, bool):
        return None
    for name in ("clientCapabilities", "clientInfo", "_meta"):
        if not isinstance(params.get(name, {}), (dict, type(None))):
            return None
    answer = {"jsonrpc": "2.0", "id": request_id, "result": initialize_result(version)}
    capabilities = params.get("clientCapabilities") or {}
    return json.dumps(answer, separators=(",", ":")).encode() + b"\n", capabilities


def _read_first_line(fd: int) -> bytes:
    data = b""
    while b"\n" not in data and len(data) < _FIRST_LINE_LIMIT:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            select.select([fd], [], [])
            continue
        if not chunk:
            break
        data += chunk
    return data


def answer_initialize(
    receive_fd: int, send_fd: int
) -> tuple[bytes, dict[str, Any] | None]:
    """Read the first line from `receive_fd`; answer an `initialize` on `send_fd`.

    Return what was read and not answered, for the server, and the client's
    capabilities (wire names) if an `initialize` was answered, else None.
    """
    data = _read_first_line(receive_fd)
    line, newline, rest = data.partition(b"\n")
    early = _early_answer(line) if newline else None
    if early is None:
        return data, None
    answer, capabilities = early
    view = memoryview(answer)
    while view:
        view = view[os.write(send_fd, view) :]
    return rest, capabilities
