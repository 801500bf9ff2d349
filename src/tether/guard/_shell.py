"""Bash command text, split the way the shell would split it: the one shell model.

The job: turn one command string into simple commands (words after quote removal,
redirections, whether stdin is a pipe, here-document bodies) and the code of every
command substitution in it. It knows shell syntax only; what a program does with its
words is `_effects`' job (the guard) and the permission rules' (`tether.host`),
and both read commands through this module, so one command is never split two ways.

Written by hand, as one linear pass. Evaluated against it (2026-11-30, numbers in
docs/benchmarks.md, "Guard hook start-up"): `shlex`, which builds each word one
character at a time (a 4 MB word took minutes) and knows neither substitutions,
here-documents nor Bash's operators; and tree-sitter-bash, which parses in linear time
in C and knows functions and here-documents, but adds 15-25 ms and two compiled
dependencies to a hook that runs before every agent command, parses 2 MB of `a;` in
1.7 s before a node is walked, and still leaves quote removal, `$'...'` decoding and
brace expansion to us. What the guard needs of a parser is that every input gets an
answer within a bound; a scanner whose loops advance by regular-expression runs gives
that with no dependency.

Bounds: nesting deeper than `MAX_NESTING`, text past `MAX_TOKENS` tokens and a scan
still running at its deadline raise `ShellTooComplex`, which callers must treat as
"cannot tell" (the guard refuses).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping

from .._slotted import Slotted
from ._lazyre import LazyPattern

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` is not imported at run time: see `_slotted`
    from typing import Final

__all__ = (
    "MAX_NESTING",
    "MAX_TOKENS",
    "OPAQUE_WORD",
    "PROCESS_SUBSTITUTION_WORD",
    "TEMP_WORD",
    "Redirect",
    "Script",
    "ShellSyntaxError",
    "ShellTooComplex",
    "SimpleCommand",
    "decode_ansi_c",
    "parse_script",
)

OPAQUE_WORD = "${__TETHER_OPAQUE__}"
"""Stands for the output of a command substitution: a value only the shell knows when
the command runs."""

TEMP_WORD = "${__TETHER_MKTEMP__}"
"""Stands for the output of a plain `$(mktemp)` or `$(mktemp -d)`: a fresh name in the
temporary directory."""
_MKTEMP_RE = LazyPattern(
    r"\s*mktemp(?:\s+(?:-[dqu]+|--directory|--quiet|--dry-run))*\s*"
)

PROCESS_SUBSTITUTION_WORD = "/dev/fd/63"
"""Stands for `<(...)` and `>(...)`: the shell passes such a path to the command."""

MAX_NESTING = 200
"""Deepest nesting of substitutions and quotes inside them that is judged."""
MAX_TOKENS = 200_000
"""Most words and operators in one command string that are judged."""

# Longest first: a run of operator characters is split greedily, as Bash reads it.
_OPERATORS = (
    ";;&",
    "&>>",
    "<<<",
    "<<-",
    "&&",
    "||",
    ";;",
    ";&",
    "|&",
    "&>",
    ">>",
    ">&",
    ">|",
    "<&",
    "<<",
    "<>",
    "<",
    ">",
    "|",
    "&",
    ";",
    "(",
    ")",
)
_OPERATOR_RE = re.compile("|".join(re.escape(op) for op in _OPERATORS))
_SEPARATORS = frozenset({";", "&", "&&", "||", "|", "|&", "(", ")", ";;", ";&", ";;&"})
_PIPES = frozenset({"|", "|&"})
_HEREDOC_KEY = "\0heredoc-{}"
"""A here-document's key; NUL cannot be in a command Bash runs, so no word collides."""

_BLANKS_RE = re.compile(r"[ \t\r]+")
_PLAIN_RE = re.compile(r"[^ \t\r\n'\"\\$`;&|<>()]+")
_DOUBLE_PLAIN_RE = re.compile(r'[^"\\$`]+')
_PAREN_PLAIN_RE = re.compile(r"[^\\'\"`()]+")
_BACKTICK_PLAIN_RE = re.compile(r"[^\\`]+")
_BODY_PLAIN_RE = re.compile(r"[^\\$`]+")
_DELIMITER_END = frozenset(" \t\r\n;&|<>()")
_DOUBLE_QUOTE_ESCAPES = frozenset('$`"\\')
_ANSI_C_RE = LazyPattern(
    r"\\(?:([abeEfnrtv\\'\"?])|([0-7]{1,3})|x([0-9A-Fa-f]{1,2})"
    r"|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})|c(.)|(.))",
    re.DOTALL,
)
_ANSI_C_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


