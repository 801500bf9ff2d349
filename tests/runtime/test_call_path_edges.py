"""What the per-call path must still get right at its edges: inputs that cannot be
sent (a cycle, a mapping that fails as it is read, a failed encode before a good one),
a lone surrogate on its way to the ledger file, an input model with a `model_validate`
of its own, and an approver that raises instead of answering."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import pydantic
import pytest
from tests.runtime.support import TEST_TOOLS

from tether import ErrorCode, Runtime
from tether.errors import InvalidInput
from tether.host._tool import validate_with
from tether.host._wire import encoded_input
from tether.runtime import CallState, PermissionRequest
from tether.runtime._ledger import read_ledger_file
from tether.testing import runtime_for

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

MakeRuntime = Callable[..., Runtime]


class _Unreadable(Mapping[str, Any]):
    """A mapping that fails as it is read."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("the store went away")

    def __iter__(self) -> Iterator[str]:
        return iter(["text"])

    def __len__(self) -> int:
        return 1


async def test_a_cyclic_input_is_refused_as_circular(make_runtime: MakeRuntime) -> None:
    """Regression: the input encoder kept no table of open containers, so a cycle was
    only stopped by the recursion limit (a crash with a raised limit)."""
    cyclic: dict[str, Any] = {"text": "x"}
    cyclic["self"] = cyclic
    async with make_runtime() as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", cyclic)
            after = await turn.call("Echo", {"text": "still fine"})
    assert result.code is ErrorCode.INVALID_INPUT
    assert "Circular reference" in result.output
    assert after.output == "still fine"


async def test_an_input_that_fails_as_it_is_read_fails_that_call(
    make_runtime: MakeRuntime,
) -> None:
    """A mapping whose reading raises is INVALID_INPUT with a ledger row, not an
    exception out of `turn.call` that leaves the call half registered."""
    async with make_runtime() as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", _Unreadable())  # type: ignore[arg-type]
        report = await session.abort()
    assert result.code is ErrorCode.INVALID_INPUT
    assert "RuntimeError: the store went away" in result.output
    (record,) = session.ledger_calls()
    assert record.state is CallState.FAILED
    assert record.input is not None
    assert "_Unreadable" in record.input
    assert report.settled


def test_a_failed_encode_leaves_nothing_for_the_next() -> None:
    """The encoder's table of open containers is made afresh after a failure: the same
    containers encode once the bad value is gone (no false "Circular reference")."""
    inner: dict[str, Any] = {"bad": math.nan}
    outer = {"inner": inner}
    with pytest.raises(InvalidInput, match="Out of range float"):
        encoded_input(outer)
    inner["bad"] = 1.5
    assert encoded_input(outer)[1] == '{"inner": {"bad": 1.5}}'


def test_inputs_are_encoded_alike_in_every_thread() -> None:
    """Each thread has its own encoder; one failing in a thread harms no other."""
    results: list[str] = []

    def work() -> None:
        for n in range(200):
            with pytest.raises(InvalidInput):
                encoded_input({"n": n, "bad": {1, 2}})
            results.append(encoded_input({"n": n, "é": [True, None]})[1])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 800
    assert set(results) == {f'{{"n": {n}, "é": [true, null]}}' for n in range(200)}


async def test_a_lone_surrogate_is_refused_alike_and_kept_escaped(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    """Regression: a lone surrogate in an input failed the stdio host's frame ("host
    unreachable") and left the call REQUESTED in a ledger file that could not hold it.
    Both hosts refuse it now; the ledger keeps it escaped, in the file and in memory."""
    ledger = tmp_path / "calls.db"
    async with make_runtime(ledger=ledger) as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", {"text": "a\ud800b"})
            after = await turn.call("Echo", {"text": "b"})
        report = await session.abort()
    assert result.code is ErrorCode.INVALID_INPUT
    assert "lone surrogate" in result.output
    assert after.output == "b"
    assert report.settled
    first, _ = session.ledger_calls()
    on_file, _ = read_ledger_file(ledger)
    assert first.state is on_file.state is CallState.FAILED
    assert first.input == on_file.input == '{"text": "a\\ud800b"}'


def test_an_input_model_with_its_own_validation_is_used_as_written() -> None:
    """The fast path through a model's validator is taken only for models that keep
    pydantic's own `model_validate` and `model_dump`."""

    class Doubled(pydantic.BaseModel):
        x: int

        @classmethod
        def model_validate(cls, obj: Any, **kw: Any) -> Doubled:
            return super().model_validate({"x": obj["x"] * 2}, **kw)

    class Plain(pydantic.BaseModel):
        x: int = pydantic.Field(alias="-x")

    assert validate_with(Doubled, {"x": 2}) == {"x": 4}
    assert validate_with(Plain, {"-x": 2}) == {"x": 2}
    assert validate_with(Plain, {"-x": 3}) == {"x": 3}


async def _deny_then_allow(rt: Runtime, workspace: Path) -> None:
    """A call the approver fails on is PERMISSION_DENIED; the next one runs."""
    async with rt:
        session = rt.session()
        async with session.turn() as turn:
            with anyio.fail_after(5):
                denied = await turn.call("SlowWrite", {"path": "no.txt", "seconds": 0})
                ok = await turn.call("SlowWrite", {"path": "ok.txt", "seconds": 0})
    assert denied.code is ErrorCode.PERMISSION_DENIED
    assert "was not approved" in denied.output
    assert not (workspace / "no.txt").exists()
    assert ok.output.startswith("wrote")
    assert [r.state for r in session.ledger_calls()] == [
        CallState.FAILED,
        CallState.SUCCEEDED,
    ]


def _failing_approver(
    raised: Callable[[], BaseException],
) -> Callable[[PermissionRequest], Any]:
    async def approver(request: PermissionRequest) -> bool:
        if request.input.get("path") == "ok.txt":
            return True
        raise raised()

    return approver


_ASK = {"ask": ["SlowWrite"], "allow": ["Echo"]}


async def test_an_approver_that_fails_denies_that_call_only(
    make_runtime: MakeRuntime, workspace: Path
) -> None:
    """An approver that raises gives no approval: that call does not run, the next
    one does (on both hosts)."""
    approver = _failing_approver(lambda: RuntimeError("approver down"))
    await _deny_then_allow(make_runtime(approver=approver, permissions=_ASK), workspace)


@pytest.mark.parametrize(
    "raised",
    [KeyboardInterrupt, lambda: anyio.get_cancelled_exc_class()()],
    ids=["keyboard-interrupt", "own-cancelled-error"],
)
async def test_an_approver_that_raises_any_base_exception_denies_that_call_only(
    workspace: Path, raised: Callable[[], BaseException]
) -> None:
    """Regression: an approver raising its own CancelledError made the call vanish (its
    caller waited forever); one raising KeyboardInterrupt ended the host's task group.
    (In-process: over stdio the approver runs in the runtime's process and its raise
    reaches the host as an error frame, the case above.)"""
    rt = runtime_for(
        workspace,
        TEST_TOOLS,
        approver=_failing_approver(raised),
        permissions=_ASK,
        guard=False,
    )
    await _deny_then_allow(rt, workspace)


async def test_cancelling_a_runtime_while_its_stdio_host_starts_is_a_cancellation(
    workspace: Path,
) -> None:
    """Regression: a cancellation that came while the stdio host was starting closed
    its connection and surfaced as "the stdio host did not start" (a UsageError)."""
    rt = runtime_for(workspace, TEST_TOOLS, host="stdio", guard=False)
    with anyio.move_on_after(0.05) as scope:
        async with rt:
            pytest.fail("the host started within 50 ms")
    assert scope.cancelled_caught
