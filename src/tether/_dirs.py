"""Where the account's tether config and state live, as text, found without platformdirs.

`tether._config.paths()` and the stop's own files (`tether.stop`) start here. The
per-call hook (`tether guard --claude-hook`, spec 05: at most 3x a bare interpreter's
start) needs both directories, and importing platformdirs costs it about 8 ms
(`docs/benchmarks.md`, "Guard hook start-up"): on Linux, platformdirs reads
`$XDG_CONFIG_HOME` and `$XDG_STATE_HOME` (when absolute) or `~/.config` and
`~/.local/state` under an absolute `HOME`, so this module computes exactly that, and
asks platformdirs itself for anything else (another platform, Android, a `HOME` unset
or relative). `tests/test_dirs.py` holds the two to the same answer.

The text is what `str(Path(...))` gives, so that a `Path` made of it compares equal
to the one platformdirs would give; this module imports neither.
"""

from __future__ import annotations

import os
import posixpath
import sys

from ._env import TetherEnv

__all__ = ("config_dir", "path_text", "state_dir")

_APP = "tether"


def path_text(text: str) -> str:
    """`text` written as `str(pathlib.PurePosixPath(text))` writes it.

    No empty or `.` parts, no trailing slash, and two leading slashes kept (POSIX
    leaves their meaning to the system).
    """
    if text.startswith("//") and not text.startswith("///"):
        lead = "//"
    else:
        lead = "/" if text.startswith("/") else ""
    parts = [part for part in text.split("/") if part and part != "."]
    return (lead + "/".join(parts)) or "."


def config_dir() -> str:
    """The account's config dir: `$TETHER_HOME/config` when `TETHER_HOME` is set.

    Otherwise platformdirs' user config path for tether.
    """
    home = os.environ.get(TetherEnv.HOME)
    if home:
        return path_text(posixpath.join(home, "config"))
    return _user_dir("XDG_CONFIG_HOME", "~/.config", "user_config_path")


def state_dir() -> str:
    """The account's state dir: `$TETHER_HOME/state` when `TETHER_HOME` is set.

    Otherwise platformdirs' user state path for tether.
    """
    home = os.environ.get(TetherEnv.HOME)
    if home:
        return path_text(posixpath.join(home, "state"))
    return _user_dir("XDG_STATE_HOME", "~/.local/state", "user_state_path")


def _user_dir(variable: str, default: str, name: str) -> str:
    if _plain_linux():
        base = os.environ.get(variable, "")
        if not posixpath.isabs(base):
            base = posixpath.expanduser(default)
        return path_text(posixpath.join(base, _APP))
    import platformdirs

    return str(getattr(platformdirs, name)(_APP))


def _plain_linux() -> bool:
    """Linux that platformdirs treats as plain XDG Unix, with an absolute `HOME`."""
    if sys.platform != "linux" or hasattr(sys, "getandroidapilevel"):
        return False
    if (
        os.environ.get("ANDROID_DATA") == "/data"
        and os.environ.get("ANDROID_ROOT") == "/system"
    ):
        return False
    return posixpath.isabs(os.environ.get("HOME", ""))
