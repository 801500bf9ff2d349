"""The host's table of active calls and its early-arrival tombstones (S7).

Every call is registered here, under its full key (session, call id, tool), before the
host evaluates permission, so a stop can always find it. An abort for a call the host has
not seen yet is kept as a typed tombstone for a short time; only a later call with the
very same key is blocked by it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import attrs
from anyio import TaskHandle

from .._bounded_output import BoundedOutput
from ._protocol import CallKey, HostPhase
from ._tool import Tool, ToolContext

__all__ = ("PARTIAL_LIMIT", "CallTable", "HostCall")

PARTIAL_LIMIT = 64 * 1024
"""Bytes of a call's progress kept (head and tail) for its partial output."""


@attrs.define(eq=False)
class HostCall:
    """One call at the host, from registration to its result."""

    key: CallKey
    tool: Tool
    args: dict[str, Any]
    ctx: ToolContext
    phase: HostPhase = "registered"
    task: TaskHandle[None] | None = None
    """The call's own task: its waits (permission, admission) and the tool's run."""
    cancelled: bool = False
    """Whether a stop cancelled the call's task (not the host closing)."""
    placed: bool = False
    """Whether it holds a place in the admission limit (given back once)."""
    stop_requested: bool = False
    registered_at: float = attrs.field(factory=time.time)
    """Wall-clock time the host registered the call."""
    _output: BoundedOutput | None = None
    """Progress reported so far, head and tail only: a killed process's partial output
    (made at the first progress)."""

    def keep_progress(self, text: str) -> None:
        """Keep a progress text (bounded from the first byte)."""
        if self._output is None:
            self._output = BoundedOutput(PARTIAL_LIMIT)
        self._output.add(text.encode("utf-8", "surrogatepass"))

    def progress_text(self) -> str:
        """The progress kept so far: what a stopped call printed."""
        return "" if self._output is None else self._output.text()

    def cancel(self) -> None:
        """End the call's task: a wait before the operation, or the tool's own run."""
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()


@attrs.define(eq=False)
class CallTable:
    """Active calls by key, ids seen per session, and tombstones with a time to live."""

    tombstone_ttl: float = 60.0
    clock: Callable[[], float] = anyio.current_time
    _active: dict[tuple[str, str, str], HostCall] = attrs.field(factory=dict)
    """By the key's fields: a tuple hashes in C, the key's own hash is Python's."""
    _seen: dict[str, dict[str, str]] = attrs.field(factory=dict)
    """Call ids used, per session, with the tool each was for."""
    _tombstones: dict[CallKey, float] = attrs.field(factory=dict)

    def get(self, key: CallKey) -> HostCall | None:
        """Return the active call with this full key, if any."""
        return self._active.get((key.session_id, key.call_id, key.tool))

    def __iter__(self) -> Iterator[HostCall]:
        return iter(list(self._active.values()))

    def __len__(self) -> int:
        return len(self._active)

    def claim_id(self, key: CallKey) -> bool:
        """Record the call id as used in its session; False if it was used before (S8)."""
        seen = self._seen.get(key.session_id)
        if seen is None:
            seen = self._seen[key.session_id] = {}
        elif key.call_id in seen:
            return False
        seen[key.call_id] = key.tool
        return True

    def was_claimed(self, key: CallKey) -> bool:
        """Whether exactly this call (session, id, tool) was executed (ended or not)."""
        return self._seen.get(key.session_id, {}).get(key.call_id) == key.tool

    def register(self, call: HostCall) -> None:
        """Add a call; from now on a stop finds it."""
        key = call.key
        self._active[key.session_id, key.call_id, key.tool] = call

    def remove(self, key: CallKey) -> None:
        """Drop a finished call."""
        self._active.pop((key.session_id, key.call_id, key.tool), None)

    def bury(self, key: CallKey) -> None:
        """Keep an early abort as a tombstone under its full key (S7)."""
        self._expire()
        self._tombstones[key] = self.clock() + self.tombstone_ttl

    def take_tombstone(self, key: CallKey) -> bool:
        """Consume a live tombstone for exactly this key; True if there was one."""
        if not self._tombstones:
            return False
        self._expire()
        return self._tombstones.pop(key, None) is not None

    def tombstones(self) -> int:
        """Number of live tombstones."""
        self._expire()
        return len(self._tombstones)

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, until in self._tombstones.items() if until <= now]:
            del self._tombstones[key]
