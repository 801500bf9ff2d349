"""The walk of a Bash command: shell state, expansions, and the order things run in.

The job: walk the simple commands of `_shell.parse_script` the way the shell runs them —
variables and assignments (with `~`, `${!name}`, `$(mktemp)`), brace expansion, word
splitting of a command name, aliases and links the command itself makes, nested
scripts and substitutions, and the bounds (depth, alternatives, a deadline) — and hand
each program invocation to a `dispatch` function, which `_effects` gives: this module
knows the shell, not programs.
"""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Callable, Mapping

from .._slotted import Slotted
from ._lazyre import LazyPattern
from ._programs import UNKNOWN, words
from ._shell import (
    OPAQUE_WORD,
    TEMP_WORD,
    ShellSyntaxError,
    ShellTooComplex,
    SimpleCommand,
    parse_script,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` is not imported at run time: see `_slotted`
    from typing import Final

    from ._programs import EffectKind

__all__ = (
    "ASSIGNMENT",
    "GLOB_CHARS",
    "MAX_ALTERNATIVES",
    "NAME",
    "PIPE",
    "STDIN_FILES",
    "Call",
    "Effect",
    "State",
    "Walker",
    "braces",
    "runs_programs",
)

MAX_DEPTH = 8
MAX_ALTERNATIVES = 64
ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)", re.DOTALL)
_VARIABLE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*)|([0-9@*#?$!-]))")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
GLOB_CHARS = frozenset("*?[")
STDIN_FILES = LazyPattern(r"/dev/stdin|/dev/fd/\d+|/proc/self/fd/\d+|/proc/\d+/fd/\d+")
_TEMP_NAME = TEMP_WORD[2:-1]
_RUNS_PROGRAMS = words(
    "subprocess system exec spawn popen fork pty child_process qx ` %x tether. "
    "__import__ importlib runpy eval compile getattr shell passthru proc_open Process "
    "Kernel Deno Bun ctypes cffi os. $( |"
)
"""Text in inline code that can start a program or load tether: only such code is
judged for `tether` and a verb (a `print("tether stop")` cannot run one). Substrings,
not words: `execute` counts, which only makes the guard stricter."""


def runs_programs(code: str, check_time: Callable[[], None]) -> bool:
    """Whether inline code can start a program or load tether (see `_RUNS_PROGRAMS`).

    `check_time` (`Walker.check_time`) is called before each marker's search: over
    megabytes of code the searches together take longer than the guard has.
    """
    for marker in _RUNS_PROGRAMS:
        check_time()
        if marker in code:
            return True
    return False


PIPE = "pipe"
_DECODERS = LazyPattern(
    r"\b(?:base64|base32|basenc|xxd|uudecode|openssl|gunzip|zcat|bzcat|xzcat|zstdcat"
    r"|rev|tr)\b|\b(?:gzip|bzip2|xz|zstd)\s+-\w*d|\b(?:printf|echo\s+-\w*e)\b[^|]*\\"
)
"""A pipeline that decodes or unescapes text: what it feeds a shell is hidden."""


class Effect(Slotted):
    """One thing a command would do that the guard judges."""

    __match_args__ = ("kind", "value", "how", "cwd", "runs")
    __slots__ = ("cwd", "how", "kind", "runs", "value")

    def __init__(
        self, kind: EffectKind, value: str, how: str, cwd: str | None, runs: bool = True
    ) -> None:
        self.kind: Final = kind
        """What the effect is (see `EffectKind`)."""
        self.value: Final = value
        """The path (after expansion, `UNKNOWN` where unknown), code, command or verb."""
        self.how: Final = how
        """The program and form that does it, for messages: "`rm`", "redirection >"."""
        self.cwd: Final = cwd
        """The directory relative paths start from; None when a `cd` made it unknown."""
        self.runs: Final = runs
        """For `code`: it can start programs, so `tether` and a verb in it count."""


