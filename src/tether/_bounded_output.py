"""Bounded output: the first and last bytes of a stream, whatever its length.

Kept from the first byte: memory never holds more than the limit, however much a
command prints (`yes` included). Used wherever a tool's output is collected.
"""

from __future__ import annotations

from typing import final

__all__ = ("BoundedOutput",)


@final
class BoundedOutput:
    """Keep the first and last bytes of an output and count what fell between them."""

    def __init__(self, limit: int) -> None:
        """Keep at most `limit` bytes: half from the start, half from the end."""
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0
        """Bytes seen in all."""

    def add(self, chunk: bytes) -> None:
        """Take the next chunk of output."""
        self.total += len(chunk)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if len(chunk) >= self._tail_limit:
            # Never hold more than the limit, even for one huge chunk.
            self._tail[:] = chunk[len(chunk) - self._tail_limit :]
            return
        self._tail += chunk
        if len(self._tail) > self._tail_limit:
            del self._tail[: len(self._tail) - self._tail_limit]

    @property
    def kept(self) -> int:
        """Bytes held now (never more than the limit)."""
        return len(self._head) + len(self._tail)

    @property
    def dropped(self) -> int:
        """Bytes seen but not kept."""
        return self.total - self.kept

    def text(self) -> str:
        """Return what was kept, with a marker where bytes were dropped."""
        head = self._head.decode("utf-8", "replace")
        tail = self._tail.decode("utf-8", "replace")
        if self.dropped == 0:
            return head + tail
        return f"{head}\n[... {self.dropped} bytes of output dropped ...]\n{tail}"
