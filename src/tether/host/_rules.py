"""Permission rules: `allow` / `ask` / `deny` lists in the familiar form.

A rule is a tool name, optionally with a specifier in parentheses:

```
Bash                            every call of the tool
Bash(npm test)                  exactly the command `npm test` (compared word by word)
Bash(git status:*)              `git status`, alone or followed by more words
Write(src/**), Edit(*.md)       a path relative to the workspace; a pattern without `/`
                                matches the file name at any depth
Read(/etc/**), Read(~/notes/*)  an absolute path
WebFetch(domain:example.com)    a URL on that host (`domain:*.example.com`: subdomains)
mcp__server__tool               one MCP tool
mcp__server__*, mcp__server     every tool of that MCP server
```

Among the rules that match a call, deny wins over ask and ask over allow. When no rule
matches, the stop class decides: `READ_ONLY` tools are allowed, every other class asks.
Paths are resolved (`..` and symlinks) before they are matched, and a call whose path
lies outside the workspace is at least `ask` unless an allow rule *names* that path (a
bare `Read` allows reads inside the workspace only; `Read(/etc/**)` reaches outside).
A URL whose host is loopback, link-local, private, unspecified or a `localhost` name
(literally, or by the addresses the host looked up for the call) is likewise at least
`ask` unless an allow rule names the host (`WebFetch(domain:localhost)`).

Shell commands are matched part by part. A command is split by the one shell model
the stop guard also uses (`tether.guard.parse_script`: quotes, escapes, `$'...'`, comments,
here-documents, Bash's operators) into simple commands separated by `;`, `&&`, `||`,
`|`, `&`, parentheses and newlines; a deny or ask rule applies when it matches any
part, and an allow rule with a specifier allows the command only when every part is
matched by some allow rule: `Bash(git status:*)` does not allow `git status; rm -rf x`.
Deny and ask rules also look past the words of the one wrapper table
(`tether.guard.WRAPPERS`, and reserved words such as `if` and `{`), trying
every later position. Command substitution (`$(...)`, backquotes, `<(...)`) and
redirection to a file are never allowed by a specifier: such commands fall through to
the default (ask) unless a bare `Bash` rule allows them. So does a command that does
not parse.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs

from .._glob import compile_glob as _glob_regex
from ..errors import UsageError
from ..guard import (
    SHELL_KEYWORDS,
    WRAPPERS,
    ShellSyntaxError,
    ShellTooComplex,
    parse_script,
)
from ._addresses import PINNED_FIELD, local_host
from ._tool import Decision, StopClass, Tool, default_decision

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._config import Config

__all__ = ("Decision", "Explanation", "PermissionRules", "Rule", "default_decision")


_RULE_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.*-]+)(?:\((?P<spec>.*)\))?$", re.DOTALL)
_PATH_FIELDS = ("file_path", "path", "notebook_path")
_JUDGED_FIELDS = frozenset((*_PATH_FIELDS, "pattern"))
"""Input fields a path rule can judge."""
_OPAQUE = ("$(", "`", "<(", ">(", "${", "$[")
"""Text whose meaning only the shell knows (substitutions, parameter expansions that can
run code such as `${x@P}`, arithmetic): a command holding any is never matched word by
word, so no allow rule with a specifier can allow it."""
_WRAPPERS = SHELL_KEYWORDS | WRAPPERS
"""Words that run what follows them: deny and ask rules look past them."""
_SAFE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


@attrs.frozen
class Explanation:
    """A decision with the rules that made it and why, for a person to read."""

    decision: Decision
    rules: tuple[str, ...]
    """The rules that decided, as written; empty when the class default did."""
    why: str
    """What kind of reason: `deny rule`, `default for process: no rule matches`, ..."""


def _default(stop_class: StopClass) -> Explanation:
    decision = default_decision(stop_class)
    return Explanation(decision, (), f"default for {stop_class.value}: no rule matches")


@attrs.frozen
class Rule:
    """One parsed rule: a tool-name pattern and an optional specifier."""

    text: str
    """The rule as written."""
    tool: str
    """Tool-name pattern; `*` matches any run of characters."""
    specifier: str | None
    """What is inside the parentheses, or None for a bare tool name."""

    @classmethod
    def parse(cls, text: str) -> Rule:
        """Parse one rule.

        Raises:
            UsageError: the rule is malformed; the message quotes it and says why.
        """
        stripped = text.strip()
        match = _RULE_RE.match(stripped)
        if match is None:
            raise UsageError(
                f"malformed permission rule {text!r}: expected Tool or Tool(specifier)"
            )
        name, spec = match["name"], match["spec"]
        if spec is not None:
            spec = spec.strip()
            if not spec:
                raise UsageError(
                    f"malformed permission rule {text!r}: empty parentheses "
                    f"(write {name} for every call)"
                )
            _check_specifier(text, name, spec)
        return cls(text=stripped, tool=name, specifier=spec)

    def names(self, tool_name: str) -> bool:
        """Return whether the rule's tool pattern covers `tool_name`."""
        if fnmatch.fnmatchcase(tool_name, self.tool):
            return True
        # `mcp__server` names every tool of that server.
        return (
            self.tool.startswith("mcp__")
            and self.tool.count("__") == 1
            and tool_name.startswith(self.tool + "__")
        )


