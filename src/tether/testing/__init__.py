"""Helpers for tool and plugin authors, and for tether's own tests.

Tools that misbehave on purpose, adversarial process trees, a local model server, and
harnesses that run a call, stop it once it started and wait until it settled.
"""

from __future__ import annotations

from ._harness import EventLog as EventLog
from ._harness import StoppedCall as StoppedCall
from ._harness import event_log as event_log
from ._harness import runtime_for as runtime_for
from ._harness import stop_once_started as stop_once_started
from ._model_server import ModelServer as ModelServer
from ._model_server import Reply as Reply
from ._model_server import error_reply as error_reply
from ._model_server import text_reply as text_reply
from ._model_server import tool_call_reply as tool_call_reply
from ._tools import Echo as Echo
from ._tools import Fail as Fail
from ._tools import Hang as Hang
from ._tools import Obedient as Obedient
from ._tools import SlowExtension as SlowExtension
from ._tools import SlowWrite as SlowWrite
from ._tools import Stubborn as Stubborn
from ._tools import Stuck as Stuck
from ._trees import TREES as TREES
from ._trees import Tree as Tree
from ._trees import alive as alive
from ._trees import announce as announce
from ._trees import tree_pids as tree_pids
from ._trees import tree_procs as tree_procs
from ._trees import wait_exited as wait_exited

__all__ = (
    "TREES",
    "Echo",
    "EventLog",
    "Fail",
    "Hang",
    "ModelServer",
    "Obedient",
    "Reply",
    "SlowExtension",
    "SlowWrite",
    "StoppedCall",
    "Stubborn",
    "Stuck",
    "Tree",
    "alive",
    "announce",
    "error_reply",
    "event_log",
    "runtime_for",
    "stop_once_started",
    "text_reply",
    "tool_call_reply",
    "tree_pids",
    "tree_procs",
    "wait_exited",
)
