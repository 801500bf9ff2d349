"""Unattended runs (spec 03): plans, the store, lanes, the halt, take-over, views.

`load_plan()` reads a plan file; `open_store()` opens the store of runs, claims and the
ledger (`Store` is the interface both backends implement).
"""

from __future__ import annotations

from ._open import open_store as open_store
from ._open import store_url as store_url
from ._plan import Item as Item
from ._plan import Plan as Plan
from ._plan import PlanError as PlanError
from ._plan import Stage as Stage
from ._plan import load_plan as load_plan
from ._store import Store as Store
from ._values import Claim as Claim
from ._values import Event as Event
from ._values import LaneRow as LaneRow
from ._values import LaneState as LaneState
from ._values import QueueItem as QueueItem
from ._values import Receipt as Receipt
from ._values import RunRow as RunRow
from ._values import RunState as RunState
from ._values import StaleClaim as StaleClaim
from ._views import account_runs as account_runs

__all__ = (
    "Claim",
    "Event",
    "Item",
    "LaneRow",
    "LaneState",
    "Plan",
    "PlanError",
    "QueueItem",
    "Receipt",
    "RunRow",
    "RunState",
    "Stage",
    "StaleClaim",
    "Store",
    "account_runs",
    "load_plan",
    "open_store",
    "store_url",
)
