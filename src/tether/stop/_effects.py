"""What a Bash command would do, as far as the guard cares: a list of effects.

The job: walk the simple commands of `_shell.parse_script` the way the shell runs them —
variables and assignments, `cd`, wrappers (`sudo`, `env`, `timeout`, `xargs`, `uv run`),
nested shells (`sh -c`, `bash -lc`, `eval`, here-documents fed to a shell), interpreters
with inline code, `tether` itself — and hand programs that change files to `_programs`.
It knows the shell and common programs, and nothing about stop paths: the guard judges
the effects. It never runs anything.

Best effort by design. Where the text cannot say (a variable set outside the command, a
substitution, a pipe into a shell), an effect carries `UNKNOWN` in its value or is
`opaque`, so that the guard can refuse in doubt.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
import time
from collections.abc import Callable, Mapping

import attrs

from ._programs import (
    LANGS,
    PROGRAMS,
    READERS,
    SHELL_KEYWORDS,
    SHELLS,
    UNKNOWN,
    WRAPPERS,
    EffectKind,
    has,
    lang_of,
    options,
    values,
    words,
)
from ._shell import (
    OPAQUE_WORD,
    TEMP_WORD,
    ShellSyntaxError,
    ShellTooComplex,
    SimpleCommand,
    parse_script,
)

__all__ = ("Effect", "command_effects")

_MAX_DEPTH = 8
_MAX_ALTERNATIVES = 64
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)", re.DOTALL)
_VARIABLE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*)|([0-9@*#?$!-]))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_MAX_POSITIONS = 16
"""Most positions after a wrapper of unknown shape that are tried as its command."""
_GLOB_CHARS = frozenset("*?[")
_STDIN_FILES = re.compile(r"/dev/stdin|/dev/fd/\d+|/proc/self/fd/\d+|/proc/\d+/fd/\d+")
_TEMP_NAME = TEMP_WORD[2:-1]
_RUNS_PROGRAMS = (
    *("subprocess", "system", "exec", "spawn", "popen", "fork", "pty", "child_process"),
    *("qx", "`", "%x", "tether.", "import tether", "from tether", "runpy", "import"),
    *("eval", "compile", "getattr", "shell", "passthru", "proc_open", "Process"),
    *(
        "Kernel",
        "IO.",
        "io.",
        "Deno",
        "Bun",
        "ctypes",
        "cffi",
        "os.",
        "$(",
        "|",
        "open",
    ),
)
"""Text in inline code that can start a program or load tether: only such code is
judged for `tether` and a verb (a `print("tether stop")` cannot run one). Substrings,
not words: `execute` counts, which only makes the guard stricter."""


def _runs_programs(code: str) -> bool:
    return any(marker in code for marker in _RUNS_PROGRAMS)


_TETHER_MODULES = words("tether tether.cli tether.__main__")
_PIPE = "pipe"


@attrs.frozen
class Effect:
    """One thing a command would do that the guard judges."""

    kind: EffectKind
    """What the effect is (see `EffectKind`)."""
    value: str
    """The path (after expansion, `UNKNOWN` where unknown), code, command or verb."""
    how: str
    """The program and form that does it, for messages: "`rm`", "redirection >"."""
    cwd: str | None
    """The directory relative paths start from; None when a `cd` made it unknown."""
    runs: bool = True
    """For `code`: it can start programs, so `tether` and a verb in it count."""


def command_effects(
    command: str,
    *,
    cwd: str,
    home: str,
    environ: Mapping[str, str],
    deadline: float | None = None,
) -> list[Effect]:
    """Return the effects of a Bash command run in `cwd` with `environ`, in order.

    Raises:
        ShellTooComplex: the command is nested too deep, too long, or its walk passed
            `deadline` (a `time.monotonic()` value): the caller cannot tell.
    """
    walker = _Walker(command, home=home, environ=environ, deadline=deadline)
    walker.script(command, _State(cwd=cwd), depth=0)
    return walker.effects


@attrs.define
class _State:
    """What the shell knows at a point of the command: directory and variables."""

    cwd: str | None
    env: dict[str, tuple[str, ...] | None] = attrs.field(factory=dict)
    """Variables set by the command itself; None: set to a value known only later."""
    aliases: dict[str, str] = attrs.field(factory=dict)
    """Aliases defined by the command itself: name to body."""
    links: dict[str, str] = attrs.field(factory=dict)
    """Symbolic links made by the command itself: absolute name to absolute target."""

    def fork(self) -> _State:
        return _State(
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


@attrs.frozen
class _Call:
    """One program invocation: its name, arguments, shell state and stdin."""

    walker: _Walker
    base: str
    args: list[str]
    state: _State
    stdin: str | None
    """Here-document text, `_PIPE` for a pipe, or None."""
    depth: int

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
        if self.stdin == _PIPE:
            self.emit("opaque", self.walker.top, f"{how} reading code from a pipe")
        elif self.stdin is not None:
            runs = _runs_programs(self.stdin)
            self.emit("code", self.stdin, f"{how} here-document", runs=runs)


class _Walker:
    """Walks a command string and collects its effects."""

    def __init__(
        self,
        top: str,
        *,
        home: str,
        environ: Mapping[str, str],
        deadline: float | None = None,
    ) -> None:
        self.top = top
        self.home = home
        self.environ = environ
        self.deadline = deadline
        self.effects: list[Effect] = []

    def check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ShellTooComplex("judging the command took longer than its bound")

    def lookup(self, name: str, state: _State) -> tuple[str, ...] | None:
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

    def path_effect(
        self, kind: EffectKind, value: str, how: str, state: _State
    ) -> None:
        """Record a path effect, seeing through links this command made."""
        if state.links and state.cwd is not None and UNKNOWN not in value:
            absolute = posixpath.normpath(posixpath.join(state.cwd, value))
            unlinked = state.unlinked(absolute)
            if unlinked != absolute:
                value = unlinked
        self.effects.append(Effect(kind=kind, value=value, how=how, cwd=state.cwd))

    def expand(self, word: str, state: _State) -> list[str]:
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
            name = plain or (braced if braced and _NAME.fullmatch(braced) else None)
            if braced and braced.startswith("!") and _NAME.fullmatch(braced[1:]):
                # `${!x}`: the variable named by the value of x.
                named = self.lookup(braced[1:], state)
                if named is not None and len(named) == 1 and _NAME.fullmatch(named[0]):
                    name = named[0]
            found = self.lookup(name, state) if name else None
            if found is None:
                alternatives = [a + literal + UNKNOWN for a in alternatives]
            else:
                alternatives = [a + literal + v for a in alternatives for v in found]
                alternatives = alternatives[:_MAX_ALTERNATIVES]
        return [a + word[pos:] for a in alternatives]

    def known(self, word: str, state: _State) -> str | None:
        """The single value of `word`, or None when it is unknown or has several."""
        found = self.expand(word, state)
        if len(found) != 1 or UNKNOWN in found[0]:
            return None
        return found[0]

    def assign(self, word: str, state: _State) -> None:
        match = _ASSIGNMENT.fullmatch(word)
        assert match is not None
        name, append, value = match.groups()
        state.env[name] = None if append else tuple(self.expand(value, state))

    def script(self, text: str, state: _State, *, depth: int) -> None:
        self.check_time()
        if depth > _MAX_DEPTH:
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
        state: _State,
        depth: int,
    ) -> None:
        stdin: str | None = _PIPE if command.piped_in else None
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
            argv.extend([word] if was_quoted else _braces(word))
        while argv and _ASSIGNMENT.fullmatch(argv[0]):
            self.assign(argv.pop(0), state)
        if argv:
            self.run(argv, state, stdin, depth)

    def run(
        self, argv: list[str], state: _State, stdin: str | None, depth: int
    ) -> None:
        self.check_time()
        if depth > _MAX_DEPTH:
            self.effects.append(
                Effect("opaque", self.top, "commands nested too deep", state.cwd)
            )
            return
        if argv[0] in state.aliases:  # an alias defined earlier in this command
            body = state.aliases.pop(argv[0])  # popped: an alias may name itself
            code = body + " " + " ".join(shlex.quote(w) for w in argv[1:])
            self.script(code, state, depth=depth + 1)
            state.aliases[argv[0]] = body
            return
        name = self.known(argv[0], state)
        if name is None:
            how = f"a program named `{argv[0].replace(OPAQUE_WORD, '$(…)')}`"
            self.effects.append(Effect("opaque", self.top, how, state.cwd))
            return
        if name.split() != [name]:  # `c="tether lift"; $c`: the value splits into words
            if name.split():
                self.run([*name.split(), *argv[1:]], state, stdin, depth + 1)
            return
        base = posixpath.basename(name) or name
        if any(ch in base for ch in _GLOB_CHARS):  # `/usr/bin/teth?r lift`
            matched = [p for p in _KNOWN if fnmatch.fnmatchcase(p, base)]
            for program in matched[:8]:
                self.run([program, *argv[1:]], state.fork(), stdin, depth + 1)
            if len(matched) > 8:
                how = f"a program named by the pattern `{base}`"
                self.effects.append(Effect("opaque", self.top, how, state.cwd))
            if matched:
                return
        call = _Call(self, base, argv[1:], state, stdin, depth)
        if base in SHELL_KEYWORDS:
            call.rest(
                [a for a in call.args if a != "-p"] if base == "time" else call.args
            )
        elif base in READERS:
            return
        elif base in PROGRAMS:
            PROGRAMS[base](call, base, call.args)
        elif base in _BUILTINS:
            _BUILTINS[base](call)
        elif base in WRAPPERS:
            _anywhere(call)
        elif base in SHELLS:
            _shell(call)
        elif (lang := lang_of(base)) is not None:
            _interpreter(call, lang)
        else:
            _unknown(call)


def _unknown(call: _Call) -> None:
    for arg in call.args:
        call.path("mention", arg, f"`{call.base}`")
        _, eq, value = arg.partition("=")
        if eq and value:
            call.path("mention", value, f"`{call.base}`")
    if call.stdin is not None and call.stdin != _PIPE:
        # A here-document or here-string fed to a program the guard does not know
        # (`ssh host <<EOF`, `git commit -F -`): judged by the paths its text names.
        call.emit("code", call.stdin, f"`{call.base}` reading its input", runs=False)
    _tether_among(call, call.args)


def _tether_among(call: _Call, args: list[str]) -> None:
    """A program given `tether` and then a verb as arguments may run `tether VERB`
    (`parallel tether ::: lift`): judged as if it did. A remote shell runs it on
    another machine, whose stop is someone else's (spec 02)."""
    if call.base in _REMOTE_SHELLS:
        return
    for i, arg in enumerate(args):
        found = call.walker.known(arg, call.state)
        if found is not None and posixpath.basename(found) == "tether":
            for later in args[i + 1 :]:
                for value in call.walker.expand(later, call.state):
                    if _verb_like(value):
                        call.emit("tether", value, f"`{call.base}` given `tether`")
            return


