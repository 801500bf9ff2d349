"""What common programs do with their words: the paths they write, remove or run.

The job: for programs that change files (`rm`, `cp`, `mv`, `ln`, `tee`, `touch`, `chmod`,
`sed -i`, `dd`, `find -delete`, ...), say which of their arguments they write or remove;
and hold the tables `_effects` uses to recognise readers, shells, interpreters and
wrappers. Option parsing follows getopt as GNU tools do it, which is close enough for
BSD tools. It knows nothing about stop paths and does not expand words: it reports raw
words to a `Sink`, which expands and records them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence

from .._slotted import Slotted
from ._lazyre import LazyPattern
from ._shell import OPAQUE_WORD

TYPE_CHECKING = False

__all__ = (
    "LANGS",
    "PROGRAMS",
    "READERS",
    "SHELLS",
    "SHELL_KEYWORDS",
    "UNKNOWN",
    "WRAPPERS",
    "Lang",
    "Options",
    "has",
    "lang_of",
    "options",
    "values",
    "words",
)

UNKNOWN = "\0"
"""Marks, inside an expanded word, a part only the shell knows when the command runs."""

if TYPE_CHECKING:  # type-only names: `typing` is not imported at run time (`_slotted`)
    from typing import Final, Literal, Protocol

    EffectKind = Literal[
        "write",
        "remove",
        "unlink",
        "mention",
        "code",
        "opaque",
        "hidden",
        "tether",
        "unparsed",
    ]
    """What an effect is.

    - `write`: a path the command creates or changes.
    - `remove`: a path it removes, moves away or re-permissions (its ancestors count too).
    - `unlink`: a name it removes or moves away without following it (`rm`, `mv` of a
      symbolic link removes the link, not what it points to).
    - `mention`: an argument of a program whose effect is unknown.
    - `code`: inline code an interpreter runs (`python -c`, `perl -e`, a sed script).
    - `opaque`: code that cannot be seen before it runs; the value is the whole command.
    - `hidden`: code made unreadable on purpose before a shell runs it (decoded,
      unescaped): it could do anything, so it is refused.
    - `tether`: the subcommand given to `tether`.
    - `unparsed`: text that could not be split; the value is that text.
    """

    class Sink(Protocol):
        """Where a program's handler reports what it does, in the shell state of the call."""

        def path(self, kind: EffectKind, word: str, how: str) -> None:
            """Report a raw word used as a path; the sink expands it."""

        def emit(
            self, kind: EffectKind, value: str, how: str, *, runs: bool = True
        ) -> None:
            """Report a value as it is (code, for instance).

            `runs`: the code can start programs (a `sed` script without `e` cannot).
            """

        def link(self, target: str, name: str) -> None:
            """Report a symbolic link `name` made to `target` (raw words)."""

        def run(self, command: list[str]) -> None:
            """Walk a command this program runs (`find -exec`)."""

    _Handler = Callable[[Sink, str, list[str]], None]


def words(text: str) -> frozenset[str]:
    """A set of words written as one space-separated string."""
    return frozenset(text.split())


Options = list[tuple[str, str | None]]
"""Options as (flag, value) pairs; flags spelled `-x` or `--long`."""


def options(
    args: Sequence[str], with_value: frozenset[str], *, permute: bool
) -> tuple[Options, list[str]]:
    """Split getopt-style arguments into (flag, value) pairs and positionals.

    With `permute`, options may follow positionals (GNU tools); without, the first
    positional ends the options (wrappers such as `sudo`, whose command follows).
    """
    found: Options = []
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
                found.append((key, value))
            elif key in with_value and i < len(args):
                found.append((key, args[i]))
                i += 1
            else:
                found.append((key, None))
            continue
        for pos in range(1, len(arg)):
            flag = "-" + arg[pos]
            if flag in with_value:
                if pos + 1 < len(arg):
                    found.append((flag, arg[pos + 1 :]))
                elif i < len(args):
                    found.append((flag, args[i]))
                    i += 1
                else:
                    found.append((flag, ""))
                break
            found.append((flag, None))
    return found, positionals


def values(found: Options, *flags: str) -> list[str]:
    """The values given to any of `flags`."""
    return [value for flag, value in found if flag in flags and value is not None]


def has(found: Options, *flags: str) -> bool:
    """Whether any of `flags` was given."""
    return any(flag in flags for flag, _ in found)


