"""The one glob dialect tether matches paths in: the Glob tool, permission rules, the guard.

`*` and `?` stay inside one path segment, `**` as a whole segment spans directories,
`[...]` is a character class (`!` or `^` negates) and `{a,b}` an alternation.
"""

from __future__ import annotations

import itertools
import re
from functools import cache

__all__ = ("compile_glob", "expand_braces")


def expand_braces(pattern: str) -> list[str]:
    """Expand the first `{a,b}` group (recursively), as shells and fast-glob do."""
    depth = 0
    start = -1
    commas: list[int] = []
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start, commas = i, []
            depth += 1
        elif ch == "," and depth == 1:
            commas.append(i)
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0 and commas:
                head, tail = pattern[:start], pattern[i + 1 :]
                bounds = [start, *commas, i]
                out: list[str] = []
                for a, b in itertools.pairwise(bounds):
                    out.extend(expand_braces(head + pattern[a + 1 : b] + tail))
                return out
    return [pattern]


def _char_class(seg: str, start: int) -> tuple[str, int] | None:
    """The class opening at `start` as a regex and the index of its `]`, or None.

    As in shells, a `]` right after `[` (or `[!`) is a member, and `[` without a
    closing `]` or with an empty range (`[z-a]`) stands for itself.
    """
    first = start + 1
    if seg[first : first + 1] in ("!", "^"):
        first += 1
    close = seg.find("]", first + 1)
    if close == -1:
        return None
    body = seg[first:close].replace("\\", "\\\\").replace("[", "\\[")
    regex = ("[^" if first > start + 1 else "[") + body + "]"
    try:
        re.compile(regex)
    except re.error:
        return None
    return regex, close


def _segment(seg: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(seg):
        ch = seg[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[" and (cls := _char_class(seg, i)) is not None:
            out.append(cls[0])
            i = cls[1]
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


@cache
def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile a glob over `/`-separated relative paths into a regular expression.

    `*` and `?` stay inside one path segment, `**` as a whole segment spans any number
    of directories (none included), `[...]` is a character class and `{a,b}` an
    alternation.
    """
    alternatives = []
    for expanded in expand_braces(pattern):
        parts = [p for p in expanded.strip("/").split("/") if p not in ("", ".")]
        regex = ""
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            if part == "**":
                regex += ".*" if last else "(?:[^/]*/)*"
            else:
                regex += _segment(part) + ("" if last else "/")
        alternatives.append(regex)
    return re.compile("(?:" + "|".join(alternatives) + r")\Z", re.DOTALL)
