"""ACP on the process's own standard input and output."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .._jsonrpc import FdReceiveStream, FdSendStream
from ._server import AcpServer

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from .._config import Config
    from ..host import Tool

__all__ = ("serve_stdio",)


async def serve_stdio(
    *,
    model: str | None,
    config: Config | None = None,
    ledger: Path | None = None,
    tools: Sequence[Tool] | None = None,
    received: bytes = b"",
    client_capabilities: Mapping[str, Any] | None = None,
) -> None:
    """Serve ACP on stdin/stdout until the editor closes stdin.

    `received` is what was read from stdin before (`answer_initialize` leaves what it
    did not answer): the server reads it first. `client_capabilities` are those of an
    `initialize` answered before (wire names).

    Sessions and their transcripts are kept in the SQLite file `ledger` (None: in
    memory, and `session/load` finds nothing); `tools` as for `AcpServer.serve()`.

    The protocol keeps private copies of descriptors 0 and 1; descriptor 0 becomes
    `/dev/null` and descriptor 1 a copy of stderr, so nothing else in the process (a
    stray print, a child that inherits them) can read a frame or write into one.
    """
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
    finally:
        os.close(devnull)
    try:
        stream: anyio.abc.ByteReceiveStream = FdReceiveStream(proto_in)
        if received:
            stream = _Received(received, stream)
        await AcpServer.serve(
            stream,
            FdSendStream(proto_out),
            model=model,
            config=config,
            ledger=ledger,
            tools=tools,
            client_capabilities=client_capabilities,
        )
    finally:
        os.close(proto_in)
        os.close(proto_out)


class _Received(anyio.abc.ByteReceiveStream):
    """Bytes already read, then the stream they were read from."""

    def __init__(self, first: bytes, then: anyio.abc.ByteReceiveStream) -> None:
        self.first = first
        self.then = then

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.first:
            data, self.first = self.first[:max_bytes], self.first[max_bytes:]
            return data
        return await self.then.receive(max_bytes)

    async def aclose(self) -> None:
        await self.then.aclose()