_REMOTE_SHELLS = words("ssh mosh rsh slogin autossh")


def _verb_like(value: str) -> bool:
    return value in ("stop", "lift", "setup") or (
        any(ch in value for ch in _GLOB_CHARS)
        and any(fnmatch.fnmatchcase(v, value) for v in ("stop", "lift", "setup"))
    )


def _anywhere(call: _Call) -> None:
    """A wrapper whose options the guard does not know: its command may start at any
    later position (`strace -f -o log tether lift`, `taskset -c 0 rm x`)."""
    _unknown(call)
    if call.base == "parallel" and ":::" in call.args:
        cut = call.args.index(":::")
        command = [a for a in call.args[:cut] if not a.startswith("-")]
        for arg in call.args[cut + 1 : cut + 1 + _MAX_POSITIONS]:
            if command:
                call.run([*command, arg])
    for i, arg in enumerate(call.args[:_MAX_POSITIONS]):
        if not arg.startswith("-") and "=" not in arg:
            call.run(call.args[i:])


# -- wrappers: programs that run the rest of their words -----------------------------


def _wrapper(with_value: str) -> Callable[[_Call], None]:
    table = words(with_value)

    def handle(call: _Call) -> None:
        call.rest(options(call.args, table, permute=False)[1])

    return handle