class State(Slotted):
    """What the shell knows at a point of the command: directory and variables."""

    __match_args__ = ("cwd", "env", "aliases", "links")
    __slots__ = ("aliases", "cwd", "env", "links")
    __hash__ = None  # type: ignore[assignment]  # mutable, as an attrs.define class

    def __init__(
        self,
        cwd: str | None,
        env: dict[str, tuple[str, ...] | None] | None = None,
        aliases: dict[str, str] | None = None,
        links: dict[str, str] | None = None,
    ) -> None:
        self.cwd = cwd
        self.env = {} if env is None else env
        """Variables set by the command itself; None: set to a value known only later."""
        self.aliases = {} if aliases is None else aliases
        """Aliases defined by the command itself: name to body."""
        self.links = {} if links is None else links
        """Symbolic links made by the command itself: absolute name to absolute target."""

    def fork(self) -> State:
        return State(
            cwd=self.cwd,
            env=dict(self.env),
            aliases=dict(self.aliases),
            links=dict(self.links),
        )

    def unlinked(self, path: str) -> str:
        """`path` with links this command made replaced by their targets."""
        for _ in range(8):  # a chain of links made in one command
            for name, target in self.links.items():
                if path == name or path.startswith(name.rstrip("/") + "/"):
                    path = target + path[len(name) :]
                    break
            else:
                return path
        return path


class Call(Slotted):
    """One program invocation: its name, arguments, shell state and stdin."""

    __match_args__ = ("walker", "base", "args", "state", "stdin", "depth")
    __slots__ = ("args", "base", "depth", "state", "stdin", "walker")

    def __init__(
        self,
        walker: Walker,
        base: str,
        args: list[str],
        state: State,
        stdin: str | None,
        depth: int,
    ) -> None:
        self.walker: Final = walker
        self.base: Final = base
        self.args: Final = args
        self.state: Final = state
        self.stdin: Final = stdin
        """Here-document text, `PIPE` for a pipe, or None."""
        self.depth: Final = depth

    def but(
        self,
        *,
        base: str | None = None,
        args: list[str] | None = None,
        state: State | None = None,
    ) -> Call:
        """This call with another program name, arguments or state."""
        return Call(
            self.walker,
            self.base if base is None else base,
            self.args if args is None else args,
            self.state if state is None else state,
            self.stdin,
            self.depth,
        )

    def path(self, kind: EffectKind, word: str, how: str) -> None:
        for value in self.walker.expand(word, self.state):
            self.walker.path_effect(kind, value, how, self.state)

    def emit(
        self, kind: EffectKind, value: str, how: str, *, runs: bool = True
    ) -> None:
        effect = Effect(kind=kind, value=value, how=how, cwd=self.state.cwd, runs=runs)
        self.walker.effects.append(effect)

    def link(self, target: str, name: str) -> None:
        state = self.state
        name_value = self.walker.known(name, state)
        target_value = self.walker.known(target, state)
        if name_value is None or target_value is None or state.cwd is None:
            return
        absolute = posixpath.normpath(posixpath.join(state.cwd, name_value))
        # A relative target is relative to the link's own folder.
        folder = posixpath.dirname(absolute)
        resolved = posixpath.normpath(posixpath.join(folder, target_value))
        state.links[absolute] = state.unlinked(resolved)

    def run(self, command: list[str], *, stdin: str | None = None) -> None:
        self.walker.run(command, self.state.fork(), stdin, self.depth + 1)

    def script(self, code: str, *, same_shell: bool = False) -> None:
        state = self.state if same_shell else self.state.fork()
        self.walker.script(code, state, depth=self.depth + 1)

    def rest(self, command: list[str]) -> None:
        """Run the rest of the words in this call's shell (wrappers)."""
        if command:
            self.walker.run(command, self.state, self.stdin, self.depth)

    def stdin_code(self, how: str) -> None:
        if self.stdin == PIPE:
            if _DECODERS.search(self.walker.top):
                self.emit(
                    "hidden", self.walker.top, f"{how} runs code decoded at run time"
                )
            self.emit("opaque", self.walker.top, f"{how} reading code from a pipe")
        elif self.stdin is not None:
            runs = runs_programs(self.stdin, self.walker.check_time)
            self.emit("code", self.stdin, f"{how} here-document", runs=runs)


