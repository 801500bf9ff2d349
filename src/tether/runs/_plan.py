"""The plan file (TOML) of an unattended run, read into frozen `Plan`, `Stage`, `Item`.

Every error names the file, the line and the field, and says what to write instead.
`tomllib` keeps no positions, so a field's line is found again in the source text: the
N-th `[[stage]]` or `[[item]]` header, then the first `key =` line below it. This module
only reads and validates; it does not run anything.
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any, Literal, final

import attrs

from ..errors import UsageError

__all__ = (
    "AGENT_BUILTIN",
    "PRESETS",
    "Item",
    "Plan",
    "PlanError",
    "Preset",
    "Stage",
    "load_plan",
)

AGENT_BUILTIN = "builtin"
"""The agent name of tether's own agent loop."""

Preset = Literal["claude", "codex"]
"""The agent CLIs a stage may name as its agent (spec 03, "Presets")."""
PRESETS: dict[str, tuple[Preset, str]] = {
    "claude": ("claude", "npm install -g @anthropic-ai/claude-code"),
    "codex": ("codex", "npm install -g @openai/codex"),
}
"""Each preset's name and how its CLI is installed."""
PRESET_USAGE_LIMITS: dict[Preset, str] = {
    # Claude Code ends `-p` with "Claude AI usage limit reached|<unix time>" (older
    # releases) or "You've hit your limit · resets …" (newer ones).
    "claude": (
        r"Claude AI usage limit reached\|(?P<reset>\d{9,})"
        r"|(?i:usage limit reached|you've hit your (?:usage )?limit)"
    ),
    # Codex says "You've hit your usage limit …" (error `usage_limit_reached`).
    "codex": r"(?i:usage_limit_reached|you've hit your usage limit)",
}
"""How each preset's CLI says it hit its account's usage limit (a plan's `usage_limit`
replaces it)."""

_ITEM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_KNOWN_PLACEHOLDERS = frozenset({"brief", "lane", "item"})
_TOP_KEYS = frozenset(
    {"repo", "lanes", "store", "stage", "item", "poll", "heartbeat", "lease"}
)
_STAGE_KEYS = frozenset(
    {
        "name",
        "agent",
        "model",
        "timeout",
        "usage_limit",
        "usage_wait",
        "commit",
        "args",
        "command",
        "stop_wait",
        "writable",
        "env",
    }
)
_PRESET_KEYS = frozenset({"args", "command", "stop_wait"})
_ITEM_KEYS = frozenset({"id", "brief"})


class PlanError(UsageError):
    """The plan file cannot be used; the message names the line and the field."""


def check_item_id(text: str) -> str:
    """Return `text` if it can name a work item (and a git branch), else raise.

    Raises:
        UsageError: the id is empty, too long, or has characters outside `A-Z a-z 0-9 . _ -`.
    """
    if not _ITEM_ID.fullmatch(text) or ".." in text or text.endswith((".", ".lock")):
        raise UsageError(
            f"item id {text!r} is not usable: use letters, digits, '.', '_' and '-' "
            "(at most 100, starting with a letter or digit)"
        )
    return text


@final
@attrs.frozen(kw_only=True)
class Stage:
    """One step of a lane, handed to one agent."""

    name: str
    """Shown in views and receipts."""
    agent: tuple[str, ...] | None
    """The command line (placeholders not yet expanded); None for `builtin`; for a
    preset, its binary followed by `args`."""
    model: str | None = None
    """The model of a `builtin` stage (`scripted:<file>` or `openai:<model>`)."""
    timeout: float | None = None
    """Seconds the agent may run; None: no limit."""
    usage_limit: str | None = None
    """A pattern that, found in a failed agent's output, means it hit a usage limit;
    a named group `reset` may hold the reset time (Unix or ISO 8601)."""
    usage_wait: float = 300.0
    """Seconds to wait for the usage window when the output names no reset time."""
    commit: bool = True
    """Whether work the stage leaves uncommitted is committed onto the lane's branch
    when it ends (`commit = "never"` in the plan: it stays uncommitted, saved aside)."""
    preset: Preset | None = None
    """`claude` or `codex` for a preset stage; then `agent` is its binary and `args`."""
    args: tuple[str, ...] = ()
    """A preset's extra arguments, appended to what tether passes (placeholders kept)."""
    stop_wait: float = 10.0
    """Seconds a preset's agent that is between tool calls may take to end its turn
    after a stop before tether ends it."""
    writable: tuple[Path, ...] = ()
    """Folders the stage's agent may write besides its lane (S15: declared)."""
    env: tuple[str, ...] = ()
    """Variables the wall withholds (tether's own secrets) that the agent needs."""