_SUDO_OPTIONS = words(
    "-u -g -h -p -C -D -r -t -U -T -R --user --group --host --prompt --chdir --role "
    "--type --other-user --close-from --command-timeout --chroot"
)


def _sudo(call: _Call) -> None:
    found, rest = options(call.args, _SUDO_OPTIONS, permute=False)
    if call.base == "sudoedit" or has(found, "-e", "--edit"):
        for word in rest:
            call.path("write", word, f"`{call.base} -e`")
        return
    state = call.state.fork()
    while rest and _ASSIGNMENT.fullmatch(rest[0]):
        call.walker.assign(rest.pop(0), state)
    if rest:
        call.walker.run(rest, state, call.stdin, call.depth)
    elif has(found, "-s", "-i", "--shell", "--login"):
        _shell(attrs.evolve(call, base="sh", args=[]))


def _env(call: _Call) -> None:
    table = words("-u --unset -C --chdir -S --split-string")
    found, rest = options(call.args, table, permute=False)
    state = call.state.fork()
    for directory in values(found, "-C", "--chdir"):
        state.cwd = _directory(call.walker, directory, state)
    for split in values(found, "-S", "--split-string"):
        try:
            rest = shlex.split(split) + rest
        except ValueError:
            call.emit("unparsed", split, "an `env -S` string")
    if rest[:1] == ["-"]:
        rest = rest[1:]
    while rest and _ASSIGNMENT.fullmatch(rest[0]):
        call.walker.assign(rest.pop(0), state)
    if rest:
        call.walker.run(rest, state, call.stdin, call.depth)


