"""`LazyPattern`: a regular expression compiled on its first use, then kept.

The guard and the shell model run in `tether guard --claude-hook`, a fresh process
before every agent tool call (spec 05: at most 3x a bare interpreter's start).
Compiling a pattern is pure Python in `re` (0.1-0.5 ms each, about 5 ms for the guard's
patterns at import, and 2 ms more for the two alternations of the protected paths
each guard builds: `docs/benchmarks.md`, "Guard hook start-up"), and most patterns
serve a form few commands have (`$'...'`, `sed`, a decoder piped into a shell). So the
patterns a typical command does not need are `LazyPattern`s: the same methods as a
compiled pattern, the compiled one built at the first call and held in its slot.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ("LazyPattern",)

_END = 2**63 - 1  # `re`'s own default end position (sys.maxsize)


class LazyPattern:
    """`re.compile(pattern, flags)`, done at the first `search`, `match`, ..."""

    __slots__ = ("_compiled", "flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now if it was not yet)."""
        found = self._compiled
        if found is None:
            found = self._compiled = re.compile(self.pattern, self.flags)
        return found

    def search(
        self, string: str, pos: int = 0, endpos: int = _END
    ) -> re.Match[str] | None:
        return self.compiled().search(string, pos, endpos)

    def match(
        self, string: str, pos: int = 0, endpos: int = _END
    ) -> re.Match[str] | None:
        return self.compiled().match(string, pos, endpos)

    def fullmatch(
        self, string: str, pos: int = 0, endpos: int = _END
    ) -> re.Match[str] | None:
        return self.compiled().fullmatch(string, pos, endpos)

    def finditer(self, string: str) -> Iterator[re.Match[str]]:
        return self.compiled().finditer(string)

    def sub(self, repl: Callable[[re.Match[str]], str], string: str) -> str:
        return self.compiled().sub(repl, string)
