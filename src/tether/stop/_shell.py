"""Bash command text, split the way the shell would split it, for the guard.

The job: turn one command string into simple commands (words, redirections, whether stdin
is a pipe, here-document bodies) and the code of every command substitution in it. It
knows shell syntax only; what a program does with its words is `_effects`' job, and which
paths matter is `_guard`'s.

`shlex` does quoting, escapes and word splitting. Done by hand, because `shlex` does not
know them: command and process substitution (`$(...)`, backticks, `<(...)`), `$'...'`,
here-documents, comments and newlines as separators (`shlex` would end a comment in the
middle of a word and join lines), file-descriptor prefixes (`2>`: `shlex` makes `2` a
word), quoted or escaped operator characters (`\\;` after `find -exec` must stay a word,
`shlex` returns it as a bare `;`), and splitting a run of operator characters (`;>`) into
Bash's operators. Long strings are kept out of `shlex`, which builds each word one
character at a time by concatenation (quadratic: a 1 MB word took 13 s); they travel as
short keys and are put back into the words after the split.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

import attrs

__all__ = (
    "OPAQUE_WORD",
    "PROCESS_SUBSTITUTION_WORD",
    "Redirect",
    "Script",
    "ShellSyntaxError",
    "SimpleCommand",
    "parse_script",
)

OPAQUE_WORD = "${__TETHER_OPAQUE__}"
"""Stands for the output of a command substitution or a `$'...'` string: a value only
the shell knows when the command runs."""

PROCESS_SUBSTITUTION_WORD = "/dev/fd/63"
"""Stands for `<(...)` and `>(...)`: the shell passes such a path to the command."""

_BLANKS = " \t"
_OPERATOR_CHARS = frozenset(";&|<>()")
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
_SEPARATORS = frozenset({";", "&", "&&", "||", "|", "|&", "(", ")", ";;", ";&", ";;&"})
_PIPES = frozenset({"|", "|&"})
_HEREDOC_KEY = "__TETHER_HEREDOC_{}__"
_LITERAL_RE = re.compile(r"__TETHER_LITERAL_([0-9a-f]+)__")
_FD_PREFIX_RE = re.compile(r"\d+(?=[<>])")
_LONG = 2048
"""Strings longer than this bypass `shlex` (see the module docstring)."""
_PLAIN_RUN_RE = re.compile(rf"[\w./:,@%+=~-]{{{_LONG},}}")
_STASH_RE = re.compile(r"__TETHER_STASH_(\d+)__")
_DOUBLE_QUOTE_ESCAPES = frozenset('$`"\\')


class ShellSyntaxError(ValueError):
    """The command text cannot be split (an open quote, a here-document without a name)."""


@attrs.frozen
class Redirect:
    """One redirection of a simple command."""

    op: str
    """The operator: `>`, `>>`, `&>`, `<`, `<<`, `<<<`, ..."""
    target: str
    """The word after the operator (a here-document's key for `<<`); empty if missing."""


@attrs.frozen
class SimpleCommand:
    """One simple command: its words, its redirections, and where its stdin comes from."""

    words: tuple[str, ...]
    """The words after quote removal, assignments and command name included."""
    redirects: tuple[Redirect, ...]
    """Every redirection, wherever it stood among the words."""
    piped_in: bool
    """Stdin is the output of the command before it (`|` or `|&`)."""


@attrs.frozen
class Script:
    """A command string split into simple commands, in the order they appear."""

    commands: tuple[SimpleCommand, ...]
    """The simple commands, separated by `;`, `&&`, `||`, `|`, `&`, parentheses, lines."""
    substitutions: tuple[str, ...]
    """The code inside every command and process substitution, here-documents included."""
    heredocs: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    """Here-document bodies by the key that replaced their delimiter in a `<<` redirect."""


def parse_script(text: str) -> Script:
    """Split `text` into simple commands and the code of its substitutions.

    Raises:
        ShellSyntaxError: an open quote or substitution, or a here-document without a
            delimiter.
    """
    scanner = _Scanner(text)
    clean = scanner.run()
    lexer = shlex.shlex(clean, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = (
        ""  # comments were removed by the scanner, which knows word starts
    )
    try:
        raw = list(lexer)
    except ValueError as exc:
        raise ShellSyntaxError(str(exc)) from None

    tokens: list[tuple[str, bool]] = []  # (text, is an operator)
    for token in raw:
        if token and all(ch in _OPERATOR_CHARS for ch in token):
            tokens.extend((op, True) for op in _split_operators(token))
            continue
        literal = _LITERAL_RE.fullmatch(token)
        if literal is not None:
            token = bytes.fromhex(literal.group(1)).decode()
        elif "__TETHER_STASH_" in token:
            token = _STASH_RE.sub(lambda m: scanner.stash[int(m.group(1))], token)
        tokens.append((token, False))

    commands: list[SimpleCommand] = []
    words: list[str] = []
    redirects: list[Redirect] = []
    piped_in = False
    k = 0
    while k < len(tokens):
        token, is_operator = tokens[k]
        k += 1
        if not is_operator:
            words.append(token)
        elif token in _SEPARATORS:
            if words or redirects:
                commands.append(SimpleCommand(tuple(words), tuple(redirects), piped_in))
            words, redirects = [], []
            piped_in = token in _PIPES
        else:
            target = ""
            if k < len(tokens) and not tokens[k][1]:
                target = tokens[k][0]
                k += 1
            redirects.append(Redirect(token, target))
    if words or redirects:
        commands.append(SimpleCommand(tuple(words), tuple(redirects), piped_in))
    return Script(tuple(commands), tuple(scanner.substitutions), scanner.heredocs)


def _split_operators(run: str) -> list[str]:
    out: list[str] = []
    k = 0
    while k < len(run):
        op = next(op for op in _OPERATORS if run.startswith(op, k))
        out.append(op)
        k += len(op)
    return out


class _Scanner:
    """Rewrites command text into something `shlex` splits the way Bash would."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.out: list[str] = []
        self.substitutions: list[str] = []
        self.heredocs: dict[str, str] = {}
        # Here-documents waiting for their bodies: key, delimiter, strip tabs, quoted.
        self.pending: list[tuple[str, str, bool, bool]] = []
        self.stash: list[str] = []

    def _stash(self, literal: str) -> None:
        """Emit a key that stands for `literal`, a piece of one word, past `shlex`."""
        self.out.append(f"__TETHER_STASH_{len(self.stash)}__")
        self.stash.append(literal)

    def run(self) -> str:
        text = self.text
        while self.i < len(text):
            ch = text[self.i]
            at_start = self._at_word_start()
            if at_start and ch in "'\"\\" and self._literal_operator_word():
                continue
            if ch == "'":
                end = text.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("a single quote is not closed")
                if end - self.i > _LONG:
                    self._stash(text[self.i + 1 : end])
                else:
                    self.out.append(text[self.i : end + 1])
                self.i = end + 1
            elif ch == '"':
                self._double_quoted()
            elif ch == "\\":
                if text.startswith("\\\n", self.i):  # a line continuation joins lines
                    self.i += 2
                else:
                    self.out.append(text[self.i : self.i + 2])
                    self.i += 2
            elif ch == "#" and at_start:
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end
            elif ch == "$":
                self._dollar(in_double_quotes=False)
            elif ch == "`":
                self._backtick()
            elif ch in "<>" and text.startswith("(", self.i + 1):
                inner, self.i = _parenthesised(text, self.i + 2)
                self.substitutions.append(inner)
                self.out.append(PROCESS_SUBSTITUTION_WORD)
            elif text.startswith("<<", self.i) and not text.startswith("<<<", self.i):
                self._heredoc_operator()
            elif ch == "\n":
                self.out.append(" ; ")
                self.i += 1
                self._heredoc_bodies()
            elif at_start and (fd := _FD_PREFIX_RE.match(text, self.i)) is not None:
                self.i = fd.end()  # `2>`: the descriptor number is not a word
            elif (run := _PLAIN_RUN_RE.match(text, self.i)) is not None:
                self._stash(run.group(0))
                self.i = run.end()
            else:
                self.out.append(ch)
                self.i += 1
        for key, _, _, _ in self.pending:  # a here-document cut off by the end of text
            self.heredocs[key] = ""
        self.pending.clear()
        return "".join(self.out)

    def _at_word_start(self) -> bool:
        for piece in reversed(self.out):
            if piece:
                last = piece[-1]
                return last in _BLANKS or last in _OPERATOR_CHARS
        return True

    def _literal_operator_word(self) -> bool:
        """Keep a quoted or escaped word made only of operator characters as a word."""
        text = self.text
        j = self.i
        literal: list[str] = []
        while (
            j < len(text) and text[j] not in " \t\n" and text[j] not in _OPERATOR_CHARS
        ):
            ch = text[j]
            if ch == "\\" and j + 1 < len(text) and text[j + 1] in _OPERATOR_CHARS:
                literal.append(text[j + 1])
                j += 2
            elif ch in "'\"":
                end = text.find(ch, j + 1)
                segment = text[j + 1 : end] if end > 0 else ""
                if not segment or any(c not in _OPERATOR_CHARS for c in segment):
                    return False
                literal.append(segment)
                j = end + 1
            else:
                return False
        if not literal:
            return False
        self.out.append(f" __TETHER_LITERAL_{''.join(literal).encode().hex()}__ ")
        self.i = j
        return True

    def _double_quoted(self) -> None:
        start = len(self.out)
        self._double_quoted_pieces()
        if sum(len(piece) for piece in self.out[start:]) > _LONG:
            inner = "".join(self.out[start + 1 : -1])
            del self.out[start:]
            # Quote removal as Bash does it inside double quotes.
            self._stash(re.sub(r"\\(.)", _unescape_double, inner, flags=re.DOTALL))

    def _double_quoted_pieces(self) -> None:
        text = self.text
        self.out.append('"')
        self.i += 1
        while self.i < len(text):
            ch = text[self.i]
            if ch == "\\":
                self.out.append(text[self.i : self.i + 2])
                self.i += 2
            elif ch == '"':
                self.out.append('"')
                self.i += 1
                return
            elif ch == "$":
                self._dollar(in_double_quotes=True)
            elif ch == "`":
                self._backtick()
            else:
                self.out.append(ch)
                self.i += 1
        raise ShellSyntaxError("a double quote is not closed")

    def _dollar(self, *, in_double_quotes: bool) -> None:
        text = self.text
        if text.startswith("$(", self.i):
            inner, self.i = _parenthesised(text, self.i + 2)
            self.substitutions.append(inner)
            self.out.append(OPAQUE_WORD)
        elif text.startswith("$'", self.i) and not in_double_quotes:
            j = self.i + 2
            while j < len(text) and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            if j >= len(text):
                raise ShellSyntaxError("a $'...' string is not closed")
            self.out.append(OPAQUE_WORD)
            self.i = j + 1
        else:
            self.out.append("$")
            self.i += 1

    def _backtick(self) -> None:
        inner, self.i = _backticked(self.text, self.i + 1)
        self.substitutions.append(inner)
        self.out.append(OPAQUE_WORD)

    def _heredoc_operator(self) -> None:
        text = self.text
        j = self.i + 2
        strip_tabs = text.startswith("-", j)
        if strip_tabs:
            j += 1
        while j < len(text) and text[j] in _BLANKS:
            j += 1
        delimiter: list[str] = []
        quoted = False
        while (
            j < len(text) and text[j] not in " \t\n" and text[j] not in _OPERATOR_CHARS
        ):
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
        self.out.append(f" << {key} ")
        self.i = j

    def _heredoc_bodies(self) -> None:
        text = self.text
        for key, delimiter, strip_tabs, quoted in self.pending:
            lines: list[str] = []
            while self.i < len(text):
                end = text.find("\n", self.i)
                end = len(text) if end < 0 else end
                line = text[self.i : end]
                self.i = min(end + 1, len(text))
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                lines.append(line)
            body = "\n".join(lines)
            self.heredocs[key] = body if quoted else self._expand_body(body)
        self.pending.clear()

    def _expand_body(self, body: str) -> str:
        """Collect the substitutions an unquoted here-document runs."""
        out: list[str] = []
        j = 0
        while j < len(body):
            if body[j] == "\\":
                out.append(body[j : j + 2])
                j += 2
            elif body.startswith("$(", j):
                inner, j = _parenthesised(body, j + 2)
                self.substitutions.append(inner)
                out.append(OPAQUE_WORD)
            elif body[j] == "`":
                inner, j = _backticked(body, j + 1)
                self.substitutions.append(inner)
                out.append(OPAQUE_WORD)
            else:
                out.append(body[j])
                j += 1
        return "".join(out)


def _unescape_double(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if escaped == "\n":
        return ""
    return escaped if escaped in _DOUBLE_QUOTE_ESCAPES else match.group(0)


def _parenthesised(text: str, start: int) -> tuple[str, int]:
    """Return the text up to the `)` that closes the `(` before `start`, and the end."""
    depth = 1
    j = start
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "'":
            end = text.find("'", j + 1)
            if end < 0:
                break
            j = end + 1
            continue
        if ch == '"':
            j = _after_double_quotes(text, j + 1)
            continue
        if ch == "`":
            j = _backticked(text, j + 1)[1]
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[start:j], j + 1
        j += 1
    raise ShellSyntaxError("a $( or <( substitution is not closed")


def _after_double_quotes(text: str, start: int) -> int:
    j = start
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
        elif ch == '"':
            return j + 1
        elif text.startswith("$(", j):
            j = _parenthesised(text, j + 2)[1]
        elif ch == "`":
            j = _backticked(text, j + 1)[1]
        else:
            j += 1
    raise ShellSyntaxError("a double quote is not closed")


def _backticked(text: str, start: int) -> tuple[str, int]:
    """Return the code of a backtick substitution opened before `start`, and the end."""
    inner: list[str] = []
    j = start
    while j < len(text):
        ch = text[j]
        if ch == "\\" and j + 1 < len(text):
            nxt = text[j + 1]
            inner.append(nxt if nxt in "$`\\" else ch + nxt)
            j += 2
        elif ch == "`":
            return "".join(inner), j + 1
        else:
            inner.append(ch)
            j += 1
    raise ShellSyntaxError("a backtick substitution is not closed")