@final
@attrs.frozen(kw_only=True)
class Item:
    """One work item named in the plan."""

    id: str
    """Unique in the store; also names the lane's branch."""
    brief: str
    """What to do; expands `{brief}`."""


@final
@attrs.frozen(kw_only=True)
class Plan:
    """A validated plan file."""

    path: Path
    """Where it was read from."""
    repo: Path
    """The git repository lanes branch from (absolute)."""
    lanes: int = 1
    """Lanes open at once."""
    store: str | None = None
    """`sqlite`, a SQLite path, or a `postgresql://` URL; None: the embedded default."""
    stages: tuple[Stage, ...]
    """In order."""
    items: tuple[Item, ...] = ()
    """Empty: the run works through the store's queue."""
    poll: float = 2.0
    """Seconds between reads of the stop while nothing moves."""
    heartbeat: float = 10.0
    """Seconds between claim renewals."""
    lease: float = 60.0
    """Seconds a claim lives without a renewal."""


def _lines_of(text: str) -> list[str]:
    return text.splitlines()


def _header_line(lines: list[str], table: str, index: int) -> int | None:
    seen = -1
    pattern = re.compile(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]")
    for number, line in enumerate(lines, start=1):
        if pattern.match(line):
            seen += 1
            if seen == index:
                return number
    return None


def _key_line(lines: list[str], key: str, start: int) -> int | None:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for number in range(start, len(lines) + 1):
        line = lines[number - 1]
        if number > start and re.match(r"^\s*\[", line):
            return None
        if pattern.match(line):
            return number
    return None


@attrs.define
class _Reader:
    path: Path
    lines: list[str]

    def fail(
        self, field: str, why: str, *, table: str | None = None, index: int = 0
    ) -> PlanError:
        key = field.rsplit(".", 1)[-1]
        line: int | None
        if table is None:
            line = _key_line(self.lines, key, 1)
        else:
            head = _header_line(self.lines, table, index)
            line = None if head is None else _key_line(self.lines, key, head) or head
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        return PlanError(f"{where}: {field}: {why}")

    def number(
        self,
        data: dict[str, Any],
        key: str,
        default: float,
        *,
        integer: bool = False,
        field: str | None = None,
        table: str | None = None,
        index: int = 0,
    ) -> float:
        raw = data.get(key, default)
        ok = isinstance(raw, int) if integer else isinstance(raw, int | float)
        if isinstance(raw, bool) or not ok or raw <= 0:
            kind = "a whole number" if integer else "a number of seconds"
            raise self.fail(
                field or key,
                f"must be {kind} above 0, not {raw!r}",
                table=table,
                index=index,
            )
        return float(raw)

    def unknown(
        self,
        data: dict[str, Any],
        known: frozenset[str],
        prefix: str,
        table: str | None,
        index: int,
    ) -> None:
        for key in data:
            if key not in known:
                import difflib

                allowed = ", ".join(sorted(known))
                close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                raise self.fail(
                    f"{prefix}{key}",
                    f"unknown field; {hint}the fields are {allowed}",
                    table=table,
                    index=index,
                )


def _stage(reader: _Reader, raw: object, index: int, path: Path) -> Stage:
    stage = _stage_agent(reader, raw, index, path)
    assert isinstance(raw, dict)
    field = f"stage[{index}]"
    writable = _strings(reader, raw, "writable", field, index)
    names = _strings(reader, raw, "env", field, index)
    if (writable or names) and stage.agent is None:
        key = "writable" if writable else "env"
        raise reader.fail(
            f"{field}.{key}",
            "a builtin stage's tools write only its lane and get no withheld "
            "variables; declare it on a command or preset stage",
            table="stage",
            index=index,
        )
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise reader.fail(
                f"{field}.env",
                f"{name!r} is not a variable name",
                table="stage",
                index=index,
            )
    base = path.resolve().parent
    folders = tuple(Path(os.path.expanduser(w)) for w in writable)
    return attrs.evolve(
        stage,
        writable=tuple(f if f.is_absolute() else base / f for f in folders),
        env=tuple(names),
    )