class Lang(Slotted):
    """How an interpreter takes inline code on its command line."""

    __match_args__ = ("code", "value", "attached", "inplace", "program_first")
    __slots__ = ("attached", "code", "inplace", "program_first", "value")

    def __init__(
        self,
        code: frozenset[str],
        value: frozenset[str] = frozenset(),
        attached: frozenset[str] = frozenset(),
        inplace: frozenset[str] = frozenset(),
        program_first: bool = False,
    ) -> None:
        self.code: Final = code
        """Options whose value is code (`-c`, `-e`, `--eval`)."""
        self.value: Final = value
        """Other options that take a value."""
        self.attached: Final = attached
        """Options whose value, if any, is attached (`perl -l`, `-0777`): never the
        next word."""
        self.inplace: Final = inplace
        """Options after which the file arguments are edited in place (`perl -i`)."""
        self.program_first: Final = program_first
        """The first positional is the program when no code option is given (awk)."""


LANGS: dict[str, Lang] = {
    "python": Lang(code=words("-c"), value=words("-W -X -m")),
    "perl": Lang(
        code=words("-e -E"),
        value=words("-M -m -I -F -l -0 -C -x -d -D"),
        attached=words("-F -l -0 -C -x -d -D"),
        inplace=words("-i"),
    ),
    "ruby": Lang(
        code=words("-e"),
        value=words("-r -I -C -E -F -x -W -K"),
        attached=words("-x -W -K"),
        inplace=words("-i"),
    ),
    "node": Lang(
        code=words("-e --eval -p --print"), value=words("-r --require --import")
    ),
    "php": Lang(code=words("-r"), value=words("-d -c -f")),
    "lua": Lang(code=words("-e"), value=words("-l")),
    "rscript": Lang(code=words("-e")),
    "osascript": Lang(code=words("-e")),
    "pwsh": Lang(code=words("-c -command --command")),
    "awk": Lang(
        code=words("-e --source"),
        value=words("-F -v -f -E -l --file --assign"),
        inplace=words("-i --include"),
        program_first=True,
    ),
}
"""Interpreters by family name."""

_LANG_ALIASES = {
    "pypy": "python",
    "nodejs": "node",
    "bun": "node",
    "luajit": "lua",
    "powershell": "pwsh",
    "gawk": "awk",
    "mawk": "awk",
    "nawk": "awk",
}
_VERSIONED = LazyPattern(r"(python|pypy|perl|ruby|lua|php|node)[\d.]*")


def lang_of(base: str) -> str | None:
    """The interpreter family of a program name (`python3.11` -> `python`), if any."""
    versioned = _VERSIONED.fullmatch(base)
    name = versioned.group(1) if versioned is not None else base.lower()
    name = _LANG_ALIASES.get(name, name)
    return name if name in LANGS else None


SHELLS = words("sh bash dash zsh ksh mksh ash fish rbash rzsh rksh yash posh csh tcsh")
"""Shells: `-c` takes code; without arguments they read code on stdin."""

READERS = words(
    "ls cat stat head tail less more wc file du df tree readlink realpath basename "
    "dirname namei getfacl lsattr diff cmp comm md5sum sha1sum sha224sum sha256sum "
    "sha384sum sha512sum b2sum cksum sum od hexdump strings nl cut tr column fold fmt "
    "rev base64 base32 echo printf true false : pwd which type whereis id whoami "
    "groups date printenv uname hostname ps pgrep sleep wait jobs test [ [[ ]] grep "
    "egrep fgrep rg ag ack jq yq seq expr bc getent locale tput clear exit return shift "
    "set unset shopt ulimit history hash let help man info whatis apropos tac paste "
    "join expand unexpand look zcat bzcat xzcat zgrep lsblk findmnt tty nproc free "
    "uptime w who last cal"
)
"""Programs that only read their arguments (their redirections are still judged)."""

SHELL_KEYWORDS = words(
    "if then else elif while until do ! { } fi done esac coproc time"
)
"""Reserved words that the command after them follows."""

WRAPPERS = words(
    "sudo doas env nohup builtin unbuffer busybox setsid nice ionice stdbuf exec "
    "command timeout xargs watch su runuser flock uv uvx poetry pipx hatch pdm strace "
    "ltrace taskset chrt numactl nsenter unshare chroot firejail fakeroot proot "
    "parallel caffeinate torsocks proxychains proxychains4 systemd-run schroot bwrap "
    "cgexec trickle valgrind gdb nocache eatmydata chpst sg catchsegv xvfb-run "
    "dbus-run-session ssh-agent script"
)
"""Programs that run a command given in their arguments: the one wrapper table.

The guard knows the option shapes of some (`sudo`, `env`, `timeout`, ...) and tries
every later position for the rest; the permission rules try every later position for
all of them. Either way, trying more positions only refuses or asks more.
"""


