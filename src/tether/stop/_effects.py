"""What a Bash command would do, as far as the guard cares: the effects of its programs.

The job: walk the simple commands of `_shell.parse_script` the way the shell runs them
(variables, `cd`, wrappers such as `sudo` and `env`, nested `sh -c`, `eval`, `find -exec`,
`xargs`) and report, for each program, the paths it writes or removes, the inline code it
runs, the `tether` subcommand it invokes, and the arguments of programs whose effect is
unknown. It knows the shell and common programs, and nothing about stop paths: the guard
judges the effects. It never runs anything.

Best effort by design. Where the text cannot say (a variable set outside the command, a
substitution, a pipe into a shell), an effect carries `UNKNOWN` in its value or is
`opaque`, so that the guard can refuse in doubt.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import attrs

from ._shell import OPAQUE_WORD, ShellSyntaxError, SimpleCommand, parse_script

__all__ = ("UNKNOWN", "Effect", "EffectKind", "command_effects")

UNKNOWN = "\0"
"""Marks, inside an expanded word, a part only the shell knows when the command runs."""

EffectKind = Literal["write", "remove", "mention", "code", "opaque", "tether", "unparsed"]
"""What an effect is.

- `write`: `value` is a path the command creates or changes.
- `remove`: a path it removes, moves away or re-permissions (its ancestors count too).
- `mention`: an argument of a program whose effect is unknown.
- `code`: inline code an interpreter runs (`python -c`, `perl -e`, a sed script).
- `opaque`: code that cannot be seen before it runs; `value` is the whole command.
- `tether`: the subcommand given to `tether`.
- `unparsed`: text that could not be split; `value` is that text.
"""

_Stdin = str | Literal["pipe"] | None
_MAX_DEPTH = 8
_MAX_ALTERNATIVES = 64
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)", re.DOTALL)
_VARIABLE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*)|([0-9@*#?$!-]))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REMOTE = re.compile(r"^(?:[\w.@-]+:|rsync://)")
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})


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


def command_effects(
    command: str, *, cwd: str, home: str, environ: Mapping[str, str]
) -> list[Effect]:
    """Return the effects of a Bash command run in `cwd` with `environ`, in order."""
    walker = _Walker(command, home=home, environ=environ)
    walker.script(command, _State(cwd=cwd), depth=0)
    return walker.effects


@attrs.define
class _State:
    cwd: str | None
    env: dict[str, tuple[str, ...] | None] = attrs.field(factory=dict)

    def fork(self) -> _State:
        return _State(cwd=self.cwd, env=dict(self.env))


_Options = list[tuple[str, str | None]]


def _options(
    args: Sequence[str], with_value: frozenset[str], *, permute: bool
) -> tuple[_Options, list[str]]:
    """Split getopt-style arguments into (flag, value) pairs and positionals.

    With `permute`, options may follow positionals (GNU tools); without, the first
    positional ends the options (wrappers such as `sudo`, whose command follows).
    """
    options: _Options = []
    positionals: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positionals.extend(args[i:])
            break
        if len(arg) < 2 or not arg.startswith("-"):
            positionals.append(arg)
            if not permute:
                positionals.extend(args[i:])
                break
            continue
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            if eq:
                options.append((key, value))
            elif key in with_value and i < len(args):
                options.append((key, args[i]))
                i += 1
            else:
                options.append((key, None))
            continue
        for pos in range(1, len(arg)):
            flag = "-" + arg[pos]
            if flag in with_value:
                if pos + 1 < len(arg):
                    options.append((flag, arg[pos + 1 :]))
                elif i < len(args):
                    options.append((flag, args[i]))
                    i += 1
                else:
                    options.append((flag, ""))
                break
            options.append((flag, None))
    return options, positionals


def _values(options: _Options, *flags: str) -> list[str]:
    return [value for flag, value in options if flag in flags and value is not None]


def _has(options: _Options, *flags: str) -> bool:
    return any(flag in flags for flag, _ in options)


def _into(directory: str, source: str) -> str:
    """The path `source` gets when copied or moved into `directory`."""
    return directory.rstrip("/") + "/" + posixpath.basename(source.rstrip("/"))


@attrs.frozen
class _Lang:
    """How an interpreter takes inline code on its command line."""

    code: frozenset[str]
    """Options whose value is code (`-c`, `-e`, `--eval`)."""
    value: frozenset[str] = frozenset()
    """Other options that take a value."""
    inplace: frozenset[str] = frozenset()
    """Options after which the file arguments are edited in place (`perl -i`)."""
    program_first: bool = False
    """The first positional is the program when no code option is given (awk)."""


_PYTHON = _Lang(code=frozenset({"-c"}), value=frozenset({"-W", "-X", "-m"}))
_LANGS: dict[str, _Lang] = {
    "python": _PYTHON,
    "perl": _Lang(
        code=frozenset({"-e", "-E"}),
        value=frozenset({"-M", "-m", "-I", "-F", "-l", "-0", "-C", "-x", "-d", "-D"}),
        inplace=frozenset({"-i"}),
    ),
    "ruby": _Lang(
        code=frozenset({"-e"}),
        value=frozenset({"-r", "-I", "-C", "-E", "-F", "-x", "-W", "-K"}),
        inplace=frozenset({"-i"}),
    ),
    "node": _Lang(
        code=frozenset({"-e", "--eval", "-p", "--print"}),
        value=frozenset({"-r", "--require", "--import", "--input-type"}),
    ),
    "php": _Lang(code=frozenset({"-r"}), value=frozenset({"-d", "-c", "-f"})),
    "lua": _Lang(code=frozenset({"-e"}), value=frozenset({"-l"})),
    "rscript": _Lang(code=frozenset({"-e"})),
    "osascript": _Lang(code=frozenset({"-e"})),
    "pwsh": _Lang(code=frozenset({"-c", "-command", "--command"})),
    "awk": _Lang(
        code=frozenset({"-e", "--source"}),
        value=frozenset({"-F", "-v", "-f", "-E", "-l", "--file", "--assign"}),
        inplace=frozenset({"-i", "--include"}),
        program_first=True,
    ),
}
_LANG_ALIASES = {
    "python": "python",
    "pypy": "python",
    "nodejs": "node",
    "bun": "node",
    "luajit": "lua",
    "powershell": "pwsh",
    "gawk": "awk",
    "mawk": "awk",
    "nawk": "awk",
}
_VERSIONED = re.compile(r"(python|pypy|perl|ruby|lua|php|node)[\d.]*")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "fish"})
_READERS = frozenset(
    "ls cat stat head tail less more wc file du df tree readlink realpath basename "
    "dirname namei getfacl lsattr diff cmp comm md5sum sha1sum sha224sum sha256sum "
    "sha384sum sha512sum b2sum cksum sum od hexdump strings nl cut tr column fold fmt "
    "rev base64 base32 echo printf true false : pwd which type whereis id whoami groups "
    "date printenv uname hostname ps pgrep sleep wait jobs test [ [[ ]] grep egrep "
    "fgrep rg ag ack jq yq seq expr bc getent locale tput clear exit return shift set "
    "unset shopt ulimit history hash let help man info whatis apropos tac paste join "
    "expand unexpand look zcat bzcat xzcat zgrep lsblk findmnt tty nproc free uptime w "
    "who last cal".split()
)
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "while", "until", "do", "!", "{", "}", "time"}
    | {"coproc", "fi", "done", "esac", "nohup", "builtin", "unbuffer"}
)
_TETHER_MODULES = frozenset({"tether", "tether.cli", "tether.__main__"})
_COPY_OPTIONS = {
    "cp": frozenset("-t -S --target-directory --suffix".split()),
    "install": frozenset("-t -S -m -o -g --target-directory --suffix --mode --owner --group".split()),
    "rsync": frozenset(
        "-e --rsh -f --filter -T --temp-dir -B --exclude --include --exclude-from "
        "--include-from --files-from --compare-dest --copy-dest --link-dest --backup-dir "
        "--partial-dir --chmod --chown --port --password-file --log-file".split()
    ),
    "scp": frozenset("-P -i -F -l -o -c -J -S".split()),
}


class _Walker:
    """Walks a command string and collects its effects."""

    def __init__(self, top: str, *, home: str, environ: Mapping[str, str]) -> None:
        self.top = top
        self.home = home
        self.environ = environ
        self.effects: list[Effect] = []
        self._handlers: dict[str, Callable[[str, list[str], _State, _Stdin, int], None]]
        self._handlers = {
            "sudo": self._sudo,
            "doas": self._sudo,
            "sudoedit": self._sudo,
            "env": self._env,
            "setsid": self._wrapper(frozenset()),
            "nice": self._wrapper(frozenset({"-n", "--adjustment"})),
            "ionice": self._wrapper(frozenset({"-c", "-n", "--class", "--classdata"})),
            "stdbuf": self._wrapper(frozenset({"-i", "-o", "-e"})),
            "command": self._command,
            "exec": self._wrapper(frozenset({"-a"})),
            "timeout": self._timeout,
            "xargs": self._xargs,
            "watch": self._watch,
            "su": self._su,
            "runuser": self._su,
            "flock": self._flock,
            "uv": self._runner,
            "poetry": self._runner,
            "pipx": self._runner,
            "hatch": self._runner,
            "pdm": self._runner,
            "uvx": self._uvx,
            "eval": self._eval,
            "alias": self._alias,
            "trap": self._trap,
            "cd": self._cd,
            "pushd": self._cd,
            "popd": self._cd,
            "export": self._declare,
            "declare": self._declare,
            "typeset": self._declare,
            "local": self._declare,
            "readonly": self._declare,
            "read": self._read,
            "mapfile": self._read,
            "readarray": self._read,
            "for": self._for,
            "select": self._for,
            "case": self._ignore,
            "function": self._ignore,
            "source": self._ignore,
            ".": self._ignore,
            "tether": self._tether,
            "rm": self._remove(frozenset({"--interactive"})),
            "rmdir": self._remove(frozenset()),
            "unlink": self._remove(frozenset()),
            "shred": self._remove(frozenset({"-n", "-s", "--iterations", "--size"})),
            "mv": self._copy,
            "cp": self._copy,
            "ln": self._copy,
            "install": self._copy,
            "rsync": self._copy,
            "scp": self._copy,
            "tee": self._write(frozenset({"--output-error"})),
            "touch": self._write(
                frozenset({"-r", "-t", "-d", "--reference", "--date", "--time"})
            ),
            "truncate": self._write(frozenset({"-s", "-r", "--size", "--reference"})),
            "mkdir": self._write(frozenset({"-m", "--mode", "--context"})),
            "mkfifo": self._write(frozenset({"-m", "--mode", "--context"})),
            "mknod": self._mknod,
            "chmod": self._chmod,
            "chown": self._chmod,
            "chgrp": self._chmod,
            "chattr": self._chmod,
            "setfacl": self._setfacl,
            "dd": self._dd,
            "sort": self._sort,
            "uniq": self._uniq,
            "sed": self._sed,
            "find": self._find,
        }

    # -- plumbing ---------------------------------------------------------------------

    def emit(self, kind: EffectKind, value: str, how: str, state: _State) -> None:
        self.effects.append(Effect(kind=kind, value=value, how=how, cwd=state.cwd))

    def path(self, kind: EffectKind, word: str, how: str, state: _State) -> None:
        for value in self.expand(word, state):
            self.emit(kind, value, how, state)

    def lookup(self, name: str, state: _State) -> tuple[str, ...] | None:
        if name in state.env:
            return state.env[name]
        if name == "HOME":
            return (self.home,)
        if name == "PWD":
            return None if state.cwd is None else (state.cwd,)
        value = self.environ.get(name)
        return None if value is None else (value,)

    def expand(self, word: str, state: _State) -> list[str]:
        """Expand `~` and variables; each alternative marks unknown parts `UNKNOWN`."""
        if word == "~" or word.startswith("~/"):
            word = self.home + word[1:]
        elif word.startswith("~"):
            head, sep, tail = word.partition("/")
            expanded = posixpath.expanduser(head)
            word = expanded + sep + tail if expanded != head else UNKNOWN + sep + tail
        alternatives = [""]
        pos = 0
        for match in _VARIABLE.finditer(word):
            literal = word[pos : match.start()]
            pos = match.end()
            braced, plain = match.group(1), match.group(2)
            name = plain or (braced if braced and _NAME.fullmatch(braced) else None)
            values = self.lookup(name, state) if name else None
            if values is None:
                alternatives = [a + literal + UNKNOWN for a in alternatives]
            else:
                alternatives = [a + literal + v for a in alternatives for v in values]
                alternatives = alternatives[:_MAX_ALTERNATIVES]
        return [a + word[pos:] for a in alternatives]

    def known(self, word: str, state: _State) -> str | None:
        """The single value of `word`, or None when it is unknown or has several."""
        values = self.expand(word, state)
        if len(values) != 1 or UNKNOWN in values[0]:
            return None
        return values[0]

    def assign(self, word: str, state: _State) -> None:
        match = _ASSIGNMENT.fullmatch(word)
        assert match is not None
        name, append, value = match.groups()
        state.env[name] = None if append else tuple(self.expand(value, state))

    # -- walking ----------------------------------------------------------------------

    def script(self, text: str, state: _State, *, depth: int) -> None:
        if depth > _MAX_DEPTH:
            self.emit("opaque", self.top, "shells nested too deep", state)
            return
        try:
            parsed = parse_script(text)
        except ShellSyntaxError as exc:
            self.emit("unparsed", text, str(exc), state)
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
        stdin: _Stdin = "pipe" if command.piped_in else None
        for redirect in command.redirects:
            if redirect.op in _WRITE_REDIRECTS:
                if redirect.op == ">&" and (redirect.target.isdigit() or redirect.target == "-"):
                    continue  # duplicates a descriptor, names no file
                self.path("write", redirect.target, f"redirection {redirect.op}", state)
            elif redirect.op in ("<<", "<<-"):
                stdin = heredocs.get(redirect.target, "")
            elif redirect.op == "<<<":
                stdin = redirect.target
        words = list(command.words)
        while words and _ASSIGNMENT.fullmatch(words[0]):
            self.assign(words.pop(0), state)
        if words:
            self.run(words, state, stdin, depth)

    def run(self, words: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        name = self.known(words[0], state)
        if name is None:
            self.emit("opaque", self.top, f"a program named `{words[0]}`", state)
            return
        base = posixpath.basename(name) or name
        args = words[1:]
        if base in _KEYWORDS:
            if args:
                self.run(args, state, stdin, depth)
            return
        versioned = _VERSIONED.fullmatch(base)
        lang = _LANG_ALIASES.get(base, base.lower())
        if versioned is not None:
            lang = _LANG_ALIASES.get(versioned.group(1), versioned.group(1))
        if base in _READERS:
            return
        handler = self._handlers.get(base)
        if handler is not None:
            handler(base, args, state, stdin, depth)
        elif base in _SHELLS:
            self._shell(base, args, state, stdin, depth)
        elif lang in _LANGS:
            self._interpreter(lang, args, state, stdin, depth)
        else:
            self._unknown(base, args, state)

    def _unknown(self, base: str, args: list[str], state: _State) -> None:
        for arg in args:
            self.path("mention", arg, f"`{base}`", state)
            _, eq, value = arg.partition("=")
            if eq and value:
                self.path("mention", value, f"`{base}`", state)

    def _stdin_code(self, how: str, stdin: _Stdin, state: _State, depth: int) -> None:
        if stdin == "pipe":
            self.emit("opaque", self.top, f"{how} reading code from a pipe", state)
        elif stdin is not None:
            self.emit("code", stdin, f"{how} here-document", state)

    # -- wrappers: programs that run the rest of their words ---------------------------

    def _wrapper(
        self, with_value: frozenset[str]
    ) -> Callable[[str, list[str], _State, _Stdin, int], None]:
        def handle(base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
            _, rest = _options(args, with_value, permute=False)
            if rest:
                self.run(rest, state, stdin, depth)

        return handle

    def _sudo(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset(
            "-u -g -h -p -C -D -r -t -U -T -R --user --group --host --prompt --chdir "
            "--role --type --other-user --close-from --command-timeout --chroot".split()
        )
        options, rest = _options(args, with_value, permute=False)
        if base == "sudoedit" or _has(options, "-e", "--edit"):
            for word in rest:
                self.path("write", word, f"`{base} -e`", state)
            return
        state = state.fork()
        while rest and _ASSIGNMENT.fullmatch(rest[0]):
            self.assign(rest.pop(0), state)
        if rest:
            self.run(rest, state, stdin, depth)
        elif _has(options, "-s", "-i", "--shell", "--login"):
            self._stdin_code(f"`{base} -s`", stdin, state, depth)

    def _env(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"})
        options, rest = _options(args, with_value, permute=False)
        state = state.fork()
        for directory in _values(options, "-C", "--chdir"):
            state.cwd = self._resolve_dir(directory, state)
        for split in _values(options, "-S", "--split-string"):
            try:
                rest = shlex.split(split) + rest
            except ValueError:
                self.emit("unparsed", split, "`env -S` string", state)
        if rest and rest[0] == "-":
            rest = rest[1:]
        while rest and _ASSIGNMENT.fullmatch(rest[0]):
            self.assign(rest.pop(0), state)
        if rest:
            self.run(rest, state, stdin, depth)

    def _command(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        options, rest = _options(args, frozenset(), permute=False)
        if rest and not _has(options, "-v", "-V"):
            self.run(rest, state, stdin, depth)

    def _timeout(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset({"-s", "--signal", "-k", "--kill-after"})
        _, rest = _options(args, with_value, permute=False)
        if len(rest) > 1:
            self.run(rest[1:], state, stdin, depth)

    def _xargs(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset(
            "-a -d -E -I -L -n -P -s --arg-file --delimiter --eof --replace --max-lines "
            "--max-args --max-procs --max-chars --process-slot-var".split()
        )
        options, rest = _options(args, with_value, permute=False)
        rest = rest or ["echo"]
        replace = _values(options, "-I", "--replace")
        if _has(options, "-i"):
            replace.append("{}")
        # Names read from stdin are unknown here; the guard refuses in doubt only when
        # the whole command names a protected path (`opaque`), so `find . | xargs rm`
        # in a workspace stays allowed.
        if posixpath.basename(rest[0]) not in _READERS:
            self.emit("opaque", self.top, f"`xargs {rest[0]}` on names from its input", state)
        if replace:
            rest = [rest[0]] + [w.replace(replace[-1], "xargs-input") for w in rest[1:]]
        self.run(rest, state, None, depth)

    def _watch(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        _, rest = _options(args, frozenset({"-n", "--interval", "-d"}), permute=False)
        if rest:
            self.script(" ".join(rest), state.fork(), depth=depth + 1)

    def _su(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset({"-c", "--command", "-s", "--shell", "-u", "--user", "-g"})
        options, rest = _options(args, with_value, permute=True)
        for code in _values(options, "-c", "--command"):
            self.script(code, state.fork(), depth=depth + 1)
        if base == "runuser" and _has(options, "-u", "--user") and rest:
            self.run(rest, state, stdin, depth)

    def _flock(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset({"-w", "--timeout", "-E", "--conflict-exit-code", "-c", "--command"})
        options, rest = _options(args, with_value, permute=False)
        if rest:
            self.path("write", rest[0], "`flock` (lock file)", state)
        for code in _values(options, "-c", "--command"):
            self.script(code, state.fork(), depth=depth + 1)
        if len(rest) > 1:
            self.run(rest[1:], state, stdin, depth)

    def _runner(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        if not args or args[0] not in ("run", "exec"):
            self._unknown(base, args, state)
            return
        with_value = frozenset(
            "--with --from --python -p --project --directory --package --extra --group "
            "--env-file --spec --index --env -e".split()
        )
        _, rest = _options(args[1:], with_value, permute=False)
        if rest:
            self.run(rest, state, stdin, depth)

    def _uvx(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        self._runner(base, ["run", *args], state, stdin, depth)

    # -- shells and interpreters ---------------------------------------------------------

    def _shell(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        if base == "busybox":
            if args:
                self.run(args, state, stdin, depth)
            return
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
            if arg[0] == "-" and not arg.startswith("--") and "c" in arg:
                code_next = True
            i += 1
        rest = args[i:]
        if code_next:
            if rest:
                self.script(rest[0], state.fork(), depth=depth + 1)
        elif not rest:
            self._stdin_code(f"`{base}`", stdin, state, depth)
            if isinstance(stdin, str) and stdin:
                self.script(stdin, state.fork(), depth=depth + 1)

    def _interpreter(
        self, lang_name: str, args: list[str], state: _State, stdin: _Stdin, depth: int
    ) -> None:
        lang = _LANGS[lang_name]
        codes: list[str] = []
        inplace = False
        module: str | None = None
        i = 0
        while i < len(args):
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
                if key in lang.inplace:
                    inplace = True
                if not eq and key in lang.value | lang.inplace:
                    i += 1
                continue
            for pos in range(1, len(arg)):
                flag = "-" + arg[pos]
                tail = arg[pos + 1 :]
                if flag in lang.inplace:
                    inplace = inplace or lang_name != "awk" or tail == "inplace"
                    if lang_name == "awk" and not tail and i < len(args):
                        inplace = args[i] == "inplace"
                        i += 1
                    break
                if flag in lang.code:
                    if tail:
                        codes.append(tail)
                    elif i < len(args):
                        codes.append(args[i])
                        i += 1
                    break
                if flag in lang.value:
                    value = tail
                    if not tail and flag not in ("-l", "-0", "-C", "-x") and i < len(args):
                        value = args[i]
                        i += 1
                    if lang is _PYTHON and flag == "-m":
                        module = value
                    break
        rest = args[i:]
        how = f"`{lang_name}`"
        if module is not None:
            if module in _TETHER_MODULES:
                self._tether("tether", rest, state, stdin, depth)
            return
        if not codes and lang.program_first and rest:
            codes.append(rest.pop(0))
        if not codes:
            if rest and rest[0] != "-":
                return  # runs a script file: what it does is not on the command line
            self._stdin_code(how, stdin, state, depth)
            return
        for code in codes:
            # The arguments go with the code: `python -c '...' stop` can pass a verb.
            self.emit("code", "\n".join([code, *rest]), f"inline {how} code", state)
        for word in rest:
            self.path("write" if inplace else "mention", word, how, state)

    def _eval(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        self.script(" ".join(args), state, depth=depth + 1)

    def _alias(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        for arg in args:
            _, eq, body = arg.partition("=")
            if eq:
                self.script(body, state.fork(), depth=depth + 1)

    def _trap(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        if args and not args[0].startswith("-"):
            self.script(args[0], state.fork(), depth=depth + 1)

    def _tether(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        _, rest = _options(args, frozenset(), permute=False)
        if rest:
            for value in self.expand(rest[0], state):
                self.emit("tether", value, f"`{base}`", state)

    # -- shell state ---------------------------------------------------------------------

    def _resolve_dir(self, word: str, state: _State) -> str | None:
        value = self.known(word, state)
        if value is None or state.cwd is None and not value.startswith("/"):
            return None
        if any(ch in value for ch in "*?["):
            return None
        return posixpath.normpath(posixpath.join(state.cwd or "/", value))

    def _cd(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        _, rest = _options(args, frozenset(), permute=False)
        if base == "popd" or rest[:1] == ["-"]:
            state.cwd = None
        else:
            state.cwd = self._resolve_dir(rest[0] if rest else self.home, state)

    def _declare(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        for arg in args:
            if _ASSIGNMENT.fullmatch(arg):
                self.assign(arg, state)

    def _read(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset({"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u", "-C", "-c", "-s"})
        options, rest = _options(args, with_value, permute=True)
        for name in rest + _values(options, "-a"):
            if _NAME.fullmatch(name):
                state.env[name] = None

    def _for(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        if not args or not _NAME.fullmatch(args[0]):
            return
        if len(args) < 2 or args[1] != "in":
            state.env[args[0]] = None
            return
        values: list[str] = []
        for word in args[2:]:
            values.extend(self.expand(word, state))
        state.env[args[0]] = tuple(values[:_MAX_ALTERNATIVES]) or ("",)

    def _ignore(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        return

    # -- programs that write or remove -----------------------------------------------------

    def _remove(
        self, with_value: frozenset[str]
    ) -> Callable[[str, list[str], _State, _Stdin, int], None]:
        def handle(base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
            _, targets = _options(args, with_value, permute=True)
            for word in targets:
                self.path("remove", word, f"`{base}`", state)

        return handle

    def _write(
        self, with_value: frozenset[str]
    ) -> Callable[[str, list[str], _State, _Stdin, int], None]:
        def handle(base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
            _, targets = _options(args, with_value, permute=True)
            for word in targets:
                self.path("write", word, f"`{base}`", state)

        return handle

    def _mknod(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        _, positionals = _options(args, frozenset({"-m", "--mode", "--context"}), permute=True)
        if positionals:
            self.path("write", positionals[0], f"`{base}`", state)

    def _copy(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = _COPY_OPTIONS.get(base, _COPY_OPTIONS["cp"])
        if base == "install" and any(a == "-d" or a == "--directory" for a in args):
            self._write(with_value)(base, args, state, stdin, depth)
            return
        options, positionals = _options(args, with_value, permute=True)
        positionals = [p for p in positionals if base not in ("rsync", "scp") or not _REMOTE.match(p)]
        for log in _values(options, "--log-file"):
            self.path("write", log, f"`{base} --log-file`", state)
        target_dir = _values(options, "-t", "--target-directory") if base != "rsync" else []
        if target_dir:
            dest: str | None = target_dir[-1]
            sources = positionals
        elif len(positionals) >= 2:
            dest, sources = positionals[-1], positionals[:-1]
        elif base == "ln" and positionals:
            dest, sources = ".", positionals
        else:
            dest, sources = None, positionals
        if base == "mv" or _has(options, "--remove-source-files"):
            for word in sources:
                self.path("remove", word, f"`{base}` (source)", state)
        if dest is None:
            return
        deletes = any(flag.startswith("--delete") for flag, _ in options)
        self.path("remove" if deletes else "write", dest, f"`{base}` (destination)", state)
        if not _has(options, "-T", "--no-target-directory"):
            for word in sources:
                self.path("write", _into(dest, word), f"`{base}` (destination)", state)

    def _chmod(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        flags = re.compile(r"-[RcfvhHLPV]+")
        positionals: list[str] = []
        by_reference = False
        rest = list(args)
        while rest:
            arg = rest.pop(0)
            if arg == "--":
                positionals.extend(rest)
                break
            if arg.startswith("--"):
                by_reference = by_reference or arg.startswith("--reference")
            elif base == "chattr" and arg in ("-v", "-p") and rest:
                rest.pop(0)
            elif not flags.fullmatch(arg):
                positionals.append(arg)  # modes such as `-w` or `+i` included
        for word in positionals if by_reference else positionals[1:]:
            self.path("remove", word, f"`{base}`", state)

    def _setfacl(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset(
            "-m -M -x -X --set --set-file --modify --modify-file --remove --remove-file".split()
        )
        _, targets = _options(args, with_value, permute=True)
        for word in targets:
            self.path("remove", word, f"`{base}`", state)

    def _dd(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        for arg in args:
            if arg.startswith("of="):
                self.path("write", arg[3:], "`dd of=`", state)

    def _sort(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset(
            "-o --output -k --key -t --field-separator -T --temporary-directory -S "
            "--buffer-size --parallel --batch-size --compress-program --files0-from "
            "--random-source".split()
        )
        options, _ = _options(args, with_value, permute=True)
        for word in _values(options, "-o", "--output"):
            self.path("write", word, "`sort -o`", state)

    def _uniq(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset({"-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"})
        _, positionals = _options(args, with_value, permute=True)
        if len(positionals) > 1:
            self.path("write", positionals[1], "`uniq` (output)", state)

    def _sed(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        with_value = frozenset({"-e", "--expression", "-f", "--file", "-l", "--line-length"})
        # `-i` takes an optional attached suffix, which getopt tables cannot say.
        inplace_arg = re.compile(r"-[nErsuz]*i.*|--in-place(=.*)?")
        inplace = any(inplace_arg.fullmatch(arg) for arg in args)
        kept = [arg for arg in args if not inplace_arg.fullmatch(arg)]
        opts, positionals = _options(kept, with_value, permute=True)
        scripts = _values(opts, "-e", "--expression")
        if not scripts and not _has(opts, "-f", "--file") and positionals:
            script = positionals.pop(0)
            if script == "" and inplace and positionals:  # BSD `sed -i '' script file`
                script = positionals.pop(0)
            scripts.append(script)
        for script in scripts:
            self.emit("code", script, "a `sed` script", state)
        for word in positionals:
            self.path("write" if inplace else "mention", word, "`sed -i`" if inplace else "`sed`", state)

    def _find(self, base: str, args: list[str], state: _State, stdin: _Stdin, depth: int) -> None:
        i = 0
        while i < len(args) and (args[i] in ("-H", "-L", "-P") or args[i][:2] == "-O"):
            i += 1
        roots: list[str] = []
        while i < len(args) and not args[i].startswith("-") and args[i] not in ("(", ")", "!", ","):
            roots.append(args[i])
            i += 1
        roots = roots or ["."]
        expression = args[i:]
        j = 0
        while j < len(expression):
            word = expression[j]
            j += 1
            if word == "-delete":
                for root in roots:
                    self.path("remove", root, "`find -delete`", state)
            elif word in ("-fprint", "-fprint0", "-fls", "-fprintf") and j < len(expression):
                self.path("write", expression[j], f"`find {word}`", state)
                j += 1
            elif word in ("-exec", "-execdir", "-ok", "-okdir"):
                end = j
                while end < len(expression) and expression[end] not in (";", "+"):
                    end += 1
                command = expression[j:end]
                j = end + 1
                for root in roots if command else []:
                    # `{}` is any name under the root: a path with an unknown tail.
                    found = root.rstrip("/") + "/" + OPAQUE_WORD
                    self.run([w.replace("{}", found) for w in command], state.fork(), None, depth + 1)