def _check_specifier(text: str, name: str, spec: str) -> None:
    if spec.startswith("domain:"):
        if not spec[len("domain:") :].strip():
            raise UsageError(f"malformed permission rule {text!r}: empty domain")
        return
    if spec.endswith(":*") and not spec[:-2].strip():
        raise UsageError(f"malformed permission rule {text!r}: empty prefix before :*")
    if name == "Bash" or spec.endswith(":*"):
        try:
            _spec_words(spec.removesuffix(":*"))
        except ValueError as exc:
            raise UsageError(f"malformed permission rule {text!r}: {exc}") from None


@functools.lru_cache(maxsize=1024)
def _spec_words(spec: str) -> tuple[str, ...]:
    """The words of a rule's command, split as commands are.

    Raises:
        ValueError: the text does not parse, or holds more than one command.
    """
    commands = parse_script(spec).commands
    if len(commands) > 1 or any(c.redirects for c in commands):
        raise ValueError("a rule names one simple command")
    return commands[0].words if commands else ()


# --- commands -----------------------------------------------------------------------


@attrs.frozen
class _Part:
    words: tuple[str, ...]
    plain: bool
    """False when the part redirects output to a file: no specifier allows it."""


def _split_command(command: str) -> list[_Part] | None:
    """Split a shell command into simple commands; None when it cannot be matched."""
    if any(marker in command for marker in _OPAQUE):
        return None
    try:
        script = parse_script(command)
    except (ShellSyntaxError, ShellTooComplex):
        return None
    if script.substitutions:
        return None
    return [
        _Part(
            words=part.words,
            plain=all(_reads_or_safe(r.op, r.target) for r in part.redirects),
        )
        for part in script.commands
    ]


def _reads_or_safe(op: str, target: str) -> bool:
    """A redirection that reads, duplicates a descriptor, or writes where nothing stays.

    Such a place is `/dev/null`.
    """
    if ">" not in op:
        return True  # `<`, `<<`, `<<<`: input
    return target in _SAFE_TARGETS or target.isdigit() or target == "-"