class Walker:
    """Walks a command string and collects its effects."""

    def __init__(
        self,
        top: str,
        *,
        home: str,
        environ: Mapping[str, str],
        deadline: float | None = None,
        dispatch: Callable[[Call], None],
    ) -> None:
        self.top = top
        self.dispatch = dispatch
        """Runs one program invocation (`_effects` knows the programs)."""
        self.home = home
        self.environ = environ
        self.deadline = deadline
        self.effects: list[Effect] = []

    def check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ShellTooComplex("judging the command took longer than its bound")

    def lookup(self, name: str, state: State) -> tuple[str, ...] | None:
        if name in state.env:
            return state.env[name]
        if name == "HOME":
            return (self.home,)
        if name == "PWD":
            return None if state.cwd is None else (state.cwd,)
        if name == _TEMP_NAME:
            tmpdir = self.environ.get("TMPDIR") or "/tmp"
            return (posixpath.normpath(tmpdir) + "/tmp." + UNKNOWN,)
        value = self.environ.get(name)
        return None if value is None else (value,)

    def path_effect(self, kind: EffectKind, value: str, how: str, state: State) -> None:
        """Record a path effect, seeing through links this command made."""
        if state.links and state.cwd is not None and UNKNOWN not in value:
            absolute = posixpath.normpath(posixpath.join(state.cwd, value))
            unlinked = state.unlinked(absolute)
            if unlinked != absolute:
                value = unlinked
        self.effects.append(Effect(kind=kind, value=value, how=how, cwd=state.cwd))

    def expand(self, word: str, state: State) -> list[str]:
        """Expand `~` and variables; each alternative marks unknown parts `UNKNOWN`."""
        if word == "~" or word.startswith("~/"):
            homes = self.lookup("HOME", state)  # `HOME=/x` rebinds `~`
            home = homes[0] if homes is not None and len(homes) == 1 else UNKNOWN
            word = home + word[1:]
        elif word.startswith("~"):
            head, sep, tail = word.partition("/")
            expanded = posixpath.expanduser(head)
            word = (expanded if expanded != head else UNKNOWN) + sep + tail
        alternatives = [""]
        pos = 0
        for count, match in enumerate(_VARIABLE.finditer(word)):
            if not count & 1023:
                self.check_time()
            literal = word[pos : match.start()]
            pos = match.end()
            braced, plain = match.group(1), match.group(2)
            name = plain or (braced if braced and NAME.fullmatch(braced) else None)
            if braced and braced.startswith("!") and NAME.fullmatch(braced[1:]):
                # `${!x}`: the variable named by the value of x.
                named = self.lookup(braced[1:], state)
                if named is not None and len(named) == 1 and NAME.fullmatch(named[0]):
                    name = named[0]
            found = self.lookup(name, state) if name else None
            if found is None:
                alternatives = [a + literal + UNKNOWN for a in alternatives]
            else:
                alternatives = [a + literal + v for a in alternatives for v in found]
                alternatives = alternatives[:MAX_ALTERNATIVES]
        return [a + word[pos:] for a in alternatives]

    def known(self, word: str, state: State) -> str | None:
        """The single value of `word`, or None when it is unknown or has several."""
        found = self.expand(word, state)
        if len(found) != 1 or UNKNOWN in found[0]:
            return None
        return found[0]

    def assign(self, word: str, state: State) -> None:
        match = ASSIGNMENT.fullmatch(word)
        assert match is not None
        name, append, value = match.groups()
        state.env[name] = None if append else tuple(self.expand(value, state))

    def script(self, text: str, state: State, *, depth: int) -> None:
        self.check_time()
        if depth > MAX_DEPTH:
            self.effects.append(
                Effect("opaque", self.top, "shells nested too deep", state.cwd)
            )
            return
        try:
            parsed = parse_script(text, deadline=self.deadline)
        except ShellSyntaxError as exc:
            self.effects.append(Effect("unparsed", text, str(exc), state.cwd))
            return
        for substitution in parsed.substitutions:
            self.script(substitution, state.fork(), depth=depth + 1)
        for command in parsed.commands:
            self.simple(command, parsed.heredocs, state, depth)

    def simple(
        self,
        command: SimpleCommand,
        heredocs: Mapping[str, str],
        state: State,
        depth: int,
    ) -> None:
        stdin: str | None = PIPE if command.piped_in else None
        for redirect in command.redirects:
            op, target = redirect.op, redirect.target
            if op in _WRITE_REDIRECTS:
                if op == ">&" and (target.isdigit() or target == "-"):
                    continue  # duplicates a descriptor, names no file
                for value in self.expand(target, state):
                    self.effects.append(
                        Effect("write", value, f"redirection {op}", state.cwd)
                    )
            elif op in ("<<", "<<-"):
                stdin = heredocs.get(target, "")
            elif op == "<<<":
                stdin = target
        argv: list[str] = []
        quoted = command.quoted or (False,) * len(command.words)
        for word, was_quoted in zip(command.words, quoted, strict=True):
            argv.extend([word] if was_quoted else braces(word))
        while argv and ASSIGNMENT.fullmatch(argv[0]):
            self.assign(argv.pop(0), state)
        if argv:
            self.run(argv, state, stdin, depth)

    def run(self, argv: list[str], state: State, stdin: str | None, depth: int) -> None:
        self.check_time()
        if depth > MAX_DEPTH:
            self.effects.append(
                Effect("opaque", self.top, "commands nested too deep", state.cwd)
            )
            return
        if argv[0] in state.aliases:  # an alias defined earlier in this command
            body = state.aliases.pop(argv[0])  # popped: an alias may name itself
            import shlex  # only for an alias: the per-call hook spares the import

            code = body + " " + " ".join(shlex.quote(w) for w in argv[1:])
            self.script(code, state, depth=depth + 1)
            state.aliases[argv[0]] = body
            return
        name = self.known(argv[0], state)
        if name is None:
            how = f"a program named `{argv[0].replace(OPAQUE_WORD, '$(…)')}`"
            self.effects.append(Effect("opaque", self.top, how, state.cwd))
            for word in argv[1:2]:  # `$(echo dGV0aGVy | base64 -d) lift`
                for value in self.expand(word, state):
                    if value in ("stop", "lift", "setup"):
                        verb_how = f"{how}, known only at run time,"
                        self.effects.append(
                            Effect("tether", value, verb_how, state.cwd)
                        )
            return
        if name.split() != [name]:  # `c="tether lift"; $c`: the value splits into words
            if name.split():
                self.run([*name.split(), *argv[1:]], state, stdin, depth + 1)
            return
        base = posixpath.basename(name) or name
        self.dispatch(Call(self, base, argv[1:], state, stdin, depth))


