"""Where a lane's files live in the account's state dir: its directory, log and saves.

Kept apart from `_lane_git` (git, saves, restores) so that the read-only views (`tether
status`, `runs`, `logs`, the board) name a lane's log without importing the lane machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._config import paths

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("lane_dir", "lane_log", "save_dir")


def lane_dir(run: str, lane: str) -> Path:
    """The directory of a lane, in the account's state dir."""
    return paths().state_dir / "lanes" / run / lane


def lane_log(run: str, lane: str) -> Path:
    """The log file of a lane, beside its directory."""
    return lane_dir(run, lane).parent / f"{lane}.log"


def save_dir(run: str, lane: str, commit: str) -> Path:
    """Where the lossless copy of a lane's save with view `commit` lives."""
    return paths().state_dir / "saves" / run / lane / commit