def _targets(kind: EffectKind, with_value: str) -> _Handler:
    """A program whose every positional argument it writes or removes."""
    table = words(with_value)

    def handle(sink: Sink, base: str, args: list[str]) -> None:
        _, positionals = options(args, table, permute=True)
        for word in positionals:
            # `rm link/` goes through the link: judged as the directory it names.
            shown = "remove" if kind == "unlink" and word.endswith("/") else kind
            sink.path(shown, word, f"`{base}`")

    return handle


def _into(directory: str, source: str) -> str:
    """The path `source` gets when copied or moved into `directory`."""
    return directory.rstrip("/") + "/" + posixpath.basename(source.rstrip("/"))


_COPY_OPTIONS = {
    "cp": words("-t -S --target-directory --suffix"),
    "mv": words("-t -S --target-directory --suffix"),
    "ln": words("-t -S --target-directory --suffix"),
    "install": words(
        "-t -S -m -o -g --target-directory --suffix --mode --owner --group"
    ),
    "rsync": words(
        "-e --rsh -f --filter -T --temp-dir -B --exclude --include --exclude-from "
        "--include-from --files-from --compare-dest --copy-dest --link-dest --backup-dir "
        "--partial-dir --chmod --chown --port --password-file --log-file"
    ),
    "scp": words("-P -i -F -l -o -c -J -S"),
}
_REMOTE = LazyPattern(r"(?:[\w.@-]+:|rsync://)")


def _copy(sink: Sink, base: str, args: list[str]) -> None:
    with_value = _COPY_OPTIONS[base]
    if base == "install" and ("-d" in args or "--directory" in args):
        _targets("write", " ".join(with_value))(sink, base, args)
        return
    found, positionals = options(args, with_value, permute=True)
    if base in ("rsync", "scp"):
        positionals = [p for p in positionals if not _REMOTE.match(p)]
    for log in values(found, "--log-file"):
        sink.path("write", log, f"`{base} --log-file`")
    target_dir = values(found, "-t", "--target-directory") if base != "rsync" else []
    dest: str | None
    if target_dir:
        dest, sources = target_dir[-1], positionals
    elif len(positionals) >= 2:
        dest, sources = positionals[-1], positionals[:-1]
    elif base == "ln" and positionals:
        dest, sources = ".", positionals
    else:
        dest, sources = None, positionals
    if base == "mv" or has(found, "--remove-source-files"):
        for word in sources:
            sink.path(
                "unlink" if base == "mv" else "remove", word, f"`{base}` (source)"
            )
    elif base == "ln":
        for word in sources:
            # A new name for a stop path hides later writes through it from the guard.
            sink.path("mention", word, f"`{base}` (link target)")
    if dest is None:
        return
    # `mv --exchange a b` swaps the two: b is moved away as much as a is. A copy of a
    # folder's contents (`rsync -a x/ d`, `cp -r x/. d`) lands anywhere under `d`.
    deletes = (
        any(flag.startswith("--delete") for flag, _ in found)
        or (base == "mv" and has(found, "--exchange"))
        or any(
            w.endswith("/.") or (base == "rsync" and w.endswith("/")) for w in sources
        )
    )
    sink.path("remove" if deletes else "write", dest, f"`{base}` (destination)")
    if not has(found, "-T", "--no-target-directory"):
        for word in sources:
            sink.path("write", _into(dest, word), f"`{base}` (destination)")
    if base == "ln" and has(found, "-s", "--symbolic"):
        for (
            word
        ) in sources:  # later words that go through the new link reach its target
            sink.link(word, dest)
            sink.link(word, _into(dest, word))


_PERMISSION_FLAGS = LazyPattern(r"-[RcfvhHLPV]+")


def _chmod(sink: Sink, base: str, args: list[str]) -> None:
    """`chmod`, `chown`, `chgrp`, `chattr`: the first positional is the mode or owner."""
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
        elif not _PERMISSION_FLAGS.fullmatch(arg):
            positionals.append(arg)  # modes such as `-w` or `+i` included
    for word in positionals if by_reference else positionals[1:]:
        sink.path("remove", word, f"`{base}`")


def _mknod(sink: Sink, base: str, args: list[str]) -> None:
    _, positionals = options(args, words("-m --mode --context"), permute=True)
    if positionals:
        sink.path("write", positionals[0], f"`{base}`")


