"""Helpers for tool and plugin authors, and for tether's own tests."""

from __future__ import annotations

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
    "Obedient",
    "SlowExtension",
    "SlowWrite",
    "Stubborn",
    "Stuck",
    "Tree",
)