def _strings(
    reader: _Reader, raw: dict[str, object], key: str, field: str, index: int
) -> list[str]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise reader.fail(
            f"{field}.{key}",
            "must be a list of strings",
            table="stage",
            index=index,
        )
    return list(value)


def _stage_agent(reader: _Reader, raw: object, index: int, path: Path) -> Stage:
    field = f"stage[{index}]"
    if not isinstance(raw, dict):
        raise reader.fail(field, "must be a table ([[stage]])")
    reader.unknown(raw, _STAGE_KEYS, f"{field}.", "stage", index)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise reader.fail(
            f"{field}.name",
            'give each stage a name, e.g. name = "implement"',
            table="stage",
            index=index,
        )
    agent = raw.get("agent")
    commit = raw.get("commit", "always")
    if commit not in ("always", "never"):
        raise reader.fail(
            f"{field}.commit",
            'must be "always" (the default: what a stage leaves is committed onto '
            'the lane\'s branch) or "never"',
            table="stage",
            index=index,
        )
    timeout = raw.get("timeout")
    if timeout is not None:
        timeout = reader.number(
            raw, "timeout", 0, field=f"{field}.timeout", table="stage", index=index
        )
    model = raw.get("model")
    if model is not None and not isinstance(model, str):
        raise reader.fail(
            f"{field}.model",
            'must be a string such as "scripted:moves.jsonl"',
            table="stage",
            index=index,
        )
    if agent == AGENT_BUILTIN:
        if model is None:
            raise reader.fail(
                f"{field}.model",
                'a builtin stage needs a model ("scripted:<file>" or "openai:<model>")',
                table="stage",
                index=index,
            )
        kind, _, rest = model.partition(":")
        if kind == "scripted" and rest and not Path(rest).is_absolute():
            # A script named in the plan is found beside the plan, wherever the run starts.
            model = f"scripted:{path.resolve().parent / rest}"
        return Stage(
            name=name,
            agent=None,
            model=model,
            timeout=timeout,
            commit=commit == "always",
        )
    is_preset = isinstance(agent, str) and agent in PRESETS
    if not is_preset:
        for key in _PRESET_KEYS:
            if key in raw:
                raise reader.fail(
                    f"{field}.{key}",
                    'is a field of the agent presets only (agent = "claude" or '
                    '"codex")',
                    table="stage",
                    index=index,
                )
    if (
        not isinstance(agent, list)
        or not agent
        or not all(isinstance(part, str) for part in agent)
    ) and not is_preset:
        raise reader.fail(
            f"{field}.agent",
            'must be "builtin", "claude", "codex" or a command line as a list of '
            'strings, e.g. ["my-agent", "{brief}"]',
            table="stage",
            index=index,
        )
    preset: Preset | None = None
    args: tuple[str, ...] = ()
    if isinstance(agent, str):
        preset, install = PRESETS[agent]  # is_preset: the check above let it by
        command = raw.get("command", preset)
        if not isinstance(command, str) or not command:
            raise reader.fail(
                f"{field}.command",
                f'must name the binary, e.g. command = "{preset}"',
                table="stage",
                index=index,
            )
        raw_args = raw.get("args", [])
        if not isinstance(raw_args, list) or not all(
            isinstance(a, str) for a in raw_args
        ):
            raise reader.fail(
                f"{field}.args",
                'must be a list of strings, e.g. args = ["--model", "sonnet"]',
                table="stage",
                index=index,
            )
        # Spec 03: a stage whose agent is not found is refused before any run starts.
        if shutil.which(command) is None:
            raise reader.fail(
                f"{field}.command" if "command" in raw else f"{field}.agent",
                f"{command!r} is not on PATH: install it ({install}) or name the "
                'binary with command = "..."',
                table="stage",
                index=index,
            )
        args = tuple(raw_args)
        command_line = [command, *args]
    else:
        command_line = [str(part) for part in agent or ()]
    for part in command_line:
        for name_in in _PLACEHOLDER.findall(part):
            if name_in not in _KNOWN_PLACEHOLDERS:
                raise reader.fail(
                    f"{field}.agent",
                    f"unknown placeholder {{{name_in}}}; use {{brief}}, {{lane}} or {{item}}",
                    table="stage",
                    index=index,
                )
    limit = raw.get("usage_limit")
    if limit is None and preset is not None:
        limit = PRESET_USAGE_LIMITS[preset]
    if limit is not None:
        try:
            re.compile(limit)
        except (re.error, TypeError) as exc:
            raise reader.fail(
                f"{field}.usage_limit",
                f"must be a regular expression ({exc})",
                table="stage",
                index=index,
            ) from None
    wait = reader.number(
        raw,
        "usage_wait",
        300.0,
        field=f"{field}.usage_wait",
        table="stage",
        index=index,
    )
    stop_wait = reader.number(
        raw, "stop_wait", 10.0, field=f"{field}.stop_wait", table="stage", index=index
    )
    return Stage(
        name=name,
        agent=tuple(command_line),
        model=model,
        timeout=timeout,
        usage_limit=limit,
        usage_wait=wait,
        commit=commit == "always",
        preset=preset,
        args=args,
        stop_wait=stop_wait,
    )