class ShellSyntaxError(ValueError):
    """The command text cannot be split (an open quote, a here-document without a name)."""


class ShellTooComplex(ValueError):
    """The command is nested too deep or too long to judge; treat it as "cannot tell"."""


class Redirect(Slotted):
    """One redirection of a simple command."""

    __slots__ = __match_args__ = ("op", "target")

    def __init__(self, op: str, target: str) -> None:
        self.op: Final = op
        """The operator: `>`, `>>`, `&>`, `<`, `<<`, `<<<`, ..."""
        self.target: Final = target
        """The word after the operator (a here-document's key for `<<`); empty if
        missing."""


class SimpleCommand(Slotted):
    """One simple command: its words, its redirections, and where its stdin comes from."""

    __match_args__ = ("words", "redirects", "piped_in", "quoted")
    __slots__ = ("piped_in", "quoted", "redirects", "words")

    def __init__(
        self,
        words: tuple[str, ...],
        redirects: tuple[Redirect, ...],
        piped_in: bool,
        quoted: tuple[bool, ...] = (),
    ) -> None:
        self.words: Final = words
        """The words after quote removal, assignments and command name included."""
        self.redirects: Final = redirects
        """Every redirection, wherever it stood among the words."""
        self.piped_in: Final = piped_in
        """Stdin is the output of the command before it (`|` or `|&`)."""
        self.quoted: Final = quoted
        """For each word: some part of it was quoted or escaped (no brace expansion,
        no word splitting of what it holds)."""


class Script(Slotted):
    """A command string split into simple commands, in the order they appear."""

    __match_args__ = ("commands", "substitutions", "heredocs")
    __slots__ = ("commands", "heredocs", "substitutions")

    def __init__(
        self,
        commands: tuple[SimpleCommand, ...],
        substitutions: tuple[str, ...],
        heredocs: Mapping[str, str] | None = None,
    ) -> None:
        self.commands: Final = commands
        """The simple commands, separated by `;`, `&&`, `||`, `|`, `&`, parentheses,
        lines."""
        self.substitutions: Final = substitutions
        """The code inside every command and process substitution, here-documents
        included."""
        self.heredocs: Final[Mapping[str, str]] = {} if heredocs is None else heredocs
        """Here-document bodies by the key that replaced their delimiter in a `<<`
        redirect."""

    def __hash__(self) -> int:  # the bodies (a dict) are not hashed, as before
        return hash((Script, self.commands, self.substitutions))


def parse_script(text: str, *, deadline: float | None = None) -> Script:
    """Split `text` into simple commands and the code of its substitutions.

    Args:
        text: the command string.
        deadline: a `time.monotonic()` value the scan must finish by, or None.

    Raises:
        ShellSyntaxError: an open quote or substitution, or a here-document without a
            delimiter.
        ShellTooComplex: nesting past `MAX_NESTING`, more than `MAX_TOKENS` tokens, or
            the deadline passed.
    """
    scanner = _Scanner(text, _Ticker(deadline))
    scanner.run()
    commands: list[SimpleCommand] = []
    words: list[str] = []
    quoted: list[bool] = []
    redirects: list[Redirect] = []
    piped_in = False
    tokens = scanner.tokens
    k = 0
    while k < len(tokens):
        token, kind = tokens[k]
        k += 1
        if kind != _OP:
            words.append(token)
            quoted.append(kind == _QUOTED)
        elif token in _SEPARATORS:
            if words or redirects:
                commands.append(
                    SimpleCommand(
                        tuple(words), tuple(redirects), piped_in, tuple(quoted)
                    )
                )
            words, quoted, redirects = [], [], []
            piped_in = token in _PIPES
        else:
            target = ""
            if k < len(tokens) and tokens[k][1] != _OP:
                target = tokens[k][0]
                k += 1
            redirects.append(Redirect(token, target))
    if words or redirects:
        commands.append(
            SimpleCommand(tuple(words), tuple(redirects), piped_in, tuple(quoted))
        )
    return Script(tuple(commands), tuple(scanner.substitutions), scanner.heredocs)