def _command(call: _Call) -> None:
    found, rest = options(call.args, frozenset(), permute=False)
    if not has(found, "-v", "-V"):
        call.rest(rest)


def _timeout(call: _Call) -> None:
    _, rest = options(call.args, words("-s --signal -k --kill-after"), permute=False)
    call.rest(rest[1:])


_XARGS_OPTIONS = words(
    "-a -d -E -I -L -n -P -s --arg-file --delimiter --eof --replace --max-lines "
    "--max-args --max-procs --max-chars --process-slot-var"
)


def _xargs(call: _Call) -> None:
    found, rest = options(call.args, _XARGS_OPTIONS, permute=False)
    rest = rest or ["echo"]
    replace = values(found, "-I", "--replace") + (["{}"] if has(found, "-i") else [])
    # Names read from stdin are unknown here. The guard refuses such a command only
    # when its text names a protected path (`opaque`), so `find . | xargs rm` in a
    # workspace stays allowed.
    if posixpath.basename(rest[0]) not in READERS:
        call.emit(
            "opaque", call.walker.top, f"`xargs {rest[0]}` on names from its input"
        )
    if replace:
        rest = [rest[0]] + [w.replace(replace[-1], "xargs-input") for w in rest[1:]]
    call.run(rest)


def _watch(call: _Call) -> None:
    _, rest = options(call.args, words("-n --interval -d"), permute=False)
    if rest:
        call.script(" ".join(rest))


def _su(call: _Call) -> None:
    table = words("-c --command -s --shell -u --user -g")
    found, rest = options(call.args, table, permute=True)
    for code in values(found, "-c", "--command"):
        call.script(code)
    if call.base == "runuser" and has(found, "-u", "--user"):
        call.rest(rest)