def _core_words(words: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The word lists a deny or ask rule is tried against for one simple command.

    Leading assignments (`FOO=1`) are dropped. When a wrapper follows (`env`, `nohup`,
    `timeout 5`, `nice -n 10`, `{`, `then` ...), the rule is tried at every later
    position, since a wrapper's own arguments vary in shape: `timeout 5 rm x` and
    `env -u HOME rm x` are judged as holding `rm x`. Trying more positions can only make
    deny and ask stricter.
    """
    i = 0
    while i < len(words) and re.fullmatch(
        r"[A-Za-z_][A-Za-z0-9_]*=.*", words[i], re.DOTALL
    ):
        i += 1
    rest = words[i:]
    if rest and rest[0] in _WRAPPERS:
        return [rest[j:] for j in range(1, len(rest))]
    return [rest]


def _command_matches(spec: str, part: _Part) -> bool:
    if spec.endswith(":*"):
        prefix = _spec_words(spec[:-2])
        return part.words[: len(prefix)] == prefix
    return part.words == _spec_words(spec)


# --- paths and URLs ------------------------------------------------------------------


def _realpath(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _resolve(raw: str, workspace: Path) -> Path:
    p = Path(raw).expanduser()
    return _realpath(p if p.is_absolute() else workspace / p)


def _absolute_pattern(spec: str) -> str | None:
    """Return an absolute pattern, its literal prefix resolved; None if relative."""
    if spec.startswith("~"):
        spec = os.path.expanduser(spec)
    if not spec.startswith("/"):
        return None
    segments = spec.split("/")
    literal = 0
    for i, segment in enumerate(segments):
        if any(ch in segment for ch in "*?["):
            break
        literal = i + 1
    head = "/".join(segments[:literal]) or "/"
    tail = "/".join(segments[literal:])
    resolved = os.path.realpath(head)
    return resolved if not tail else f"{resolved.rstrip('/')}/{tail}"


def _path_matches(spec: str, path: Path, workspace: Path) -> bool:
    absolute = _absolute_pattern(spec)
    if absolute is not None:
        return _glob_regex(absolute).match(str(path).lstrip("/")) is not None
    if path != workspace and workspace not in path.parents:
        return False
    rel = path.relative_to(workspace).as_posix()
    if "/" not in spec.strip("/"):
        return _glob_regex(spec).match(path.name) is not None
    return _glob_regex(spec).match(rel) is not None


def _host_form(host: str) -> str:
    """A host name as rules compare it: lower case, no trailing dot, IDNA (punycode)."""
    host = host.strip().rstrip(".").lower()
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def _domain_matches(spec: str, url: str) -> bool:
    want = _host_form(spec[len("domain:") :])
    try:
        host = _host_form(urlsplit(url).hostname or "")
    except ValueError:
        return False
    if spec[len("domain:") :].strip().startswith("*."):
        return host.endswith("." + want.removeprefix("*."))
    return host == want


# --- the rule set --------------------------------------------------------------------


@attrs.frozen
class _Call:
    """What the rules look at in one call."""

    tool: Tool
    workspace: Path
    command: str | None
    path: Path | None
    outside: bool
    url: str | None
    subject: str | None
    local: str | None = None
    """Why the URL's host is this machine's or its network's (S15), or None."""


def _local_of(url: object, addresses: object) -> str | None:
    if not isinstance(url, str):
        return None
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if not host:
        return None
    pinned = addresses if isinstance(addresses, list | tuple) else ()
    return local_host(host, (a for a in pinned if isinstance(a, str)))


def _call_of(tool: Tool, args: Mapping[str, Any], workspace: Path) -> _Call:
    subject = tool.subject(args)
    command = subject if tool.subject_field == "command" else None
    raw_path: str | None = None
    if tool.subject_field in _PATH_FIELDS and subject is not None:
        raw_path = subject
    else:
        for field in _PATH_FIELDS:
            value = args.get(field)
            if isinstance(value, str) and value:
                raw_path = value
                break
    pattern = args.get("pattern")
    globbing = tool.name == "Glob" and isinstance(pattern, str)
    # Resolving the workspace costs system calls: only calls that name a path need it.
    ws = _realpath(workspace) if raw_path is not None or globbing else workspace
    path = _resolve(raw_path, ws) if raw_path is not None else None
    if globbing:
        assert isinstance(pattern, str)
        # A Glob pattern may start outside its `path` (`/etc/**`, `../../x/*`): judge the
        # directory it really walks, as an entry inside it (so `Glob(/etc/**)` allows
        # walking /etc).
        from .tools.glob import _split_base

        base, _ = _split_base(path if path is not None else ws, pattern)
        path = _resolve(str(base), ws) / "*"
    outside = path is not None and path != ws and ws not in path.parents
    url = args.get("url")
    return _Call(
        tool=tool,
        workspace=ws,
        command=command,
        path=path,
        outside=outside,
        url=url if isinstance(url, str) else None,
        subject=subject,
        local=_local_of(url, args.get(PINNED_FIELD)),
    )


@attrs.frozen
class PermissionRules:
    """The allow / ask / deny lists, parsed; `decide()` rules on one call."""

    allow: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    source: Path | None = attrs.field(default=None, kw_only=True)
    """The config file the rules came from, if any."""

    @classmethod
    def from_lists(
        cls,
        allow: Sequence[str] = (),
        ask: Sequence[str] = (),
        deny: Sequence[str] = (),
        *,
        source: Path | None = None,
    ) -> PermissionRules:
        """Parse three lists of rule strings.

        Raises:
            UsageError: a rule is malformed; the message names it and its list.
        """

        def parse(kind: str, texts: Sequence[str]) -> tuple[Rule, ...]:
            if isinstance(texts, str):
                raise UsageError(f"permissions.{kind} must be a list of rules")
            out = []
            for text in texts:
                try:
                    out.append(Rule.parse(text))
                except UsageError as exc:
                    raise UsageError(f"permissions.{kind}: {exc}") from None
            return tuple(out)

        return cls(
            parse("allow", allow),
            parse("ask", ask),
            parse("deny", deny),
            source=source,
        )

    @classmethod
    def from_config(cls, config: Config) -> PermissionRules:
        """Parse the rules of a loaded config (file and `TETHER_*` overrides)."""
        return cls.from_lists(
            config.allow, config.ask, config.deny, source=config.source
        )

    def decide(
        self, tool: Tool, args: Mapping[str, Any], *, workspace: Path
    ) -> Decision:
        """Return `allow`, `ask` or `deny` for a call of `tool` with `args`."""
        alone = self.decides_alone(tool)
        if alone is not None and args.keys().isdisjoint(alone[1]):
            return alone[0]
        return self.explain(tool, args, workspace=workspace).decision

    def decides_alone(self, tool: Tool) -> tuple[Decision, frozenset[str]] | None:
        """The decision of each call of `tool` whose input names none of the fields.

        Returns the decision and those fields, or None when each call must be looked
        at. With no rule at all and no subject field, a call whose input names nothing
        a path rule could judge gets its class default.
        """
        if self.allow or self.ask or self.deny or tool.subject_field is not None:
            return None
        return default_decision(tool.stop_class), _JUDGED_FIELDS

    def explain(
        self, tool: Tool, args: Mapping[str, Any], *, workspace: Path
    ) -> Explanation:
        """Return the decision for a call with the rules that made it, and why."""
        call = _call_of(tool, args, workspace)
        if call.command is not None:
            return self._decide_command(call)
        for decision, rules in self._strict():
            found = self._first(rules, call)
            if found is not None:
                return Explanation(decision, (found.text,), f"{decision} rule")
        if call.local is not None:
            # S15: a loopback, link-local or private address asks by default.
            named = self._first(tuple(r for r in self.allow if r.specifier), call)
            if named is not None:
                return Explanation("allow", (named.text,), "allow rule naming the host")
            return Explanation(
                "ask",
                (),
                f"the URL's host is {call.local}, and no allow rule names the host",
            )
        if call.outside:
            named = self._first(tuple(r for r in self.allow if r.specifier), call)
            if named is not None:
                return Explanation("allow", (named.text,), "allow rule naming the path")
            return Explanation(
                "ask", (), "outside the workspace, and no allow rule names the path"
            )
        found = self._first(self.allow, call)
        if found is not None:
            return Explanation("allow", (found.text,), "allow rule")
        return _default(tool.stop_class)

    def _strict(self) -> tuple[tuple[Decision, tuple[Rule, ...]], ...]:
        """The lists that win over allow, strongest first."""
        return (("deny", self.deny), ("ask", self.ask))

    def _first(self, rules: tuple[Rule, ...], call: _Call) -> Rule | None:
        return next((rule for rule in rules if _matches(rule, call)), None)

    def _decide_command(self, call: _Call) -> Explanation:
        assert call.command is not None
        parts = _split_command(call.command)
        name = call.tool.name
        # Deny and ask look past assignments and wrappers (`FOO=1 rm`, `{ rm; }`).
        cores = [
            attrs.evolve(p, words=words)
            for p in parts or ()
            for words in _core_words(p.words)
        ]

        def hit(rules: tuple[Rule, ...]) -> Rule | None:
            for rule in rules:
                if not rule.names(name):
                    continue
                if rule.specifier is None:
                    return rule
                spec = rule.specifier
                if any(_command_matches(spec, p) for p in [*(parts or ()), *cores]):
                    return rule
            return None

        for decision, rules in self._strict():
            found = hit(rules)
            if found is not None:
                return Explanation(decision, (found.text,), f"{decision} rule")
        guarded = [r for r in (*self.deny, *self.ask) if r.names(name) and r.specifier]
        if parts is None and guarded:
            # A command the rules cannot read might be one they deny: ask, never allow.
            return Explanation(
                "ask",
                tuple(r.text for r in guarded),
                "the command cannot be read word by word, and these rules might match",
            )
        mine = [r for r in self.allow if r.names(name)]
        bare = next((r for r in mine if r.specifier is None), None)
        if bare is not None:
            return Explanation("allow", (bare.text,), "allow rule")
        if parts and all(p.plain for p in parts):
            used: list[str] = []
            for part in parts:
                match = next(
                    (
                        r
                        for r in mine
                        if r.specifier and _command_matches(r.specifier, part)
                    ),
                    None,
                )
                if match is None:
                    break
                used.append(match.text)
            else:
                why = (
                    "allow rules, one for every part"
                    if len(parts) > 1
                    else "allow rule"
                )
                return Explanation("allow", tuple(dict.fromkeys(used)), why)
        return _default(call.tool.stop_class)

    def describe(self) -> str:
        """Return the rules and the defaults as lines for a person to read."""
        lines = [
            f"source: {self.source}" if self.source else "source: (no config file)"
        ]
        for kind in ("deny", "ask", "allow"):
            rules: tuple[Rule, ...] = getattr(self, kind)
            shown = ", ".join(r.text for r in rules) if rules else "(none)"
            lines.append(f"{kind}: {shown}")
        defaults = ", ".join(f"{sc.value} {default_decision(sc)}" for sc in StopClass)
        lines.append(f"defaults (no rule matches): {defaults}")
        lines.append(
            "outside the workspace: at least ask, unless an allow rule names the path"
        )
        lines.append(
            "loopback, link-local and private addresses: at least ask, unless an "
            "allow rule names the host"
        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Return the rules as JSON-ready data (`tether permissions --json`)."""
        return {
            "allow": [r.text for r in self.allow],
            "ask": [r.text for r in self.ask],
            "deny": [r.text for r in self.deny],
            "defaults": {sc.value: default_decision(sc) for sc in StopClass},
            "source": str(self.source) if self.source else None,
        }


def _matches(rule: Rule, call: _Call) -> bool:
    """Match a rule against a call whose subject is not a shell command."""
    if not rule.names(call.tool.name):
        return False
    spec = rule.specifier
    if spec is None:
        return True
    if spec.startswith("domain:"):
        url = call.url if call.url is not None else call.subject
        return url is not None and _domain_matches(spec, url)
    if call.path is not None:
        return _path_matches(spec, call.path, call.workspace)
    if call.subject is not None:
        if spec.endswith(":*"):
            return call.subject.startswith(spec[:-2])
        return fnmatch.fnmatchcase(call.subject, spec)
    return False
