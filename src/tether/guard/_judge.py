"""The guard's judgment of one tool call, free of attrs: what `StopGuard` and the hook run.

The job: judge one tool call (a tool name and its input) against the protected paths
(the stop directories and the setup record) and answer None (allowed) or the reason to
refuse, naming the path or the command. File tools are judged by their target; Bash
commands by the effects `_effects` finds in them; other tools by any string that names
a protected path. Reading a stop is always allowed, so an agent can report that it is
held. `StopGuard` (`_guard`) wraps this in the public `GuardVerdict`.

Why a module of its own: `tether guard --claude-hook` judges every agent tool call in
a fresh process, whose start spec 05 bounds at 3x a bare interpreter's. This module and
the shell model it reads import neither attrs, `typing` nor `pathlib` (together about
as much as the rest of the hook's start, measured in `docs/benchmarks.md`, "Guard hook
start-up"); its values are `Slotted` classes, and protected paths and directories may
be given as strings.

Boundary: the guard does not find the protected paths (`tether.stop` does), runs nothing,
and holds against an agent acting by mistake. Against an agent acting on purpose only an
operating-system account boundary binds (spec 02, "The guard").
"""

from __future__ import annotations

import os
import posixpath
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

from .._slotted import Slotted
from ._effects import command_effects
from ._lazyre import LazyPattern
from ._programs import UNKNOWN, words
from ._shell import ShellTooComplex

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` is not imported at run time: see `_slotted`
    from typing import Any, Final, Literal, NoReturn

    from ._walker import Effect

    _Kind = Literal["inside", "ancestor"]

__all__ = ("TIME_LIMIT", "Judge")

_VERBS = frozenset({"stop", "lift", "setup"})
"""`tether` subcommands that are the person's acts (spec 02, "The verbs")."""
_FILE_TOOLS = frozenset({"write", "edit", "multiedit", "notebookedit"})
_SHELL_TOOLS = frozenset({"bash", "shell"})
_READ_TOOLS = words(
    "read glob grep ls notebookread webfetch websearch todowrite todoread task agent "
    "exitplanmode bashoutput killshell killbash askuserquestion skill slashcommand "
    "listmcpresourcestool readmcpresourcetool"
)
_TARGET_FIELDS = ("file_path", "path", "notebook_path")
_GLOB_CHARS = frozenset("*?[")
_TETHER_WORD = LazyPattern(r"(?<![\w-])tether(?![\w-])")
# `tether.stop` (a module) and `setup.py` are not verbs; `"stop"` and `tether stop` are.
_VERB_WORD = LazyPattern(r"(?<![\w.-])(stop|lift|setup)(?![\w.-])")
_CASE_INSENSITIVE = sys.platform == "darwin"
_MAX_SCAN_VALUES = 100_000
"""Values (keys, strings, numbers, lists, objects) of an unknown tool's input judged at
most; past it the guard refuses what it cannot judge. Depth is no bound: JSON Schema
2020-12 inputs nest deeper than a handful of levels, and the walk uses no recursion."""
_MAX_SCAN_CHARS = 8_000_000
"""Characters of text (keys and strings together; a text met again is judged once) of an
unknown tool's input judged at most; past it the guard refuses what it cannot judge."""
TIME_LIMIT = 0.5
"""Seconds a command may take to judge; past it the guard refuses. A host waits for a
hook only so long before it lets the call run, so a judgment never runs unbounded."""
_LONG_WORD = 4096
"""Words longer than this are judged by their start, never matched as a pattern."""
_PATH_IN_CODE = LazyPattern(r"(?:~|\$\{?HOME\}?)?/[^\s'\"`;,()<>|&{}\[\]]*")
"""A path spelled in inline code (`open("/srv/x/../tether/1/stop")`)."""
_PATH_HEAD = len("${HOME}")
"""The most characters `_PATH_IN_CODE` matches before its `/`."""
_SCAN_WINDOW = 1 << 16
"""Characters of inline code one search for a path covers between looks at the
deadline (a search over megabytes takes longer than the guard has)."""


class _Refusal(Exception):
    """Carries the first reason to refuse out of the checks."""