def _flock(call: _Call) -> None:
    table = words("-w --timeout -E --conflict-exit-code -c --command")
    found, rest = options(call.args, table, permute=False)
    if rest:
        call.path("write", rest[0], "`flock` (lock file)")
    for code in values(found, "-c", "--command"):
        call.script(code)
    call.rest(rest[1:])


_RUNNER_OPTIONS = words(
    "--with --from --python -p --project --directory --package --extra --group "
    "--env-file --spec --index --env -e"
)


def _runner(call: _Call) -> None:
    """`uv run`, `poetry run`, `pipx run`, `hatch run`, `pdm run`, `uvx`."""
    args = call.args if call.base != "uvx" else ["run", *call.args]
    if args[:1] not in (["run"], ["exec"]):
        _unknown(call)
        return
    call.rest(options(args[1:], _RUNNER_OPTIONS, permute=False)[1])


# -- shells, interpreters and tether ---------------------------------------------------


def _shell(call: _Call) -> None:
    args = call.args
    code_next = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-", "--"):
            i += 1
            break
        if arg in ("--rcfile", "--init-file", "-o", "+o", "-O", "+O"):
            i += 2
            continue
        if len(arg) < 2 or arg[0] not in "-+":
            break
        code_next = code_next or (arg[0] == "-" and arg[1] != "-" and "c" in arg)
        i += 1
    rest = args[i:]
    if code_next:
        if rest:
            call.script(rest[0])
    elif not rest or _STDIN_FILES.fullmatch(rest[0]):  # reads commands on stdin
        if call.stdin == _PIPE:
            call.stdin_code(f"`{call.base}`")
        elif call.stdin is not None:
            call.script(call.stdin)
        elif rest:  # `bash <(...)`: code the shell makes while the command runs
            call.emit("opaque", call.walker.top, f"`{call.base}` of generated code")


def _interpreter(call: _Call, family: str) -> None:
    lang = LANGS[family]
    args = call.args
    codes: list[str] = []
    inplace = False
    module: str | None = None
    i = 0
    while i < len(args) and module is None:
        if family == "python" and codes:
            break  # `python -c code args`: the rest is the program's argv
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if len(arg) < 2 or not arg.startswith("-"):
            break
        i += 1
        key, eq, attached = arg.partition("=")
        if arg.lower() in lang.code or (eq and key in lang.code):
            if eq:
                codes.append(attached)
            elif i < len(args):
                codes.append(args[i])
                i += 1
            continue
        if arg.startswith("--"):
            inplace = inplace or key in lang.inplace
            if not eq and key in lang.value | lang.inplace:
                i += 1
            continue
        pos = 1
        while pos < len(arg):
            flag, tail = "-" + arg[pos], arg[pos + 1 :]
            pos += 1
            if flag in ("-l", "-0") and family == "perl":
                while pos < len(arg) and arg[pos] in "0123456789abcdefABCDEFx":
                    pos += 1  # an optional octal or hex value, then more flags
                continue
            if flag in lang.inplace:
                if family != "awk":
                    inplace = True
                elif tail:
                    inplace = inplace or tail == "inplace"
                elif i < len(args):  # gawk -i inplace
                    inplace = inplace or args[i] == "inplace"
                    i += 1
                break
            if flag in lang.code or flag in lang.value:
                value = tail
                if not tail and flag not in lang.attached and i < len(args):
                    value = args[i]
                    i += 1
                if flag in lang.code:
                    codes.append(value)
                elif family == "python" and flag == "-m":
                    module = value
                break
    rest = args[i:]
    how, edits = f"`{call.base}`", f"`{call.base} -i`"
    if module is not None:
        if module in _TETHER_MODULES:
            _tether(attrs.evolve(call, base="tether", args=rest))
        return
    if not codes and lang.program_first and rest:
        codes.append(rest.pop(0))
    if not codes:
        if not rest or rest[0] == "-" or _STDIN_FILES.fullmatch(rest[0]):
            call.stdin_code(how)
            if call.stdin is None and rest:
                call.emit("opaque", call.walker.top, f"{how} of generated code")
        return  # else it runs a script file: what that does is not on this line
    for word in rest:
        call.path("write" if inplace else "mention", word, edits if inplace else how)
    for code in codes:
        # The arguments go with the code: `python -c '...' stop` can pass a verb.
        runs = _runs_programs(code)
        call.emit("code", "\n".join([code, *rest]), f"inline {how} code", runs=runs)


