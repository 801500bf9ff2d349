"""JSON-RPC frames of the host protocol, and their conversion to domain values.

This is the one boundary where wire shapes (pydantic models) become the domain values
of `_protocol.py` and back; nothing else handles the frames.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

import pydantic

from .._jsonrpc import INVALID_PARAMS, MAX_LINE, RpcError
from ..errors import ErrorCode, InvalidInput
from ._protocol import (
    AbortAck,
    AbortRequest,
    AbortSource,
    CallKey,
    ExecuteRequest,
    HostEvent,
    HostPhase,
    KillRequest,
    OutputEvent,
    PermissionRequest,
    PhaseEvent,
    ResultEvent,
)
from ._tool import StopClass

__all__ = (
    "MAX_INPUT",
    "abort_ack_from_wire",
    "abort_ack_to_wire",
    "abort_from_wire",
    "abort_to_wire",
    "checked_input",
    "encoded_input",
    "event_from_wire",
    "event_to_wire",
    "execute_from_wire",
    "execute_to_wire",
    "permission_from_wire",
    "permission_to_wire",
)


_M = TypeVar("_M", bound=pydantic.BaseModel)

MAX_INPUT = MAX_LINE - 64 * 1024
"""Largest tool input, in bytes of JSON: a frame's limit less room for the call's key."""


def checked_input(raw: object) -> dict[str, Any]:
    """Return `raw` as a tool input both hosts take alike (see `encoded_input()`)."""
    return encoded_input(raw)[0]


class _InputEncoder(threading.local):
    """`json.dumps(value, allow_nan=False, ensure_ascii=False)`, made once per thread.

    `JSONEncoder.encode` builds a C encoder on every call, most of what a small input
    costs; here it is built once (by hand, as the standard library has no public way to
    keep one). Its table of the containers being encoded (what finds a cycle) belongs to
    one thread, and is made afresh after a failed encode, which can leave entries in it.
    """

    def __init__(self) -> None:
        self._fallback = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
        self._reset()

    def _reset(self) -> None:
        encoder = self._fallback
        make = getattr(json.encoder, "c_make_encoder", None)
        self._chunks: Callable[[object, int], list[str]] | None = None
        if make is not None:
            self._chunks = make(
                {},  # the cycle table
                encoder.default,
                json.encoder.encode_basestring,  # ensure_ascii=False
                None,  # no indent
                encoder.key_separator,
                encoder.item_separator,
                False,  # sort_keys
                False,  # skipkeys
                False,  # allow_nan
            )

    def encode(self, value: object) -> str:
        chunks = self._chunks
        if chunks is None:  # pragma: no cover - CPython always has the C encoder
            return self._fallback.encode(value)
        try:
            return "".join(chunks(value, 0))
        except BaseException:
            self._reset()
            raise


_encode = _InputEncoder().encode


def encoded_input(raw: object) -> tuple[dict[str, Any], str]:
    """Return `raw` as a tool input both hosts take alike, with its JSON text.

    Otherwise say why it cannot be one.

    Every input is checked here, for the in-process host too, so the same input gets the
    same answer on both hosts: a JSON object that JSON can carry, within a frame.

    Raises:
        InvalidInput: not an object, not JSON (a set, bytes, NaN), nested too deeply to
            encode, or larger than `MAX_INPUT`.
    """
    if type(raw) is dict and not raw:
        return raw, "{}"  # a tool without input: nothing to encode
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise InvalidInput(
            f"input must be a JSON object, not {type(raw).__name__}", path="<input>"
        )
    try:
        value = raw if type(raw) is dict else dict(raw)
        text = _encode(value)
    except RecursionError:
        raise InvalidInput(
            "input is nested too deeply to send as JSON", path="<input>"
        ) from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"input cannot be sent as JSON: {exc}", path="<input>"
        ) from None
    except Exception as exc:  # a mapping that fails as it is read
        raise InvalidInput(
            f"input cannot be read: {type(exc).__name__}: {exc}", path="<input>"
        ) from None
    size = len(text)
    if not text.isascii():
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidInput(
                f"input holds a lone surrogate ({text[exc.start : exc.end]!r}), which "
                "UTF-8 cannot carry; send whole characters",
                path="<input>",
            ) from None
    if size > MAX_INPUT:
        raise InvalidInput(
            f"input is {size} bytes of JSON; a call takes at most {MAX_INPUT}",
            path="<input>",
        )
    return value, text


class _Key(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    session_id: str
    call_id: str
    tool: str

    def key(self) -> CallKey:
        return CallKey(self.session_id, self.call_id, self.tool)


class _Execute(_Key):
    input: dict[str, Any]


class _Abort(_Key):
    source: AbortSource = "user"
    reason: str | None = None


class _AbortAck(pydantic.BaseModel):
    found: bool
    phase: HostPhase
    processes: int = 0
    asking: str = ""


class _Progress(_Key):
    kind: Literal["phase", "output"]
    phase: HostPhase | None = None
    stop_class: StopClass | None = None
    text: str | None = None
    at: float | None = None


class _Error(pydantic.BaseModel):
    code: ErrorCode
    message: str = ""
    path: str = ""
    end_unknown: bool = False


class _Result(_Key):
    output: str = ""
    error: _Error | None = None


class _Permission(_Key):
    input: dict[str, Any]
    stop_class: StopClass
    reason: str = ""


def _parse(model: type[_M], params: dict[str, Any]) -> _M:
    try:
        return model.model_validate(params)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "params"
        raise RpcError(
            INVALID_PARAMS, f"invalid params at {where}: {first['msg']}"
        ) from None


def _key_dict(key: CallKey) -> dict[str, Any]:
    return {"session_id": key.session_id, "call_id": key.call_id, "tool": key.tool}


def execute_to_wire(request: ExecuteRequest) -> dict[str, Any]:
    """`tools.execute` params."""
    return {**_key_dict(request.key), "input": request.input}


def execute_from_wire(params: dict[str, Any]) -> ExecuteRequest:
    """Parse `tools.execute` params (raises `RpcError` INVALID_PARAMS)."""
    m = _parse(_Execute, params)
    return ExecuteRequest(m.key(), m.input)


def abort_to_wire(request: AbortRequest) -> dict[str, Any]:
    """`tools.abort` params."""
    return {
        **_key_dict(request.key),
        "source": request.source,
        "reason": request.reason,
    }


def abort_from_wire(params: dict[str, Any]) -> AbortRequest:
    """Parse `tools.abort` params."""
    m = _parse(_Abort, params)
    return AbortRequest(m.key(), m.source, m.reason)


def kill_to_wire(request: KillRequest) -> dict[str, Any]:
    """`tools.kill` params."""
    return _key_dict(request.key)


def kill_from_wire(params: dict[str, Any]) -> KillRequest:
    """Parse `tools.kill` params."""
    return KillRequest(_parse(_Key, params).key())


def abort_ack_to_wire(ack: AbortAck) -> dict[str, Any]:
    """The result of `tools.abort`."""
    wire: dict[str, Any] = {
        "found": ack.found,
        "phase": ack.phase,
        "processes": ack.processes,
    }
    if ack.asking:
        wire["asking"] = ack.asking
    return wire


def abort_ack_from_wire(result: Any) -> AbortAck:
    """Parse the result of `tools.abort`."""
    m = _parse(_AbortAck, result if isinstance(result, dict) else {})
    return AbortAck(
        found=m.found, phase=m.phase, processes=m.processes, asking=m.asking
    )


def event_to_wire(event: HostEvent) -> tuple[str, dict[str, Any]]:
    """The method and params of a host event's notification."""
    base = _key_dict(event.key)
    match event:
        case PhaseEvent(phase=phase, stop_class=stop_class):
            return "tools.progress", {
                **base,
                "kind": "phase",
                "phase": phase,
                "stop_class": stop_class,
                # Stamped as the host moves the call: the frame may leave later.
                "at": time.time(),
            }
        case OutputEvent(text=text):
            return "tools.progress", {**base, "kind": "output", "text": text}
        case ResultEvent():
            error: dict[str, Any] | None = None
            if event.code is not None:
                error = {
                    "code": event.code,
                    "message": event.message,
                    "path": event.field_path,
                }
                if event.end_unknown:
                    error["end_unknown"] = True
            return "tools.result", {**base, "output": event.output, "error": error}


