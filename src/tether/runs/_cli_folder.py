"""A preset's CLI folder: a per-lane copy tether makes, never the person's own (S16).

Claude Code and Codex write their config folder as they run (sessions, caches, and
settings: hooks, MCP servers). Were the person's own `~/.claude` (`CLAUDE_CONFIG_DIR`)
or `CODEX_HOME` writable to a stage, whatever its agent wrote there would run in the
person's next `claude` or `codex`, outside tether. So each lane's preset gets a folder
of its own beside the lane, `lanes/<run>/<lane>.agent/<preset>/`, passed to the CLI as
`CLAUDE_CONFIG_DIR` / `CODEX_HOME`, which the wall leaves writable instead:

- into it, at each preset stage's start, go only the person's credentials and what the
  CLI needs to reach its model (Claude Code: `.credentials.json`, and the account
  fields of `.claude.json`; Codex: `auth.json` and `config.toml`), each read from the
  person's folder with the bounded readers (a regular file, at most `FILE_LIMIT`;
  `.claude.json`, which also keeps Claude Code's history, at most `ACCOUNT_LIMIT`);
- nothing ever goes from it back into the person's folder;
- a take-over's lane gets the session its stage resumes copied from the previous lane's
  folder (`carry_session`): found by descriptor below that folder, following no link,
  copied only if it is a regular file of at most `SESSION_LIMIT` bytes. A session that
  cannot be carried is a one-line reason, and the stage starts over with its brief.

The folder is tether's (the lane's `.agent` folder is read-only inside the wall), but
what is in it was written by the stage's tree: tether writes there only below a
descriptor of it (a link planted at a credential's name is replaced, never written
through) and reads from it only with the bounded readers.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, assert_never

from .._untrusted import (
    copy_beneath,
    dir_beneath,
    list_beneath,
    read_beneath,
    write_beneath,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._plan import Preset

__all__ = (
    "ACCOUNT_LIMIT",
    "CLAUDE_ACCOUNT_FIELDS",
    "FILE_LIMIT",
    "SESSION_LIMIT",
    "carry_session",
    "cli_folder",
    "make_cli_folder",
    "person_folder",
)

FILE_LIMIT = 1 << 20
"""Bytes of a credential or config file of the person's CLI folder tether copies."""
ACCOUNT_LIMIT = 64 << 20
"""Bytes of the person's `.claude.json` tether reads for its account fields (the file
also keeps Claude Code's per-project history, and grows)."""
SESSION_LIMIT = 256 << 20
"""Bytes of a session file a take-over copies; a larger one is not carried over."""
_LIST_LIMIT = 10_000
"""Entries of one folder read while looking for a session."""
CLAUDE_ACCOUNT_FIELDS = (
    "oauthAccount",
    "primaryApiKey",
    "customApiKeyResponses",
    "userID",
    "hasCompletedOnboarding",
)
"""The fields of Claude Code's `.claude.json` that say who is signed in; its other
fields (projects, MCP servers, tips) stay in the person's file."""
_COPIED: dict[Preset, tuple[str, ...]] = {
    "claude": (".credentials.json",),
    "codex": ("auth.json", "config.toml"),
}
"""The files of the person's folder copied as they are."""
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A session id that is safe as part of a file name."""


def person_folder(preset: Preset, environ: Mapping[str, str]) -> Path:
    """The person's own config folder of the CLI (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`)."""
    home = Path(environ.get("HOME", "~")).expanduser()
    match preset:
        case "claude":
            return Path(environ.get("CLAUDE_CONFIG_DIR") or home / ".claude")
        case "codex":
            return Path(environ.get("CODEX_HOME") or home / ".codex")
        case _:
            assert_never(preset)


def cli_folder(agent_dir: Path, preset: Preset) -> Path:
    """The lane's own CLI folder, in the lane's `.agent` folder."""
    return agent_dir / preset


def _claude_account(environ: Mapping[str, str]) -> tuple[bytes | None, str | None]:
    """The account fields of the person's `.claude.json` (None: none), and a note."""
    config = environ.get("CLAUDE_CONFIG_DIR")
    where = Path(config) if config else Path(environ.get("HOME", "~")).expanduser()
    try:
        raw = read_beneath(where, ".claude.json", ACCOUNT_LIMIT)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{where / '.claude.json'} not copied: {exc.strerror or exc}"
    try:
        found = json.loads(raw)
    except ValueError as exc:
        return None, f"{where / '.claude.json'} not copied: not JSON ({exc})"
    if not isinstance(found, dict):
        return None, f"{where / '.claude.json'} not copied: not a JSON object"
    kept = {k: found[k] for k in CLAUDE_ACCOUNT_FIELDS if k in found}
    return json.dumps(kept, indent=2).encode(), None


