"""Start the supervisor of one tree (`_supervisor.py`) from its cached bytecode.

`python -I -S _supervisor_start.py MODE ...` is how the host runs a tree's supervisor: a
script run by path is compiled at every start (about 5-10 ms for the supervisor, more
than the wall's system calls), while a module imported from its folder is read from
`__pycache__` (written by the installer, or at the first start). The folder is appended
to `sys.path`, after the standard library, and nothing but the supervisor and its plan
(`_wall_plan.py`, imported by the supervisor by its bare name) is imported from it: the
supervisor stays a standalone, stdlib-only program.
"""

from __future__ import annotations

import importlib
import os
import sys

if __name__ == "__main__":
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    importlib.import_module("_supervisor").main()
