"""Options of one kind that several commands take: a duration in seconds.

Each command names its own option, default and help; the kind (a float of seconds, its
range, how it shows in `--help`) is written here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from collections.abc import Callable

    from click.decorators import FC

__all__ = ("seconds_option",)


def seconds_option(
    name: str, *, default: float | None, help: str, zero: bool = False
) -> Callable[[FC], FC]:
    """A `click.option` of seconds: more than zero (or, with `zero`, zero too).

    Its default is shown when it has one; None leaves it to `help` to say.
    """
    return click.option(
        name,
        type=click.FloatRange(min=0, min_open=not zero),
        default=default,
        show_default=default is not None,
        metavar="SECONDS",
        help=help,
    )