def decode_ansi_c(body: str) -> str:
    """The value of a `$'...'` word's body, escapes decoded as Bash decodes them."""

    def one(match: re.Match[str]) -> str:
        simple, octal, hex2, hex4, hex8, control, other = match.groups()
        if simple is not None:
            return _ANSI_C_SIMPLE[simple]
        if control is not None:
            return chr(ord(control.upper()) ^ 0x40) if control != "?" else "\x7f"
        if other is not None:
            return "\\" + other
        number = (
            int(octal, 8)
            if octal is not None
            else int(hex2 or hex4 or hex8 or "0", 16)  # one of them is set
        )
        return chr(min(number & 0xFF if octal is not None else number, 0x10FFFF))

    return _ANSI_C_RE.sub(one, body)


_WORD, _QUOTED, _OP = 0, 1, 2


class _Ticker:
    """Counts steps of a scan and raises `ShellTooComplex` once its deadline passed."""

    __slots__ = ("deadline", "steps")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.steps = 0

    def __call__(self) -> None:
        self.steps += 1
        if (
            self.deadline is not None
            and not self.steps & 1023
            and time.monotonic() > self.deadline
        ):
            raise ShellTooComplex("judging the command took longer than its bound")


class _Scanner:
    """One pass over command text: tokens, substitutions, here-documents."""

    def __init__(self, text: str, tick: Callable[[], None]) -> None:
        self.tick = tick
        self.text = text
        self.i = 0
        self.tokens: list[tuple[str, int]] = []
        self.substitutions: list[str] = []
        self.heredocs: dict[str, str] = {}
        # Here-documents waiting for their bodies: key, delimiter, strip tabs, quoted.
        self.pending: list[tuple[str, str, bool, bool]] = []
        self.word: list[str] = []
        self.started = False
        self.was_quoted = False
        self.digits_only = True

    # -- words -------------------------------------------------------------------------

    def _add(self, piece: str, *, quoted: bool) -> None:
        self.word.append(piece)
        self.started = True
        if quoted:
            self.was_quoted = True
        if quoted or not piece.isdigit():
            self.digits_only = False

    def _flush(self) -> None:
        if self.started:
            kind = _QUOTED if self.was_quoted else _WORD
            self._token("".join(self.word), kind)
        self.word = []
        self.started = self.was_quoted = False
        self.digits_only = True

    def _token(self, text: str, kind: int) -> None:
        if len(self.tokens) >= MAX_TOKENS:
            raise ShellTooComplex(f"the command has more than {MAX_TOKENS} words")
        self.tokens.append((text, kind))

    # -- the pass ----------------------------------------------------------------------

    def run(self) -> None:
        text = self.text
        n = len(text)
        while self.i < n:
            self.tick()
            ch = text[self.i]
            if (run := _PLAIN_RE.match(text, self.i)) is not None and not (
                ch == "#" and not self.started
            ):
                self._add(run.group(0), quoted=False)
                self.i = run.end()
            elif ch in " \t\r":
                self._flush()
                blanks = _BLANKS_RE.match(text, self.i)
                assert blanks is not None
                self.i = blanks.end()
            elif ch == "\n":
                self._flush()
                self._token(";", _OP)
                self.i += 1
                self._heredoc_bodies()
            elif ch == "#":  # a comment: only at the start of a word
                end = text.find("\n", self.i)
                self.i = n if end < 0 else end
            elif ch == "\\":
                if text.startswith("\\\n", self.i):  # a line continuation joins lines
                    self.i += 2
                else:
                    self._add(text[self.i + 1 : self.i + 2] or "\\", quoted=True)
                    self.i += 2
            elif ch == "'":
                end = text.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("a single quote is not closed")
                self._add(text[self.i + 1 : end], quoted=True)
                self.i = end + 1
            elif ch == '"':
                self._double_quoted()
            elif ch == "$":
                self._dollar(in_double_quotes=False)
            elif ch == "`":
                self._backtick()
            elif ch in "<>" and text.startswith("(", self.i + 1):
                inner, self.i = _parenthesised(text, self.i + 2, self.tick)
                self.substitutions.append(inner)
                self._add(PROCESS_SUBSTITUTION_WORD, quoted=False)
            else:
                self._operator()
        self._flush()
        for key, _, _, _ in self.pending:  # a here-document cut off by the end of text
            self.heredocs[key] = ""
        self.pending.clear()

    def _operator(self) -> None:
        text = self.text
        match = _OPERATOR_RE.match(text, self.i)
        assert match is not None  # every operator character starts an operator
        op = match.group(0)
        if op[0] in "<>" and self.started and self.digits_only:
            self.word, self.started = [], False  # `2>`: the descriptor is not a word
        self._flush()
        self.i = match.end()
        if op in ("<<", "<<-"):
            self._heredoc_operator(strip_tabs=op == "<<-")
        else:
            self._token(op, _OP)

    def _double_quoted(self) -> None:
        text = self.text
        n = len(text)
        self.i += 1
        self._add("", quoted=True)
        while self.i < n:
            self.tick()
            run = _DOUBLE_PLAIN_RE.match(text, self.i)
            if run is not None:
                self._add(run.group(0), quoted=True)
                self.i = run.end()
                continue
            ch = text[self.i]
            if ch == '"':
                self.i += 1
                return
            if ch == "\\":
                nxt = text[self.i + 1 : self.i + 2]
                if nxt == "\n":
                    pass  # a line continuation inside double quotes
                elif nxt in _DOUBLE_QUOTE_ESCAPES and nxt:
                    self._add(nxt, quoted=True)
                else:
                    self._add("\\" + nxt, quoted=True)
                self.i += 2
            elif ch == "$":
                self._dollar(in_double_quotes=True)
            else:  # a backtick
                self._backtick()
        raise ShellSyntaxError("a double quote is not closed")

    def _dollar(self, *, in_double_quotes: bool) -> None:
        text = self.text
        if text.startswith("$(", self.i):
            inner, self.i = _parenthesised(text, self.i + 2, self.tick)
            self.substitutions.append(inner)
            fresh = _MKTEMP_RE.fullmatch(inner) is not None
            self._add(TEMP_WORD if fresh else OPAQUE_WORD, quoted=in_double_quotes)
        elif text.startswith("$'", self.i) and not in_double_quotes:
            j = self.i + 2
            end = _ANSI_C_END.match(text, j)
            assert end is not None
            j = end.end()
            if j >= len(text) or text[j] != "'":
                raise ShellSyntaxError("a $'...' string is not closed")
            self._add(decode_ansi_c(text[self.i + 2 : j]), quoted=True)
            self.i = j + 1
        else:
            self._add("$", quoted=in_double_quotes)
            self.i += 1

    def _backtick(self) -> None:
        inner, self.i = _backticked(self.text, self.i + 1, self.tick)
        self.substitutions.append(inner)
        self._add(OPAQUE_WORD, quoted=False)

    # -- here-documents ----------------------------------------------------------------

    def _heredoc_operator(self, *, strip_tabs: bool) -> None:
        text = self.text
        j = self.i
        blanks = _BLANKS_RE.match(text, j)
        if blanks is not None:
            j = blanks.end()
        delimiter: list[str] = []
        quoted = False
        while j < len(text) and text[j] not in _DELIMITER_END:
            ch = text[j]
            if ch in "'\"":
                end = text.find(ch, j + 1)
                if end < 0:
                    raise ShellSyntaxError("a here-document delimiter is not closed")
                delimiter.append(text[j + 1 : end])
                quoted = True
                j = end + 1
            elif ch == "\\":
                delimiter.append(text[j + 1 : j + 2])
                quoted = True
                j += 2
            else:
                delimiter.append(ch)
                j += 1
        if not delimiter:
            raise ShellSyntaxError("a here-document has no delimiter")
        key = _HEREDOC_KEY.format(len(self.heredocs) + len(self.pending))
        self.pending.append((key, "".join(delimiter), strip_tabs, quoted))
        self._token("<<", _OP)
        self._token(key, _WORD)
        self.i = j

    def _heredoc_bodies(self) -> None:
        text = self.text
        for key, delimiter, strip_tabs, quoted in self.pending:
            start = self.i
            tabs = r"\t*" if strip_tabs else ""
            line = re.compile(rf"^{tabs}{re.escape(delimiter)}$", re.MULTILINE)
            found = line.search(text, start)
            if found is None:  # cut off by the end of text
                body_end = self.i = len(text)
            else:
                body_end = found.start()
                self.i = min(found.end() + 1, len(text))
            body = text[start:body_end].removesuffix("\n")
            self.heredocs[key] = body if quoted else self._expand_body(body)
        self.pending.clear()

    def _expand_body(self, body: str) -> str:
        """Collect the substitutions an unquoted here-document runs."""
        out: list[str] = []
        j = 0
        while j < len(body):
            self.tick()
            run = _BODY_PLAIN_RE.match(body, j)
            if run is not None:
                out.append(run.group(0))
                j = run.end()
            elif body[j] == "\\":
                out.append(body[j : j + 2])
                j += 2
            elif body.startswith("$(", j):
                inner, j = _parenthesised(body, j + 2, self.tick)
                self.substitutions.append(inner)
                out.append(OPAQUE_WORD)
            elif body[j] == "`":
                inner, j = _backticked(body, j + 1, self.tick)
                self.substitutions.append(inner)
                out.append(OPAQUE_WORD)
            else:
                out.append(body[j])
                j += 1
        return "".join(out)