def _dd(sink: Sink, base: str, args: list[str]) -> None:
    for arg in args:
        if arg.startswith("of="):
            sink.path("write", arg[3:], "`dd of=`")


def _sort(sink: Sink, base: str, args: list[str]) -> None:
    with_value = words(
        "-o --output -k --key -t --field-separator -T --temporary-directory -S "
        "--buffer-size --parallel --batch-size --compress-program --files0-from "
        "--random-source"
    )
    found, _ = options(args, with_value, permute=True)
    for word in values(found, "-o", "--output"):
        sink.path("write", word, "`sort -o`")


def _uniq(sink: Sink, base: str, args: list[str]) -> None:
    with_value = words("-f -s -w --skip-fields --skip-chars --check-chars")
    _, positionals = options(args, with_value, permute=True)
    if len(positionals) > 1:
        sink.path("write", positionals[1], "`uniq` (output)")


_SED_RUNS = LazyPattern(r"(?:^|[;{}\n]|[0-9$/])\s*e\b|/[gpiImMw0-9]*e")
_SED_INPLACE = LazyPattern(r"-[nErsuz]*i.*|--in-place(=.*)?")


def _sed(sink: Sink, base: str, args: list[str]) -> None:
    # `-i` takes an optional attached suffix, which an options table cannot say.
    inplace = any(_SED_INPLACE.fullmatch(arg) for arg in args)
    kept = [arg for arg in args if not _SED_INPLACE.fullmatch(arg)]
    with_value = words("-e --expression -f --file -l --line-length")
    found, positionals = options(kept, with_value, permute=True)
    scripts = values(found, "-e", "--expression")
    if not scripts and not has(found, "-f", "--file") and positionals:
        script = positionals.pop(0)
        if script == "" and inplace and positionals:  # BSD `sed -i '' script file`
            script = positionals.pop(0)
        scripts.append(script)
    for script in scripts:
        # `w file` and `e cmd` live here; only `e` (a command or the `s///e` flag) runs
        # programs, so a script that merely mentions `tether stop` does not.
        sink.emit(
            "code", script, "a `sed` script", runs=_SED_RUNS.search(script) is not None
        )
    for word in positionals:
        sink.path(
            "write" if inplace else "mention", word, "`sed -i`" if inplace else "`sed`"
        )


def _find(sink: Sink, base: str, args: list[str]) -> None:
    i = 0
    while i < len(args) and (args[i] in ("-H", "-L", "-P") or args[i][:2] == "-O"):
        i += 1
    roots: list[str] = []
    while i < len(args) and args[i][:1] != "-" and args[i] not in ("(", ")", "!", ","):
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
                sink.path("remove", root, "`find -delete`")
        elif word in ("-fprint", "-fprint0", "-fls", "-fprintf") and j < len(
            expression
        ):
            sink.path("write", expression[j], f"`find {word}`")
            j += 1
        elif word in ("-exec", "-execdir", "-ok", "-okdir"):
            end = j
            while end < len(expression) and expression[end] not in (";", "+"):
                end += 1
            command, j = expression[j:end], end + 1
            for root in roots if command else []:
                # `{}` is any name under the root: a path with an unknown tail.
                found = root.rstrip("/") + "/" + OPAQUE_WORD
                sink.run([w.replace("{}", found) for w in command])


PROGRAMS: dict[str, _Handler] = {
    "rm": _targets("unlink", "--interactive"),
    "rmdir": _targets("remove", ""),
    "unlink": _targets("unlink", ""),
    "shred": _targets("remove", "-n -s --iterations --size --random-source"),
    "setfacl": _targets(
        "remove",
        "-m -M -x -X --set --set-file --modify --modify-file --remove --remove-file",
    ),
    "tee": _targets("write", "--output-error"),
    "touch": _targets("write", "-r -t -d --reference --date --time"),
    "truncate": _targets("write", "-s -r --size --reference"),
    "mkdir": _targets("write", "-m --mode --context"),
    "mkfifo": _targets("write", "-m --mode --context"),
    "mknod": _mknod,
    "cp": _copy,
    "mv": _copy,
    "ln": _copy,
    "install": _copy,
    "rsync": _copy,
    "scp": _copy,
    "chmod": _chmod,
    "chown": _chmod,
    "chgrp": _chmod,
    "chattr": _chmod,
    "dd": _dd,
    "sort": _sort,
    "uniq": _uniq,
    "sed": _sed,
    "find": _find,
}
"""Programs that write, remove or re-permission some of their arguments."""
