"""`python -m tether` runs the `tether` command."""

from __future__ import annotations

from .cli import main

main()