def event_from_wire(method: str, params: dict[str, Any]) -> HostEvent:
    """Parse a `tools.progress` or `tools.result` notification."""
    if method == "tools.result":
        r = _parse(_Result, params)
        if r.error is None:
            return ResultEvent(r.key(), r.output)
        return ResultEvent(
            r.key(),
            r.output,
            code=r.error.code,
            message=r.error.message,
            field_path=r.error.path,
            end_unknown=r.error.end_unknown,
        )
    p = _parse(_Progress, params)
    if p.kind == "phase":
        if p.phase is None:
            raise RpcError(INVALID_PARAMS, "a phase progress needs `phase`")
        return PhaseEvent(p.key(), p.phase, p.stop_class, p.at)
    return OutputEvent(p.key(), p.text or "")


def permission_to_wire(request: PermissionRequest) -> dict[str, Any]:
    """`permission.request` params."""
    return {
        "session_id": request.session_id,
        "call_id": request.call_id,
        "tool": request.tool,
        "input": request.input,
        "stop_class": request.stop_class,
        "reason": request.reason,
    }


def permission_from_wire(params: dict[str, Any]) -> PermissionRequest:
    """Parse `permission.request` params."""
    m = _parse(_Permission, params)
    return PermissionRequest(
        session_id=m.session_id,
        call_id=m.call_id,
        tool=m.tool,
        input=m.input,
        stop_class=m.stop_class,
        reason=m.reason,
    )
