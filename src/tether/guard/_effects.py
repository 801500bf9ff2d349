"""What a Bash command would do, as far as the guard cares: a list of effects.

The job: know what programs do when `_walker` reaches them — wrappers (`sudo`, `env`,
`timeout`, `xargs`, `uv run`, and any later position for wrappers of unknown shape),
nested shells (`sh -c`, `bash -lc`, `eval`, here-documents fed to a shell),
interpreters with inline code, `git -c`, schedulers, `cd` and the other builtins,
`tether` itself — and hand programs that change files to `_programs`. It knows
programs, and nothing about stop paths: the guard judges the effects. It never runs
anything.

Best effort by design. Where the text cannot say (a variable set outside the command, a
substitution, a pipe into a shell), an effect carries `UNKNOWN` in its value or is
`opaque`, so that the guard can refuse in doubt.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping

from ._programs import (
    LANGS,
    PROGRAMS,
    READERS,
    SHELL_KEYWORDS,
    SHELLS,
    WRAPPERS,
    has,
    lang_of,
    options,
    values,
    words,
)
from ._shell import ShellSyntaxError, parse_script
from ._walker import (
    ASSIGNMENT,
    GLOB_CHARS,
    MAX_ALTERNATIVES,
    NAME,
    PIPE,
    STDIN_FILES,
    Call,
    Effect,
    State,
    Walker,
    runs_programs,
)

__all__ = ("Effect", "command_effects")

_MAX_POSITIONS = 16
"""Most positions after a wrapper of unknown shape that are tried as its command."""
_TETHER_MODULES = words("tether tether.cli tether.__main__")


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
    walker = Walker(
        command, home=home, environ=environ, deadline=deadline, dispatch=_dispatch
    )
    walker.script(command, State(cwd=cwd), depth=0)
    return walker.effects


def _unknown(call: Call) -> None:
    for arg in call.args:
        call.path("mention", arg, f"`{call.base}`")
        _, eq, value = arg.partition("=")
        if eq and value:
            call.path("mention", value, f"`{call.base}`")
    if call.stdin is not None and call.stdin != PIPE:
        # A here-document or here-string fed to a program the guard does not know
        # (`ssh host <<EOF`, `git commit -F -`): judged by the paths its text names.
        call.emit("code", call.stdin, f"`{call.base}` reading its input", runs=False)
    _tether_among(call, call.args)


def _tether_among(call: Call, args: list[str]) -> None:
    """A program given `tether` and then a verb as arguments may run `tether VERB`.

    Such a call (`parallel tether ::: lift`) is judged as if it did. A remote shell runs
    it on another machine, whose stop is someone else's (spec 02).
    """
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


def _matches(name: str, pattern: str) -> bool:
    """`fnmatch.fnmatchcase`, imported on first use.

    Most commands hold no pattern, and the per-call hook does not pay for the import.
    """
    import fnmatch

    return fnmatch.fnmatchcase(name, pattern)


def _verb_like(value: str) -> bool:
    return value in ("stop", "lift", "setup") or (
        any(ch in value for ch in GLOB_CHARS)
        and any(_matches(v, value) for v in ("stop", "lift", "setup"))
    )


def _anywhere(call: Call) -> None:
    """A wrapper whose options the guard does not know.

    Its command may start at any later position (`strace -f -o log tether lift`,
    `taskset -c 0 rm x`).
    """
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


def _wrapper(with_value: str) -> Callable[[Call], None]:
    table = words(with_value)

    def handle(call: Call) -> None:
        call.rest(options(call.args, table, permute=False)[1])

    return handle


_SUDO_OPTIONS = words(
    "-u -g -h -p -C -D -r -t -U -T -R --user --group --host --prompt --chdir --role "
    "--type --other-user --close-from --command-timeout --chroot"
)


def _sudo(call: Call) -> None:
    found, rest = options(call.args, _SUDO_OPTIONS, permute=False)
    if call.base == "sudoedit" or has(found, "-e", "--edit"):
        for word in rest:
            call.path("write", word, f"`{call.base} -e`")
        return
    state = call.state.fork()
    while rest and ASSIGNMENT.fullmatch(rest[0]):
        call.walker.assign(rest.pop(0), state)
    if rest:
        call.walker.run(rest, state, call.stdin, call.depth)
    elif has(found, "-s", "-i", "--shell", "--login"):
        _shell(call.but(base="sh", args=[]))


def _env(call: Call) -> None:
    table = words("-u --unset -C --chdir -S --split-string")
    found, rest = options(call.args, table, permute=False)
    state = call.state.fork()
    for directory in values(found, "-C", "--chdir"):
        state.cwd = _directory(call.walker, directory, state)
    for split in values(found, "-S", "--split-string"):
        try:  # the one shell model splits it (linear and bounded, unlike `shlex`)
            script = parse_script(split, deadline=call.walker.deadline)
        except ShellSyntaxError:
            call.emit("unparsed", split, "an `env -S` string")
            continue
        parts = script.commands
        rest = [*(parts[0].words if len(parts) == 1 else ()), *rest]
        if len(parts) > 1 or script.substitutions:
            call.emit("opaque", split, "an `env -S` string that is no single command")
    if rest[:1] == ["-"]:
        rest = rest[1:]
    while rest and ASSIGNMENT.fullmatch(rest[0]):
        call.walker.assign(rest.pop(0), state)
    if rest:
        call.walker.run(rest, state, call.stdin, call.depth)


def _command(call: Call) -> None:
    found, rest = options(call.args, frozenset(), permute=False)
    if not has(found, "-v", "-V"):
        call.rest(rest)


def _timeout(call: Call) -> None:
    _, rest = options(call.args, words("-s --signal -k --kill-after"), permute=False)
    call.rest(rest[1:])


_XARGS_OPTIONS = words(
    "-a -d -E -I -L -n -P -s --arg-file --delimiter --eof --replace --max-lines "
    "--max-args --max-procs --max-chars --process-slot-var"
)


def _xargs(call: Call) -> None:
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


def _watch(call: Call) -> None:
    _, rest = options(call.args, words("-n --interval -d"), permute=False)
    if rest:
        call.script(" ".join(rest))


def _su(call: Call) -> None:
    table = words("-c --command -s --shell -u --user -g")
    found, rest = options(call.args, table, permute=True)
    for code in values(found, "-c", "--command"):
        call.script(code)
    if call.base == "runuser" and has(found, "-u", "--user"):
        call.rest(rest)


def _flock(call: Call) -> None:
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


def _runner(call: Call) -> None:
    """`uv run`, `poetry run`, `pipx run`, `hatch run`, `pdm run`, `uvx`."""
    args = call.args if call.base != "uvx" else ["run", *call.args]
    if args[:1] not in (["run"], ["exec"]):
        _unknown(call)
        return
    call.rest(options(args[1:], _RUNNER_OPTIONS, permute=False)[1])


# -- shells, interpreters and tether ---------------------------------------------------


def _shell(call: Call) -> None:
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
    elif not rest or STDIN_FILES.fullmatch(rest[0]):  # reads commands on stdin
        if call.stdin == PIPE:
            call.stdin_code(f"`{call.base}`")
        elif call.stdin is not None:
            call.script(call.stdin)
        elif rest:  # `bash <(...)`: code the shell makes while the command runs
            call.emit("opaque", call.walker.top, f"`{call.base}` of generated code")


def _interpreter(call: Call, family: str) -> None:
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
            _tether(call.but(base="tether", args=rest))
        return
    if not codes and lang.program_first and rest:
        codes.append(rest.pop(0))
    if not codes:
        if not rest or rest[0] == "-" or STDIN_FILES.fullmatch(rest[0]):
            call.stdin_code(how)
            if call.stdin is None and rest:
                call.emit("opaque", call.walker.top, f"{how} of generated code")
        elif family == "python" and _is_tether_script(call, rest[0]):
            # `python3 .venv/bin//tether lift`, `python3 src/tether/../tether lift`
            _tether(call.but(base="tether", args=rest[1:]))
        return  # else it runs a script file: what that does is not on this line
    for word in rest:
        call.path("write" if inplace else "mention", word, edits if inplace else how)
    for code in codes:
        # The arguments go with the code: `python -c '...' stop` can pass a verb.
        runs = runs_programs(code, call.walker.check_time)
        call.emit("code", "\n".join([code, *rest]), f"inline {how} code", runs=runs)


def _is_tether_script(call: Call, word: str) -> bool:
    """A path to tether's own entry point, however it is spelled.

    The entry point is the console script, the package, or its `__main__.py`.
    """
    value = call.walker.known(word, call.state)
    if value is None:
        return "tether" in word  # a path known only at run time that may be tether's
    path = posixpath.normpath(value)
    return (
        posixpath.basename(path) == "tether"
        or path.endswith(("/tether/__main__.py", "/tether/cli/__init__.py"))
        or path in ("tether/__main__.py", "tether/cli/__init__.py")
    )


def _tether(call: Call) -> None:
    _, rest = options(call.args, frozenset(), permute=False)
    if rest:
        for value in call.walker.expand(rest[0], call.state):
            verb = (value.split() or [""])[0]  # an unquoted value splits into words
            if any(ch in verb for ch in GLOB_CHARS):  # `tether l?ft` runs `lift`
                verb = next(
                    (v for v in ("stop", "lift", "setup") if _matches(v, verb)),
                    verb,
                )
            call.emit("tether", verb, f"`{call.base}`")


def _eval(call: Call) -> None:
    call.script(" ".join(call.args), same_shell=True)


def _alias(call: Call) -> None:
    for arg in call.args:
        name, eq, body = arg.partition("=")
        if eq:
            call.script(body)  # judged where it is defined, and again where used
            call.state.aliases[name] = body


def _function(call: Call) -> None:
    """`function f { ...; }`: the body is judged as if it ran here."""
    rest = call.args[1:]
    if rest[:1] == ["()"]:
        rest = rest[1:]
    call.rest(rest)


def _source(call: Call) -> None:
    """`source FILE` runs a file.

    From stdin or a process substitution it runs code the command text does not show.
    """
    if call.args and STDIN_FILES.fullmatch(call.args[0]):
        call.stdin_code(f"`{call.base}`")
        if call.stdin is None:
            call.emit("opaque", call.walker.top, f"`{call.base}` of generated code")


def _scheduler(call: Call) -> None:
    """`at`, `batch`, `crontab`, `systemd-run`: code that runs later, unseen."""
    _unknown(call)
    code = call.walker.top if call.stdin in (PIPE, None) else call.stdin
    call.emit("opaque", code or "", f"`{call.base}` scheduling code")


def _git(call: Call) -> None:
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
    _unknown(call.but(state=state, args=rest))


_GIT_COMMAND_KEYS = words(
    "pager editor sshcommand fsmonitor askpass external textconv command helper "
    "hookspath sequenceeditor"
)


def _trap(call: Call) -> None:
    if call.args and not call.args[0].startswith("-"):
        call.script(call.args[0])


# -- shell state -------------------------------------------------------------------------


def _directory(walker: Walker, word: str, state: State) -> str | None:
    value = walker.known(word, state)
    if value is None or any(ch in value for ch in "*?["):
        return None
    if not value.startswith("/"):
        if state.cwd is None:
            return None
        value = posixpath.join(state.cwd, value)
    return state.unlinked(posixpath.normpath(value))


def _cd(call: Call) -> None:
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


def _declare(call: Call) -> None:
    for arg in call.args:
        if ASSIGNMENT.fullmatch(arg):
            call.walker.assign(arg, call.state)


def _read(call: Call) -> None:
    table = words("-a -d -i -n -N -p -t -u -C -c -s")
    found, rest = options(call.args, table, permute=True)
    for name in rest + values(found, "-a"):
        if NAME.fullmatch(name):
            call.state.env[name] = None


def _for(call: Call) -> None:
    args = call.args
    if not args or not NAME.fullmatch(args[0]):
        return
    if args[1:2] != ["in"]:
        call.state.env[args[0]] = None
        return
    found: list[str] = []
    for word in args[2:]:
        found.extend(call.walker.expand(word, call.state))
    call.state.env[args[0]] = tuple(found[:MAX_ALTERNATIVES]) or ("",)


def _ignore(call: Call) -> None:
    return


_BUILTINS: dict[str, Callable[[Call], None]] = {
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


def _dispatch(call: Call) -> None:
    """Hand one program invocation to what knows that program."""
    base = call.base
    if any(ch in base for ch in GLOB_CHARS):  # `/usr/bin/teth?r lift`
        matched = [p for p in _KNOWN if _matches(p, base)]
        for program in matched[:8]:
            call.walker.run(
                [program, *call.args], call.state.fork(), call.stdin, call.depth + 1
            )
        if len(matched) > 8:
            how = f"a program named by the pattern `{base}`"
            call.emit("opaque", call.walker.top, how)
        if matched:
            return
    if base in SHELL_KEYWORDS:
        call.rest([a for a in call.args if a != "-p"] if base == "time" else call.args)
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
