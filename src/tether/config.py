"""The account's configuration: where the file is, what it says, what is in force.

`load_config()` reads the account's TOML file (`tether config path` prints where) and
applies the `TETHER_*` environment overrides; `Runtime(config=...)` takes the result.
"""

from __future__ import annotations

from ._config import Config as Config
from ._config import Paths as Paths
from ._config import load_config as load_config
from ._config import paths as paths

__all__ = ("Config", "Paths", "load_config", "paths")