class Judge:
    """The guard over protected paths resolved once, for every call of a runtime.

    The protected paths, their spellings and identities, and the environment are
    pinned when the judge is built (a runtime pins its stop folder and setup the same
    way), so a call pays only for what it can touch: a read-only call that names no
    command costs a dictionary look-up.
    """

    __slots__ = ("_broken", "_checks", "_kinds", "_time_limit")

    def __init__(
        self,
        protected: Sequence[str | os.PathLike[str]],
        *,
        environ: Mapping[str, str] | None = None,
        time_limit: float = TIME_LIMIT,
    ) -> None:
        """Resolve `protected` (relative paths from this process's directory).

        `time_limit`: seconds one command may take to judge; past it, it is refused.
        """
        env = dict(os.environ if environ is None else environ)
        self._time_limit = time_limit
        self._kinds: dict[str, str] = {}
        self._broken = ""
        """Why the paths could not be resolved; every call is then refused."""
        try:
            self._checks = _CallChecks(protected, environ=env)
        except Exception as exc:  # fail closed, and say why on every call
            self._checks = _CallChecks((), environ=env)
            self._broken = f"the guard could not resolve the protected paths: {exc!r}"

    def lets_reads_by(self, tool_name: str) -> bool:
        """Whether every read-only call of this tool passes, whatever its input.

        A tool that is not a shell reads; a read of a stop is allowed (spec 02).
        """
        return not self._broken and self._kind(tool_name) not in _SHELL_TOOLS

    def _kind(self, tool_name: str) -> str:
        key = self._kinds.get(tool_name)
        if key is None:
            key = self._kinds[tool_name] = re.sub(r"[\s_-]", "", tool_name).lower()
        return key

    def refusal(
        self,
        tool_name: str,
        tool_input: Mapping[str, Any],
        *,
        cwd: str | os.PathLike[str],
        mutating: bool | None = None,
    ) -> str | None:
        """Why one call is refused; None when it may go on.

        Never raises: any error inside the judgment is a reason (the guard fails
        closed).
        """
        if self._broken:
            return self._broken
        try:
            key = self._kind(tool_name)
            if key not in _SHELL_TOOLS and isinstance(tool_input, Mapping):
                if mutating is False or (mutating is None and key in _READ_TOOLS):
                    return None  # reading a stop is allowed (spec 02)
                if not self._checks.entries:
                    return None
            deadline = time.monotonic() + self._time_limit
            self._checks.at(cwd, deadline).check(tool_name, key, tool_input, mutating)
        except _Refusal as refusal:
            return str(refusal)
        except Exception as exc:  # fail closed: a crashing guard lets no call by
            return f"the guard could not judge this call: {exc!r}"
        return None


def _norm(path: str) -> str:
    if not path.isascii():  # NFC leaves ASCII as it is: most paths never load the table
        import unicodedata

        path = unicodedata.normalize("NFC", path)
    return path.casefold() if _CASE_INSENSITIVE else path