def make_cli_folder(
    preset: Preset, environ: Mapping[str, str], agent_dir: Path
) -> tuple[Path, list[str]]:
    """Make (or refresh) the lane's CLI folder with the person's credentials.

    `agent_dir` is the lane's `.agent` folder (tether's, made here if missing). Each
    file is read from the person's folder (`person_folder`) by descriptor, bounded, and
    written below a descriptor of the lane's folder, replacing whatever the stage's
    tree left at its name. A file the person does not have is left out.

    Returns:
        The folder, and notes on files that could not be copied (for the lane log).
    """
    agent_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = cli_folder(agent_dir, preset)
    source = person_folder(preset, environ)
    notes: list[str] = []
    with dir_beneath(agent_dir, preset, create=True) as fd:
        for name in _COPIED[preset]:
            try:
                data = read_beneath(source, name, FILE_LIMIT)
            except FileNotFoundError:
                continue
            except OSError as exc:
                notes.append(f"{source / name} not copied: {exc.strerror or exc}")
                continue
            write_beneath(fd, name, data)
        if preset == "claude":
            account, note = _claude_account(environ)
            if note is not None:
                notes.append(note)
            # Written every time: what a stage wrote into it is not kept.
            write_beneath(fd, ".claude.json", account or b"{}")
    return folder, notes


def claude_project(cwd: Path) -> str:
    """Claude Code's folder name for sessions started in `cwd` (below `projects/`)."""
    return re.sub(r"[^A-Za-z0-9]", "-", os.path.realpath(cwd))


def _find_claude(previous: Path, session: str) -> PurePath:
    name = f"{session}.jsonl"
    for entry, kind in sorted(list_beneath(previous, "projects", limit=_LIST_LIMIT)):
        if kind != stat.S_IFDIR:
            continue
        try:
            inside = dict(
                list_beneath(previous, f"projects/{entry}", limit=_LIST_LIMIT)
            )
        except OSError:
            continue
        if name in inside:
            return PurePath("projects", entry, name)
    raise FileNotFoundError(2, f"no session {session} in {previous}")


def _find_codex(previous: Path, session: str) -> PurePath:
    """Codex keeps `sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`."""
    suffix = f"-{session}.jsonl"
    folders = [PurePath("sessions")]
    for _ in range(3):
        deeper: list[PurePath] = []
        for folder in folders:
            try:
                entries = list_beneath(previous, folder, limit=_LIST_LIMIT)
            except OSError:
                continue
            deeper += [folder / n for n, k in sorted(entries) if k == stat.S_IFDIR]
        folders = deeper
    for folder in folders:
        try:
            entries = list_beneath(previous, folder, limit=_LIST_LIMIT)
        except OSError:
            continue
        for name, _kind in sorted(entries):
            if name.startswith("rollout-") and name.endswith(suffix):
                return folder / name
    raise FileNotFoundError(2, f"no session {session} in {previous}")


def carry_session(
    preset: Preset, session: str, previous: Path, folder: Path, cwd: Path
) -> str | None:
    """Copy the session `session` from a previous lane's CLI folder into `folder`.

    The CLI resumes it from there: Claude Code looks only below the project folder of
    its working directory (`cwd`), so the file goes there; Codex keeps its dated path.

    Returns:
        None when the session was copied, else why not (one line).
    """
    if not _SESSION_ID.fullmatch(session):
        return f"the session id {session!r} is not one the CLI makes"
    try:
        match preset:
            case "claude":
                found = _find_claude(previous, session)
                target = PurePath("projects", claude_project(cwd), found.name)
            case "codex":
                found = target = _find_codex(previous, session)
            case _:
                assert_never(preset)
        copy_beneath(previous, found, folder, target, limit=SESSION_LIMIT)
    except FileNotFoundError:
        return f"session {session} is not kept in {previous}"
    except OSError as exc:
        return f"session {session} in {previous} was not copied: {exc.strerror or exc}"
    return None