def _tether(call: _Call) -> None:
    _, rest = options(call.args, frozenset(), permute=False)
    if rest:
        for value in call.walker.expand(rest[0], call.state):
            verb = (value.split() or [""])[0]  # an unquoted value splits into words
            if any(ch in verb for ch in _GLOB_CHARS):  # `tether l?ft` runs `lift`
                verb = next(
                    (
                        v
                        for v in ("stop", "lift", "setup")
                        if fnmatch.fnmatchcase(v, verb)
                    ),
                    verb,
                )
            call.emit("tether", verb, f"`{call.base}`")


def _eval(call: _Call) -> None:
    call.script(" ".join(call.args), same_shell=True)


def _alias(call: _Call) -> None:
    for arg in call.args:
        name, eq, body = arg.partition("=")
        if eq:
            call.script(body)  # judged where it is defined, and again where used
            call.state.aliases[name] = body


def _function(call: _Call) -> None:
    """`function f { ...; }`: the body is judged as if it ran here."""
    rest = call.args[1:]
    if rest[:1] == ["()"]:
        rest = rest[1:]
    call.rest(rest)


def _source(call: _Call) -> None:
    """`source FILE` runs a file; from stdin or a process substitution it runs code
    the command text does not show."""
    if call.args and _STDIN_FILES.fullmatch(call.args[0]):
        call.stdin_code(f"`{call.base}`")
        if call.stdin is None:
            call.emit("opaque", call.walker.top, f"`{call.base}` of generated code")


def _scheduler(call: _Call) -> None:
    """`at`, `batch`, `crontab`, `systemd-run`: code that runs later, unseen."""
    _unknown(call)
    code = call.walker.top if call.stdin in (_PIPE, None) else call.stdin
    call.emit("opaque", code or "", f"`{call.base}` scheduling code")


def _git(call: _Call) -> None:
    """`git -c alias.x='!cmd'` and other configured commands run shell code."""
    found, rest = options(
        call.args, words("-c -C --git-dir --work-tree"), permute=False
    )
    for setting in values(found, "-c"):
        key, _, value = setting.partition("=")
        key = key.lower()
        if key.startswith("alias.") and value.startswith("!"):
            call.script(value[1:])
        elif key.rpartition(".")[2] in _GIT_COMMAND_KEYS:
            call.script(value)
    state = call.state.fork()
    for directory in values(found, "-C", "--git-dir", "--work-tree"):
        call.path("mention", directory, "`git`")
        state.cwd = _directory(call.walker, directory, state)
    _unknown(attrs.evolve(call, state=state, args=rest))


_GIT_COMMAND_KEYS = words(
    "pager editor sshcommand fsmonitor askpass external textconv command helper "
    "hookspath sequenceeditor"
)


def _trap(call: _Call) -> None:
    if call.args and not call.args[0].startswith("-"):
        call.script(call.args[0])


# -- shell state -------------------------------------------------------------------------


def _directory(walker: _Walker, word: str, state: _State) -> str | None:
    value = walker.known(word, state)
    if value is None or any(ch in value for ch in "*?["):
        return None
    if not value.startswith("/"):
        if state.cwd is None:
            return None
        value = posixpath.join(state.cwd, value)
    return state.unlinked(posixpath.normpath(value))


def _cd(call: _Call) -> None:
    _, rest = options(call.args, frozenset(), permute=False)
    cdpath = call.walker.lookup("CDPATH", call.state)
    if call.base == "popd" or rest[:1] == ["-"]:
        call.state.cwd = None
    elif (
        rest
        and cdpath != ("",)
        and cdpath is not None
        and not rest[0].startswith(("/", "./", "../"))
        and rest[0] not in (".", "..")
    ):
        call.state.cwd = None  # `CDPATH` may send a relative `cd` anywhere
    else:
        target = rest[0] if rest else "~"
        call.state.cwd = _directory(call.walker, target, call.state)


