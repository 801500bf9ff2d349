"""The one shell model (`tether.guard._shell`): what the guard and the rules both read."""

from __future__ import annotations

import pytest

from tether.guard._shell import (
    OPAQUE_WORD,
    TEMP_WORD,
    ShellSyntaxError,
    ShellTooComplex,
    decode_ansi_c,
    parse_script,
)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("echo 'a b' \"c d\" e\\ f", [["echo", "a b", "c d", "e f"]]),
        ("a; b && c || d | e & f", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]),
        ("a\nb # c; d\n", [["a"], ["b"]]),
        ("find . -exec rm {} \\;", [["find", ".", "-exec", "rm", "{}", ";"]]),
        ("echo a#b '#c'", [["echo", "a#b", "#c"]]),
        ("echo $'\\x74ether' $'a\\'b'", [["echo", "tether", "a'b"]]),
        ('echo "$(ls)" `id`', [["echo", OPAQUE_WORD, OPAQUE_WORD]]),
        ("f=$(mktemp -d)", [[f"f={TEMP_WORD}"]]),
        ("echo a\\\nb", [["echo", "ab"]]),
        ("(cd x; rm y)", [["cd", "x"], ["rm", "y"]]),
    ],
)
def test_words_after_quote_removal(text: str, words: list[list[str]]) -> None:
    """Commands split at Bash's operators and lines, words as Bash passes them."""
    assert [list(c.words) for c in parse_script(text).commands] == words


def test_redirections_descriptors_and_here_documents() -> None:
    """`2>` drops its descriptor, a here-document's body is kept by its key, and the
    substitutions inside an unquoted body are collected."""
    script = parse_script("cmd 2>err >>out <in 2>&1 <<EOF\nx $(id)\nEOF\nnext")
    first, second = script.commands
    assert first.words == ("cmd",)
    ops = [(r.op, r.target) for r in first.redirects]
    assert ops[:4] == [(">", "err"), (">>", "out"), ("<", "in"), (">&", "1")]
    op, key = ops[4]
    assert op == "<<"
    assert script.heredocs[key] == f"x {OPAQUE_WORD}"
    assert script.substitutions == ("id",)
    assert second.words == ("next",)


def test_quoted_words_are_marked() -> None:
    """Brace expansion and word splitting apply only to words with no quoting."""
    [command] = parse_script("echo {a,b} '{a,b}' x\"y\"").commands
    assert command.quoted == (False, False, True, True)


def test_pipes_mark_the_command_that_reads_them() -> None:
    """`|` and `|&` feed the next command's stdin."""
    commands = parse_script("a | b |& c; d").commands
    assert [c.piped_in for c in commands] == [False, True, True, False]


@pytest.mark.parametrize(
    "text", ["echo 'open", 'echo "open', "echo $(open", "echo `open", "cat <<"]
)
def test_open_constructs_are_syntax_errors(text: str) -> None:
    """What Bash would reject is a `ShellSyntaxError`, never another exception."""
    with pytest.raises(ShellSyntaxError):
        parse_script(text)


def test_nesting_and_size_are_bounded() -> None:
    """Past the bounds the model says "too complex" instead of recursing or looping."""
    with pytest.raises(ShellTooComplex):
        parse_script("echo " + "$(" * 1000 + ")" * 1000)
    with pytest.raises(ShellTooComplex):
        parse_script("a;" * 200_001)
    with pytest.raises(ShellTooComplex):
        parse_script("echo " + "'a'" * 100_000, deadline=0.0)


@pytest.mark.parametrize(
    ("body", "value"),
    [
        ("\\x41\\102\\u00e9\\n\\t", "AB\u00e9\n\t"),
        ("\\cA\\e\\\\", "\x01\x1b\\"),
        ("\\x\\q", "\\x\\q"),
        ("\\U0001F600", "\U0001f600"),
    ],
)
def test_ansi_c_strings_decode_as_bash_decodes_them(body: str, value: str) -> None:
    """`$'...'` escapes: hex, octal, Unicode, control characters; unknown ones stay."""
    assert decode_ansi_c(body) == value