def _item(reader: _Reader, raw: object, index: int, seen: set[str]) -> Item:
    field = f"item[{index}]"
    if not isinstance(raw, dict):
        raise reader.fail(field, "must be a table ([[item]])")
    reader.unknown(raw, _ITEM_KEYS, f"{field}.", "item", index)
    ident = raw.get("id")
    if not isinstance(ident, str):
        raise reader.fail(
            f"{field}.id",
            'give each item an id, e.g. id = "fix-typo"',
            table="item",
            index=index,
        )
    try:
        check_item_id(ident)
    except UsageError as exc:
        raise reader.fail(f"{field}.id", str(exc), table="item", index=index) from None
    if ident in seen:
        raise reader.fail(
            f"{field}.id",
            f"{ident!r} is already the id of an earlier item",
            table="item",
            index=index,
        )
    seen.add(ident)
    brief = raw.get("brief")
    if not isinstance(brief, str) or not brief.strip():
        raise reader.fail(
            f"{field}.brief",
            "give each item a brief: what to do, as a string",
            table="item",
            index=index,
        )
    return Item(id=ident, brief=brief)


def load_plan(path: Path) -> Plan:
    """Read and validate the plan at `path`.

    Raises:
        PlanError: the file is missing, not TOML, or a field is wrong; the message
            names the file, the line and the field.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the plan: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PlanError(f"{path}: the plan is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        where = f"{path}:{match.group(1)}" if match else str(path)
        raise PlanError(f"{where}: not valid TOML: {exc}") from None
    reader = _Reader(path=path, lines=_lines_of(text))
    reader.unknown(data, _TOP_KEYS, "", None, 0)
    repo_raw = data.get("repo", ".")
    if not isinstance(repo_raw, str) or not repo_raw:
        raise reader.fail(
            "repo", 'must be the path of a git repository, e.g. repo = "."'
        )
    repo = Path(repo_raw).expanduser()
    if not repo.is_absolute():
        repo = path.resolve().parent / repo
    lanes = int(reader.number(data, "lanes", 1, integer=True))
    store = data.get("store")
    if store is not None and (not isinstance(store, str) or not store):
        raise reader.fail(
            "store", 'must be "sqlite", a file path or a postgresql:// URL'
        )
    stages_raw = data.get("stage")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise reader.fail(
            "stage", "the plan needs at least one [[stage]] with a name and an agent"
        )
    stages = tuple(_stage(reader, raw, i, path) for i, raw in enumerate(stages_raw))
    names = [s.name for s in stages]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise reader.fail(
                f"stage[{i}].name",
                f"{name!r} names an earlier stage too",
                table="stage",
                index=i,
            )
    items_raw = data.get("item", [])
    if not isinstance(items_raw, list):
        raise reader.fail("item", "write items as [[item]] tables")
    seen: set[str] = set()
    items = tuple(_item(reader, raw, i, seen) for i, raw in enumerate(items_raw))
    return Plan(
        path=path.resolve(),
        repo=repo.resolve(),
        lanes=lanes,
        store=store,
        stages=stages,
        items=items,
        poll=reader.number(data, "poll", 2.0),
        heartbeat=reader.number(data, "heartbeat", 10.0),
        lease=reader.number(data, "lease", 60.0),
    )
