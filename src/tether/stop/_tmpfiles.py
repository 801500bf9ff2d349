"""Which folders an age cleaner tends: systemd-tmpfiles configuration, read for the board.

A stop left untouched in a folder an age cleaner tends may be deleted (the reader reads no
byte, so it never refreshes the stop's access time); the next read is then CLEAR. The
board warns about such folders; it never refuses them. Files with the same name in
`/etc/tmpfiles.d` override `/run/tmpfiles.d`, which overrides `/usr/lib/tmpfiles.d`.
`/tmp` and `/var/tmp` are listed even when no configuration names them: most systems
clean them (systemd: 10 and 30 days; macOS: 3 days).
"""

from __future__ import annotations

from pathlib import Path

import attrs

__all__ = ("AgeCleaner", "age_cleaned", "cleaner_of", "parse_tmpfiles")

TMPFILES_DIRS = (
    Path("/etc/tmpfiles.d"),
    Path("/run/tmpfiles.d"),
    Path("/usr/lib/tmpfiles.d"),
)
"""Configuration directories, highest priority first."""

_AGED_TYPES = frozenset("dDevqQC")
_DEFAULTS = (("/tmp", "10d"), ("/var/tmp", "30d"))


@attrs.frozen
class AgeCleaner:
    """A folder whose old entries are deleted."""

    path: Path
    """The folder tended."""
    age: str
    """How old an entry must be (tmpfiles.d age syntax, e.g. `10d`)."""
    source: str
    """Where this came from: a configuration file, or `usual default`."""


def parse_tmpfiles(text: str, source: str) -> list[AgeCleaner]:
    """Return the age-cleaned folders one tmpfiles.d file declares."""
    found: list[AgeCleaner] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[0].startswith("#"):
            continue
        kind = fields[0].rstrip("!-=~^+")
        age = fields[5]
        if len(kind) != 1 or kind not in _AGED_TYPES or age == "-":
            continue
        if not fields[1].startswith("/") or "%" in fields[1]:
            continue
        found.append(AgeCleaner(Path(fields[1]), age, source))
    return found


def age_cleaned(dirs: tuple[Path, ...] = TMPFILES_DIRS) -> list[AgeCleaner]:
    """Return every folder an age cleaner tends on this machine, by its configuration."""
    chosen: dict[str, Path] = {}
    for directory in dirs:
        try:
            names = sorted(
                p.name for p in directory.iterdir() if p.name.endswith(".conf")
            )
        except OSError:
            continue
        for name in names:
            chosen.setdefault(name, directory / name)
    found: list[AgeCleaner] = []
    for name in sorted(chosen):
        try:
            text = chosen[name].read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found += parse_tmpfiles(text, str(chosen[name]))
    listed = {cleaner.path for cleaner in found}
    for path, age in _DEFAULTS:
        if Path(path) not in listed:
            found.append(AgeCleaner(Path(path), age, "usual default"))
    return found


def cleaner_of(folder: Path, cleaners: list[AgeCleaner]) -> AgeCleaner | None:
    """Return the cleaner tending `folder` (it is the folder or above it), if any."""
    for cleaner in cleaners:
        if folder == cleaner.path or cleaner.path in folder.parents:
            return cleaner
    return None