def _under(path: str, root: str) -> bool:
    """`path` is `root` or inside it (component-wise: `/a/bc` is not under `/a/b`)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _identity(path: str, *, follow: bool = True) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=follow)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _link_forms(path: str) -> tuple[str, ...]:
    """Like `_forms`, but a link at the end stays itself: only its folder resolves."""
    lexical = posixpath.normpath(path)
    folder, name = posixpath.split(lexical)
    try:
        real = posixpath.join(os.path.realpath(folder), name)
    except (OSError, ValueError):
        real = lexical
    return tuple(dict.fromkeys((_norm(lexical), _norm(real))))


def _forms(path: str) -> tuple[str, ...]:
    """The lexical and the symlink-resolved spelling of an absolute path, normalised."""
    lexical = posixpath.normpath(path)
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        real = lexical
    return tuple(dict.fromkeys((_norm(lexical), _norm(real))))


class _Hit(Slotted):
    __match_args__ = ("kind", "path", "label", "maybe", "anchored")
    __slots__ = ("anchored", "kind", "label", "maybe", "path")

    def __init__(
        self,
        kind: _Kind,
        path: str,
        label: str,
        *,
        maybe: bool = False,
        anchored: bool = True,
    ) -> None:
        self.kind: Final = kind
        """The path is in (or is) a protected path, or holds one."""
        self.path: Final = path
        """The path as resolved, or the word when it is a pattern."""
        self.label: Final = label
        """The protected path, as given."""
        self.maybe: Final = maybe
        """A pattern or a value known only at run time could expand to it."""
        self.anchored: Final = anchored
        """For `maybe`: the word has a known start; False when it could be anything."""


class _Entry(Slotted):
    __match_args__ = ("label", "forms", "parts", "identity", "above")
    __slots__ = ("above", "forms", "identity", "label", "parts")

    def __init__(
        self,
        *,
        label: str,
        forms: tuple[str, ...],
        parts: tuple[tuple[str, ...], ...],
        identity: tuple[int, int] | None,
        above: frozenset[tuple[int, int]],
    ) -> None:
        self.label: Final = label
        self.forms: Final = forms
        self.parts: Final = parts
        self.identity: Final = identity
        self.above: Final = above


class _CallChecks:
    """The checks one call is put through, over the protected paths resolved once.

    Holds each protected path's spellings and identities and the environment; `at()`
    gives a view judging from one call's directory by its deadline, whose `check()`
    raises `_Refusal` with the first reason found. `Judge` turns that into an answer.
    """

    def __init__(
        self, protected: Sequence[str | os.PathLike[str]], *, environ: Mapping[str, str]
    ) -> None:
        self.environ = environ
        self.home = environ.get("HOME") or os.path.expanduser("~")
        self.cwd = os.getcwd()
        self.deadline: float | None = None
        self.entries = [self._entry(p) for p in protected]
        exact: dict[str, str] = {}
        broad: dict[str, str] = {}
        for entry in self.entries:
            for spelling in self._spellings(entry.forms):
                exact[spelling] = entry.label
            parents = [posixpath.dirname(form) for form in entry.forms]
            for spelling in self._spellings(p for p in parents if p.count("/") >= 2):
                if spelling not in (self.home, "/"):
                    broad[spelling] = entry.label
        broad.update(exact)
        self.tops = tuple(
            {"/" + form.split("/")[1] for entry in self.entries for form in entry.forms}
        )
        """The first component of every protected path: `/srv`, `/home`, `/tmp`."""
        self.exact = exact
        self.broad = broad
        self.exact_re = self._alternation(exact)
        self.broad_re = self._alternation(broad)

    def _entry(self, path: str | os.PathLike[str]) -> _Entry:
        absolute = posixpath.join(self.cwd, os.path.expanduser(os.fspath(path)))
        forms = _forms(absolute)
        above: set[tuple[int, int]] = set()
        parent = posixpath.dirname(posixpath.normpath(absolute))
        while parent != "/":
            identity = _identity(parent)
            if identity is not None:
                above.add(identity)
            parent = posixpath.dirname(parent)
        return _Entry(
            label=posixpath.normpath(absolute),
            forms=forms,
            parts=tuple(tuple(p for p in form.split("/") if p) for form in forms),
            identity=_identity(absolute),
            above=frozenset(above),
        )

    def _spellings(self, forms: Iterable[str]) -> list[str]:
        """Ways a command or code can spell a path: as is, from `~` or `$HOME`."""
        out: list[str] = []
        homes = {_norm(h) for h in (self.home, os.path.realpath(self.home))}
        for form in forms:
            out.append(form)
            for home in homes:
                if form.startswith(home.rstrip("/") + "/"):
                    rest = form[len(home.rstrip("/")) :]
                    out.extend(("~" + rest, "$HOME" + rest, "${HOME}" + rest))
        return out

    @staticmethod
    def _alternation(spellings: Mapping[str, str]) -> LazyPattern | None:
        # Compiled only when a command names a spelling (`_names` tests substrings
        # first): most never do.
        if not spellings:
            return None
        body = "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))
        flags = re.IGNORECASE if _CASE_INSENSITIVE else 0
        return LazyPattern(rf"(?<![\w.-])(?:{body})(?![\w.-])", flags)

    def at(
        self, cwd: str | os.PathLike[str], deadline: float | None = None
    ) -> _CallChecks:
        """This guard, judging relative paths from `cwd`, done by `deadline`."""
        # A shallow copy (`copy` is not imported).
        view = _CallChecks.__new__(_CallChecks)
        view.__dict__.update(self.__dict__)
        view.deadline = deadline
        view.cwd = posixpath.normpath(
            os.path.join(os.getcwd(), os.path.expanduser(cwd))
        )
        return view

    # -- tool calls --------------------------------------------------------------------

    def check(
        self,
        tool_name: str,
        key: str,
        tool_input: Mapping[str, Any],
        mutating: bool | None,
    ) -> None:
        if not isinstance(tool_input, Mapping):
            raise _Refusal(f"{tool_name}: the tool input is not an object")
        if key in _SHELL_TOOLS:
            command = tool_input.get("command")
            if isinstance(command, list) and all(isinstance(w, str) for w in command):
                import shlex  # only for a command given as a list of words

                command = shlex.join(command)
            if not isinstance(command, str):
                raise _Refusal(f"{tool_name}: the call has no command string to judge")
            self.check_command(command)
            return
        if not self.entries:
            return
        if mutating is None:
            mutating = (
                True if key in _FILE_TOOLS else False if key in _READ_TOOLS else None
            )
        if mutating is False:
            return
        targets = [v for f in _TARGET_FIELDS if isinstance(v := tool_input.get(f), str)]
        if key in _FILE_TOOLS and not targets:
            raise _Refusal(f"{tool_name}: the call names no target path")
        for target in targets:
            path = posixpath.join(self.cwd, self._tilde(target))
            for hit in self.concrete(path):
                if hit.kind == "inside":
                    raise _Refusal(
                        f"{tool_name} would change {hit.path}, {self._where(hit)}"
                    )
        if key not in _FILE_TOOLS:
            self._scan(tool_name, tool_input)

    def _tilde(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            return self.home + path[1:]
        return os.path.expanduser(path)

    def _scan(self, tool_name: str, value: object) -> None:
        """Refuse when any key or string of an unknown tool's input names a protected path.

        Every key and string is judged, however deep it is nested (a walk with a stack
        of its own), so the work is bounded by what the input holds, not by its depth:
        an input of more than `_MAX_SCAN_VALUES` values or `_MAX_SCAN_CHARS` characters
        of text, or one that takes longer than the deadline, is refused as one the guard
        cannot judge.
        """
        todo: list[object] = [value]
        judged: set[str] = set()  # a text met again was judged already
        values = chars = 0
        while todo:
            value = todo.pop()
            values += 1
            if values > _MAX_SCAN_VALUES:
                self._too_large(tool_name, f"more than {_MAX_SCAN_VALUES:,} values")
            if (
                not values & 1023
                and self.deadline is not None
                and time.monotonic() > self.deadline
            ):
                raise _Refusal(
                    f"{tool_name}: the input cannot be judged in the time the guard "
                    "has; it refuses what it cannot judge: send a smaller input"
                )
            if isinstance(value, str):
                texts: Iterable[object] = (value,)
            elif isinstance(value, list | tuple):
                todo.extend(value)
                continue
            # A `dict` first: the `Mapping` check is slower, and most values are not.
            elif isinstance(value, dict) or (
                not isinstance(value, int | float)
                and value is not None
                and isinstance(value, Mapping)
            ):
                todo.extend(value.values())
                texts = value.keys()
            else:
                continue
            for text in texts:
                if not isinstance(text, str) or text in judged:
                    continue
                judged.add(text)
                chars += len(text)
                if chars > _MAX_SCAN_CHARS:
                    self._too_large(
                        tool_name, f"more than {_MAX_SCAN_CHARS:,} characters of text"
                    )
                # Only a text with a `/`, `tether`, or a `~` or `.` first can name a
                # stop (`_scan_string`); most texts of a large input have none.
                if "/" in text or "tether" in text or text.startswith(("~", ".")):
                    self._scan_string(tool_name, text)

    @staticmethod
    def _too_large(tool_name: str, what: str) -> NoReturn:
        raise _Refusal(
            f"{tool_name}: the input holds {what}; the guard judges at most "
            f"{_MAX_SCAN_VALUES:,} values and {_MAX_SCAN_CHARS:,} characters of an "
            "input and refuses what it cannot judge: send a smaller input"
        )

    def _scan_string(self, tool_name: str, value: str) -> None:
        self._names(value, f"{tool_name} input", broad=False)
        if value and value[0] in "/~." and not any(c in value for c in " \n\t"):
            path = posixpath.join(self.cwd, self._tilde(value))
            for hit in self.concrete(path):
                if hit.kind == "inside":
                    raise _Refusal(
                        f"{tool_name} names {hit.path}, {self._where(hit)}; "
                        "the guard cannot tell whether the tool writes there"
                    )

    # -- Bash ----------------------------------------------------------------------------

    def check_command(self, command: str) -> None:
        try:
            effects = command_effects(
                command,
                cwd=self.cwd,
                home=self.home,
                environ=self.environ,
                deadline=self.deadline,
            )
        except (ShellTooComplex, RecursionError, MemoryError) as exc:
            raise _Refusal(
                f"the guard cannot tell what this command does ({exc}); it refuses "
                "what it cannot judge: split the command into smaller ones"
            ) from None
        for effect in effects:
            if effect.kind == "tether":
                self._tether(effect)
            elif effect.kind in ("write", "remove", "unlink", "mention"):
                self._path_effect(effect)
            elif effect.kind == "hidden":
                raise _Refusal(
                    f"{effect.how}: the guard cannot see what it does, and it could "
                    "reach a stop; run the decoded text as a command of its own instead"
                )
            elif effect.kind == "code":
                self._names(effect.value, effect.how, broad=True, verbs=effect.runs)
                self._paths_in_code(effect)
                for entry in self.entries:
                    if effect.cwd is not None and any(
                        _under(_norm(effect.cwd), form) for form in entry.forms
                    ):
                        raise _Refusal(
                            f"{effect.how} runs inside the protected path {entry.label}"
                        )
            else:  # opaque, unparsed: judged by what the text names
                what = (
                    "cannot be split into commands"
                    if effect.kind == "unparsed"
                    else f"runs code the guard cannot see ({effect.how})"
                )
                self._names(effect.value, f"the command {what}, and it", broad=True)
        # A judgment that overran its bound is not trusted: the host may have given
        # up waiting, and the next such command may take longer still.
        self._in_time()

    def _in_time(self) -> None:
        """Refuse the command once the deadline has passed."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _Refusal(
                "the guard cannot tell what this command does in the time it has; it "
                "refuses what it cannot judge: split the command into smaller ones"
            )

    def _paths_in_code(self, effect: Effect) -> None:
        """Paths in inline code spelled oddly or naming a folder above a stop.

        The odd spellings are `..`, `//` and `/./`; each path is normalised and judged
        as named.
        """
        if not self.entries:
            return
        seen: set[str] = set()
        for count, found in enumerate(self._paths_spelled(effect.value)):
            if not count & 255 and self.deadline and time.monotonic() > self.deadline:
                raise _Refusal(
                    f"{effect.how} names more paths than the guard can judge in time; "
                    "it refuses what it cannot judge"
                )
            spelled = found.group(0)
            path = re.sub(r"^(?:~|\$\{?HOME\}?)(?=/)", lambda _: self.home, spelled)
            path = posixpath.normpath(path)
            # Only a path that starts where a protected path starts can reach one.
            if len(path) > _LONG_WORD or path in seen or not path.startswith(self.tops):
                continue
            seen.add(path)
            for hit in self.concrete(path):
                if hit.kind == "inside" or self._guarded_ancestor(hit.path):
                    raise _Refusal(
                        f"{effect.how} names {spelled}, {self._where(hit)}; "
                        "the guard cannot tell whether it writes there"
                    )

    def _paths_spelled(self, code: str) -> Iterator[re.Match[str]]:
        """`_PATH_IN_CODE`'s matches in `code`, as `finditer` finds them.

        The search goes a window of `_SCAN_WINDOW` characters at a time and looks at
        the deadline before each (`_in_time`).
        """
        pattern = _PATH_IN_CODE.compiled()
        pos = 0
        while pos < len(code):
            self._in_time()
            end = pos + _SCAN_WINDOW
            found = pattern.search(code, pos, end)
            if found is None:
                if end >= len(code):
                    return
                # A path not found has its `/` past the window, its head just before.
                pos = end - _PATH_HEAD
                continue
            if found.end() == end:  # the window cut the path: match it whole
                found = pattern.match(code, found.start())
                assert found is not None  # it matched a prefix of the same text
            yield found
            pos = found.end()

    def _guarded_ancestor(self, path: str) -> bool:
        """A folder above a stop path that naming counts as reaching it.

        Every such folder counts but `/` and the home folder (commands name those all
        the time).
        """
        return path not in ("/", _norm(self.home), _norm(os.path.realpath(self.home)))

    def _tether(self, effect: Effect) -> None:
        verb = effect.value
        if UNKNOWN in verb:
            raise _Refusal(
                f"the command runs {effect.how} with a subcommand known only at run "
                "time; stop, lift and setup are the person's acts"
            )
        if verb in _VERBS:
            runs = (
                f"runs `tether {verb}`"
                if "known only at run time" not in effect.how
                else f"runs {effect.how} given `{verb}`: it could be `tether {verb}`"
            )
            raise _Refusal(
                f"the command {runs}; stop, lift and setup are the person's acts, "
                "from their own terminal, never an agent's"
            )

    def _names(self, text: str, what: str, *, broad: bool, verbs: bool = True) -> None:
        pattern = self.broad_re if broad else self.exact_re
        spellings = self.broad if broad else self.exact
        found = None
        # Substring tests first: a regular expression with look-arounds tries every
        # position, which costs seconds on a command of megabytes.
        # Every spelling holds a `/` (`/srv/…`, `~/…`, `$HOME/…`).
        if (
            pattern is not None
            and "/" in text
            and (_CASE_INSENSITIVE or any(spelling in text for spelling in spellings))
        ):
            found = pattern.search(text)
        if found is not None:
            spelling = found.group(0)
            key = spelling.casefold() if _CASE_INSENSITIVE else spelling
            if key in self.exact:
                raise _Refusal(f"{what} names the protected path {self.exact[key]}")
            label = self.broad.get(key, next(iter(self.broad.values())))
            raise _Refusal(
                f"{what} names {spelling}, the folder of the protected path {label}"
            )
        if (
            verbs
            and "tether" in text
            and any(verb in text for verb in _VERBS)
            and _TETHER_WORD.search(text)
            and (verb := _VERB_WORD.search(text))
        ):
            raise _Refusal(
                f"{what} mentions `tether` and `{verb.group(1)}`: stop, lift and setup "
                "are the person's acts"
            )

    def _path_effect(self, effect: Effect) -> None:
        shown = effect.value.replace(UNKNOWN, "…")
        follow = effect.kind != "unlink"
        for hit in self.relate(effect.value, effect.cwd, follow=follow):
            if effect.kind == "mention" and (hit.maybe and not hit.anchored):
                continue
            if effect.kind == "mention" and hit.kind == "ancestor":
                # A folder above a stop path (`tar -C`, `git -C`, `rsync` there) is in
                # doubt, however many levels up; a mention of `~` or `/` is not.
                if hit.maybe or not self._guarded_ancestor(hit.path):
                    continue
                raise _Refusal(
                    f"{effect.how} names {hit.path}, {self._where(hit)}; "
                    "the guard cannot tell whether it writes there"
                )
            if effect.kind == "write" and hit.kind != "inside":
                continue
            if not hit.anchored:
                raise _Refusal(
                    f"{effect.how} would change `{shown}`, a path known only at run "
                    f"time that could be the protected path {hit.label}"
                )
            if hit.maybe:
                raise _Refusal(
                    f"{effect.how}: `{shown}` could expand to {self._maybe(hit)}"
                )
            if effect.kind == "mention":
                raise _Refusal(
                    f"{effect.how} names {hit.path}, {self._where(hit)}; "
                    "the guard cannot tell whether it writes there"
                )
            verb = "change" if effect.kind == "write" else "remove or change"
            raise _Refusal(f"{effect.how} would {verb} {hit.path}, {self._where(hit)}")
        if effect.kind == "mention":
            self._names(effect.value, effect.how, broad=False, verbs=False)

    @staticmethod
    def _maybe(hit: _Hit) -> str:
        if hit.kind == "ancestor":
            return f"a directory that holds the protected path {hit.label}"
        return f"the protected path {hit.label} or a path inside it"

    @staticmethod
    def _where(hit: _Hit) -> str:
        if hit.kind == "ancestor":
            return f"which holds the protected path {hit.label}"
        if hit.path == hit.label:
            return f"the protected path {hit.label}"
        return f"inside the protected path {hit.label}"

    # -- paths -----------------------------------------------------------------------------

    def relate(self, value: str, cwd: str | None, *, follow: bool = True) -> list[_Hit]:
        """How an expanded word relates to the protected paths.

        `follow`: a symbolic link at the end of the path is judged by what it points
        to; without, by its own name (`rm link` removes the link only).
        """
        if not self.entries:
            return []
        if len(value) > _LONG_WORD:
            value = value[:_LONG_WORD] + UNKNOWN
        brace = "{" in value and ("," in value or ".." in value)
        special = UNKNOWN in value or brace or any(c in value for c in _GLOB_CHARS)
        if not value.startswith("/"):
            if value.startswith(UNKNOWN) or cwd is None:
                label = self.entries[0].label
                return [_Hit("inside", value, label, maybe=True, anchored=False)]
            value = posixpath.join(cwd, value)
        if not special:
            return self.concrete(value, follow=follow)
        if UNKNOWN in value or brace or "**" in value:
            return self._prefix(value)
        return self._glob(value)

    def concrete(self, path: str, *, follow: bool = True) -> list[_Hit]:
        hits: list[_Hit] = []
        forms = _forms(path) if follow else _link_forms(path)
        for entry in self.entries:
            for form in forms:
                for protected in entry.forms:
                    if _under(form, protected):
                        hits.append(_Hit("inside", form, entry.label))
                    elif _under(protected, form):
                        hits.append(_Hit("ancestor", form, entry.label))
        if hits:
            return hits
        # Aliases the spelling does not show: bind mounts, hard links.
        real = forms[-1]
        for entry in self.entries:
            probe = real
            while True:
                identity = _identity(probe, follow=follow or probe != real)
                if identity is not None and identity == entry.identity:
                    return [_Hit("inside", real, entry.label)]
                if probe == real and identity is not None and identity in entry.above:
                    return [_Hit("ancestor", real, entry.label)]
                if probe == "/":
                    break
                probe = posixpath.dirname(probe)
        return hits

    def _glob(self, pattern: str) -> list[_Hit]:
        """Could the glob expand to a protected path, something in it, or above it?"""
        parts = [p for p in posixpath.normpath(_norm(pattern)).split("/") if p]
        first = next(
            (i for i, p in enumerate(parts) if any(c in p for c in _GLOB_CHARS)), None
        )
        if first is None:  # `x/*/..`: the pattern normalised away
            return self.concrete(posixpath.normpath(pattern))
        literal = "/" + "/".join(parts[:first])
        hits: list[_Hit] = []
        for entry in self.entries:
            for literal_form in _forms(literal):
                head = [p for p in literal_form.split("/") if p]
                full = head + parts[first:]
                for protected in entry.parts:
                    kind = _match_parts(full, protected, len(head))
                    if kind is not None:
                        hits.append(_Hit(kind, pattern, entry.label, maybe=True))
        return hits

    def _prefix(self, value: str) -> list[_Hit]:
        """A word with a part known only at run time: judge what precedes that part."""
        cut = min(
            (value.find(c) for c in (UNKNOWN, "{", "*", "?", "[") if c in value),
            default=len(value),
        )
        head, tail = posixpath.split(_norm(value[:cut]))
        starts = {form.rstrip("/") + "/" + tail for form in _forms(head or "/")}
        return [
            _Hit("inside", value, entry.label, maybe=True)
            for entry in self.entries
            for protected in entry.forms
            if any(
                (protected + "/").startswith(start)
                or start.startswith(protected.rstrip("/") + "/")
                for start in starts
            )
        ]


def _match_parts(
    pattern: list[str], protected: tuple[str, ...], known: int
) -> _Kind | None:
    """Match glob components (the Glob tool's dialect) against a protected path's."""
    if pattern[:known] != list(protected[:known]) and not (
        len(protected) <= known and list(protected) == pattern[: len(protected)]
    ):
        return None
    # Only a glob pattern gets here: the hook's common path does not load the dialect.
    from .._glob import compile_glob

    common = min(len(pattern), len(protected))
    for i in range(known, common):
        if not compile_glob(pattern[i]).match(protected[i]):
            return None
    return "ancestor" if len(pattern) < len(protected) else "inside"