_ANSI_C_END = LazyPattern(r"(?:[^\\']|\\.)*", re.DOTALL)


def _parenthesised(text: str, start: int, tick: Callable[[], None]) -> tuple[str, int]:
    """Return the text up to the `)` that closes the `(` before `start`, and the end.

    One loop with an explicit stack of what closes each open context (a parenthesis,
    a double quote, a backtick), so depth costs no Python recursion.

    Raises:
        ShellSyntaxError: the substitution is not closed.
        ShellTooComplex: nesting deeper than `MAX_NESTING`.
    """
    stack = [")"]
    j = start
    n = len(text)
    while j < n:
        tick()
        top = stack[-1]
        if top == ")":
            run = _PAREN_PLAIN_RE.match(text, j)
            if run is not None:
                j = run.end()
                continue
        elif top == '"':
            run = _DOUBLE_PLAIN_RE.match(text, j)
            if run is not None:
                j = run.end()
                continue
        else:
            run = _BACKTICK_PLAIN_RE.match(text, j)
            if run is not None:
                j = run.end()
                continue
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if top == ")" and ch == "'":
            end = text.find("'", j + 1)
            if end < 0:
                break
            j = end + 1
            continue
        if ch == top:
            stack.pop()
            j += 1
            if not stack:
                return text[start : j - 1], j
            continue
        opened = None
        if ch == "`":
            opened = "`"
        elif top != "`" and text.startswith("$(", j):
            opened, j = ")", j + 1
        elif top == ")" and ch == '"':
            opened = '"'
        elif top == ")" and ch == "(":
            opened = ")"
        if opened is not None:
            if len(stack) >= MAX_NESTING:
                raise ShellTooComplex(
                    f"substitutions are nested more than {MAX_NESTING} deep"
                )
            stack.append(opened)
        j += 1
    raise ShellSyntaxError("a $( or <( substitution is not closed")


def _backticked(text: str, start: int, tick: Callable[[], None]) -> tuple[str, int]:
    """Return the code of a backtick substitution opened before `start`, and the end."""
    inner: list[str] = []
    j = start
    n = len(text)
    while j < n:
        tick()
        run = _BACKTICK_PLAIN_RE.match(text, j)
        if run is not None:
            inner.append(run.group(0))
            j = run.end()
            continue
        ch = text[j]
        if ch == "\\" and j + 1 < n:
            nxt = text[j + 1]
            inner.append(nxt if nxt in "$`\\" else ch + nxt)
            j += 2
        elif ch == "`":
            return "".join(inner), j + 1
        else:
            inner.append(ch)
            j += 1
    raise ShellSyntaxError("a backtick substitution is not closed")