def braces(word: str) -> list[str]:
    """Bash's brace expansion of one unquoted word (`{a,b}`, `{1..3}`), capped.

    Past `MAX_ALTERNATIVES` results the braces become `UNKNOWN`: a value the guard
    cannot tell, so it judges it as such.
    """
    if "{" not in word or ("," not in word and ".." not in word):
        return [word]
    out = [word]
    for _ in range(MAX_ALTERNATIVES):
        done = True
        expanded: list[str] = []
        for item in out:
            parts = _first_brace(item)
            if parts is None:
                expanded.append(item)
                continue
            done = False
            head, choices, tail = parts
            expanded.extend(head + choice + tail for choice in choices)
        if len(expanded) > MAX_ALTERNATIVES:
            return [re.sub(r"\{[^{}]*\}", UNKNOWN, word)]
        out = expanded
        if done:
            break
    return out


def _first_brace(word: str) -> tuple[str, list[str], str] | None:
    """The first `{...}` with a top-level comma or a `..` range, split; else None."""
    start = 0
    while True:
        open_at = word.find("{", start)
        if open_at < 0:
            return None
        start = open_at + 1
        if open_at > 0 and word[open_at - 1] == "$":
            continue  # `${name}` is a parameter, not a brace expansion
        depth, pieces, last = 0, [], open_at + 1
        for j in range(open_at + 1, len(word)):
            ch = word[j]
            if ch == "{":
                depth += 1
            elif ch == "}" and depth:
                depth -= 1
            elif ch == "," and not depth:
                pieces.append(word[last:j])
                last = j + 1
            elif ch == "}":
                pieces.append(word[last:j])
                head, tail = word[:open_at], word[j + 1 :]
                if len(pieces) > 1:
                    return head, pieces, tail
                sequence = _sequence(pieces[0])
                if sequence is not None:
                    return head, sequence, tail
                break
    return None


def _sequence(body: str) -> list[str] | None:
    match = re.fullmatch(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.-?\d+)?", body)
    if match is None:
        return None
    first, last = match.groups()
    if first.lstrip("-").isdigit() and last.lstrip("-").isdigit():
        a, b = int(first), int(last)
        step = 1 if b >= a else -1
        if abs(b - a) >= MAX_ALTERNATIVES:
            return [UNKNOWN]
        return [str(k) for k in range(a, b + step, step)]
    if first.isalpha() and last.isalpha():
        a, b = ord(first), ord(last)
        step = 1 if b >= a else -1
        return [chr(k) for k in range(a, b + step, step)][:MAX_ALTERNATIVES]
    return None
