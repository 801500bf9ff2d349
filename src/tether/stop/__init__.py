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
    from ..guard import GuardVerdict as GuardVerdict
    from ..guard import guard_tool_call as guard_tool_call
    from ._board import Board as Board
    from ._board import build_board as build_board
    from ._board import choose_setup as choose_setup
    from ._hook import HookAnswer as HookAnswer
    from ._hook import judge_hook_event as judge_hook_event
    from ._protected import protected_paths as protected_paths
    from ._reader import NotHonoured as NotHonoured
    from ._reader import ReadOutcome as ReadOutcome
    from ._reader import StopReading as StopReading
    from ._reason import stop_reason as stop_reason
    from ._setup import SetupRecord as SetupRecord
    from ._setup import load_setup as load_setup
    from ._setup import setup_path as setup_path
    from ._stop_store import StopStore as StopStore
    from ._stop_store import StopWatch as StopWatch
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

__all__, __getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "..guard": ("GuardVerdict", "guard_tool_call"),
        "._board": ("Board", "build_board", "choose_setup"),
        "._hook": ("HookAnswer", "judge_hook_event"),
        "._protected": ("protected_paths",),
        "._reader": ("NotHonoured", "ReadOutcome", "StopReading"),
        "._reason": ("stop_reason",),
        "._setup": ("SetupRecord", "load_setup", "setup_path"),
        "._stop_store": ("StopStore", "StopWatch"),
        "._sysboard": ("SystemBoard", "bind_accounts", "unbind_accounts"),
        "._system": (
            "SYSTEM_DIR",
            "Binding",
            "BindingUnchecked",
            "SystemBinding",
            "install_hold_reason",
            "load_binding",
        ),
        "._verbs": (
            "AGENT_MARKERS",
            "LiftResult",
            "check_caller",
            "lift_stop",
            "set_stop",
        ),
    },
)