def _declare(call: _Call) -> None:
    for arg in call.args:
        if _ASSIGNMENT.fullmatch(arg):
            call.walker.assign(arg, call.state)


def _read(call: _Call) -> None:
    table = words("-a -d -i -n -N -p -t -u -C -c -s")
    found, rest = options(call.args, table, permute=True)
    for name in rest + values(found, "-a"):
        if _NAME.fullmatch(name):
            call.state.env[name] = None


def _for(call: _Call) -> None:
    args = call.args
    if not args or not _NAME.fullmatch(args[0]):
        return
    if args[1:2] != ["in"]:
        call.state.env[args[0]] = None
        return
    found: list[str] = []
    for word in args[2:]:
        found.extend(call.walker.expand(word, call.state))
    call.state.env[args[0]] = tuple(found[:_MAX_ALTERNATIVES]) or ("",)


def _ignore(call: _Call) -> None:
    return


_BUILTINS: dict[str, Callable[[_Call], None]] = {
    "sudo": _sudo,
    "doas": _sudo,
    "sudoedit": _sudo,
    "env": _env,
    "nohup": _wrapper(""),
    "builtin": _wrapper(""),
    "unbuffer": _wrapper(""),
    "busybox": _wrapper(""),
    "setsid": _wrapper(""),
    "nice": _wrapper("-n --adjustment"),
    "ionice": _wrapper("-c -n --class --classdata"),
    "stdbuf": _wrapper("-i -o -e"),
    "exec": _wrapper("-a"),
    "command": _command,
    "timeout": _timeout,
    "xargs": _xargs,
    "watch": _watch,
    "su": _su,
    "runuser": _su,
    "flock": _flock,
    "uv": _runner,
    "uvx": _runner,
    "poetry": _runner,
    "pipx": _runner,
    "hatch": _runner,
    "pdm": _runner,
    "tether": _tether,
    "eval": _eval,
    "alias": _alias,
    "trap": _trap,
    "cd": _cd,
    "pushd": _cd,
    "popd": _cd,
    "export": _declare,
    "declare": _declare,
    "typeset": _declare,
    "local": _declare,
    "readonly": _declare,
    "read": _read,
    "mapfile": _read,
    "readarray": _read,
    "for": _for,
    "select": _for,
    "case": _ignore,
    "function": _function,
    "source": _source,
    ".": _source,
    "at": _scheduler,
    "batch": _scheduler,
    "crontab": _scheduler,
    "systemd-run": _scheduler,
    "git": _git,
}
"""Shell builtins and wrappers, by program name."""

_KNOWN = sorted(
    {*_BUILTINS, *PROGRAMS, *SHELLS, *LANGS, *WRAPPERS, "python3", "tether", "busybox"}
)
"""Program names a pattern in the command position is matched against."""


def _braces(word: str) -> list[str]:
    """Bash's brace expansion of one unquoted word (`{a,b}`, `{1..3}`), capped.

    Past `_MAX_ALTERNATIVES` results the braces become `UNKNOWN`: a value the guard
    cannot tell, so it judges it as such.
    """
    if "{" not in word or ("," not in word and ".." not in word):
        return [word]
    out = [word]
    for _ in range(_MAX_ALTERNATIVES):
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
        if len(expanded) > _MAX_ALTERNATIVES:
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
        if abs(b - a) >= _MAX_ALTERNATIVES:
            return [UNKNOWN]
        return [str(k) for k in range(a, b + step, step)]
    if first.isalpha() and last.isalpha():
        a, b = ord(first), ord(last)
        step = 1 if b >= a else -1
        return [chr(k) for k in range(a, b + step, step)][:_MAX_ALTERNATIVES]
    return None
