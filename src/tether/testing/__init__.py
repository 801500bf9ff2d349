"""Helpers for tool and plugin authors, and for tether's own tests."""

from __future__ import annotations

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

__all__ = (
    "TREES",
    "Echo",
    "Fail",
    "Hang",
    "ModelServer",
    "Obedient",
    "Reply",
    "SlowExtension",
    "SlowWrite",
    "Stubborn",
    "Stuck",
    "Tree",
    "error_reply",
    "text_reply",
    "tool_call_reply",
)
