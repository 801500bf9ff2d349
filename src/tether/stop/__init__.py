"""The recorded stop: setup, the folder rule, one-descriptor reads, the person's verbs.

A stop is recorded state the person sets with their own command; every run reads it
before each move. `StopStore.read()` returns a `StopReading` whose outcome is CLEAR,
STOPPED or HOLD; a run uses a `StopWatch` (made at its start) that also holds when the
folder, the uid directory or the setup changed. A root-owned system binding
(`bind_accounts`, `tether setup --system`) makes an agents' account honour the person's
stop whatever its own setup says; `install_hold_reason()` says why a bound account's run
must hold. `protected_paths()` lists what the guard keeps agents away from;
`judge_hook_event()` answers one agent hook event (the guard, and a run's stop).
"""

from __future__ import annotations

from .._lazy import lazy_exports as _lazy_exports

TYPE_CHECKING = False  # `typing` is not imported: the per-call hook starts here
if TYPE_CHECKING:
    from ._board import Board as Board
    from ._board import build_board as build_board
    from ._board import choose_setup as choose_setup
    from ._guard import GuardVerdict as GuardVerdict
    from ._guard import guard_tool_call as guard_tool_call
    from ._hook import HookAnswer as HookAnswer
    from ._hook import judge_hook_event as judge_hook_event
    from ._protected import protected_paths as protected_paths
    from ._read import NotHonoured as NotHonoured
    from ._read import ReadOutcome as ReadOutcome
    from ._read import StopReading as StopReading
    from ._setup import SetupRecord as SetupRecord
    from ._setup import load_setup as load_setup
    from ._setup import setup_path as setup_path
    from ._store import StopStore as StopStore
    from ._store import StopWatch as StopWatch
    from ._sysboard import SystemBoard as SystemBoard
    from ._sysboard import bind_accounts as bind_accounts
    from ._sysboard import unbind_accounts as unbind_accounts
    from ._system import SYSTEM_DIR as SYSTEM_DIR
    from ._system import Binding as Binding
    from ._system import BindingUnchecked as BindingUnchecked
    from ._system import SystemBinding as SystemBinding
    from ._system import install_hold_reason as install_hold_reason
    from ._system import load_binding as load_binding
    from ._verbs import AGENT_MARKERS as AGENT_MARKERS
    from ._verbs import LiftResult as LiftResult
    from ._verbs import check_caller as check_caller
    from ._verbs import lift_stop as lift_stop
    from ._verbs import set_stop as set_stop

__all__ = (
    "AGENT_MARKERS",
    "SYSTEM_DIR",
    "Binding",
    "BindingUnchecked",
    "Board",
    "GuardVerdict",
    "HookAnswer",
    "LiftResult",
    "NotHonoured",
    "ReadOutcome",
    "SetupRecord",
    "StopReading",
    "StopStore",
    "StopWatch",
    "SystemBinding",
    "SystemBoard",
    "bind_accounts",
    "build_board",
    "check_caller",
    "choose_setup",
    "guard_tool_call",
    "install_hold_reason",
    "judge_hook_event",
    "lift_stop",
    "load_binding",
    "load_setup",
    "protected_paths",
    "set_stop",
    "setup_path",
    "stop_reason",
    "unbind_accounts",
)

_WHERE = {
    "stop_reason": "_reason",
    "Board": "_board",
    "build_board": "_board",
    "choose_setup": "_board",
    "GuardVerdict": "_guard",
    "guard_tool_call": "_guard",
    "HookAnswer": "_hook",
    "judge_hook_event": "_hook",
    "NotHonoured": "_read",
    "ReadOutcome": "_read",
    "StopReading": "_read",
    "SetupRecord": "_setup",
    "load_setup": "_setup",
    "protected_paths": "_protected",
    "setup_path": "_setup",
    "StopStore": "_store",
    "StopWatch": "_store",
    "SystemBoard": "_sysboard",
    "bind_accounts": "_sysboard",
    "unbind_accounts": "_sysboard",
    "SYSTEM_DIR": "_system",
    "Binding": "_system",
    "BindingUnchecked": "_system",
    "SystemBinding": "_system",
    "install_hold_reason": "_system",
    "load_binding": "_system",
    "AGENT_MARKERS": "_verbs",
    "LiftResult": "_verbs",
    "check_caller": "_verbs",
    "lift_stop": "_verbs",
    "set_stop": "_verbs",
}


__getattr__, __dir__ = _lazy_exports(__name__, _WHERE, __all__)
