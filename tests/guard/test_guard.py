"""The guard on agent tool calls (spec 02, "The guard"): the table and its edges."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.errors import ErrorCode, GuardRefused
from tether.guard import GuardVerdict, StopGuard, guard_tool_call
from tether.host import StopClass, ToolContext
from tether.host import tool as make_tool

if TYPE_CHECKING:
    from collections.abc import Mapping


@attrs.frozen
class World:
    """A machine-like tree: a shared folder with a stop, a look-alike folder, a home."""

    root: Path
    folder: Path
    stop_dir: Path
    other: Path
    home: Path
    setup: Path
    ws: Path
    link: Path

    @property
    def protected(self) -> list[Path]:
        return [self.stop_dir, self.setup]

    @property
    def environ(self) -> dict[str, str]:
        return {"HOME": str(self.home), "PATH": "/usr/bin:/bin"}

    def fill(self, text: str) -> str:
        for name in (
            "root",
            "folder",
            "stop_dir",
            "other",
            "home",
            "setup",
            "ws",
            "link",
        ):
            text = text.replace(f"@{name.upper()}@", str(getattr(self, name)))
        return text


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def make_world(tmp_path: Path) -> World:
    """Build the tree of `World` under `tmp_path`."""
    folder = tmp_path / "srv" / "tether"
    stop_dir = folder / "1000"
    stop_dir.mkdir(parents=True)
    (stop_dir / "stop").write_text("")
    other = tmp_path / "srv" / "tether-other"
    other.mkdir()
    (other / "x").write_text("x")
    home = tmp_path / "home"
    setup = home / ".config" / "tether" / "stop-setup.json"
    setup.parent.mkdir(parents=True)
    setup.write_text("{}")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("notes")
    link = ws / "stoplink"
    link.symlink_to(stop_dir)
    return World(tmp_path, folder, stop_dir, other, home, setup, ws, link)


def judge(
    world: World,
    tool: str,
    tool_input: Mapping[str, Any],
    *,
    mutating: bool | None = None,
) -> GuardVerdict:
    filled = {k: _filled(world, v) for k, v in tool_input.items()}
    return guard_tool_call(
        tool,
        filled,
        cwd=world.ws,
        protected=world.protected,
        mutating=mutating,
        environ=world.environ,
    )


def _filled(world: World, value: Any) -> Any:
    if isinstance(value, str):
        return world.fill(value)
    if isinstance(value, list):
        return [_filled(world, item) for item in value]
    return value


def bash(command: str, names: str, *, id: str) -> Any:
    """A Bash row that must be refused with a reason naming `names`."""
    return pytest.param("Bash", {"command": command}, None, names, id=id)


def ok(command: str, *, id: str) -> Any:
    """A Bash row that must be allowed."""
    return pytest.param("Bash", {"command": command}, None, None, id=id)


def tool(
    name: str,
    tool_input: dict[str, Any],
    names: str | None,
    *,
    id: str,
    mutating: bool | None = None,
) -> Any:
    """A row for a non-shell tool; `names` None means allowed."""
    return pytest.param(name, tool_input, mutating, names, id=id)


GUARD_TABLE = [
    # -- the person's verbs, however they are spelled --------------------------------
    bash("tether stop", "tether stop", id="refuse-tether-stop"),
    bash("tether lift", "tether lift", id="refuse-tether-lift"),
    bash(
        "tether setup --shared-folder /srv/tether",
        "tether setup",
        id="refuse-tether-setup",
    ),
    bash(
        "python -m tether stop --reason x", "tether stop", id="refuse-python-m-tether"
    ),
    bash(
        ".venv/bin/python3.11 -m tether.cli lift",
        "tether lift",
        id="refuse-venv-python-m",
    ),
    bash("/usr/local/bin/tether lift", "tether lift", id="refuse-full-path"),
    bash("env TETHER_HOME=/x tether stop", "tether stop", id="refuse-via-env"),
    bash("sudo -u root tether lift", "tether lift", id="refuse-via-sudo"),
    bash("sh -c 'tether stop'", "tether stop", id="refuse-sh-c"),
    bash('bash -lc "cd /tmp && tether lift"', "tether lift", id="refuse-bash-lc"),
    bash("echo $(tether stop)", "tether stop", id="refuse-dollar-paren"),
    bash("echo `tether lift`", "tether lift", id="refuse-backticks"),
    bash("true; tether stop", "tether stop", id="refuse-after-semicolon"),
    bash("make && tether setup", "tether setup", id="refuse-after-and"),
    bash("false || tether lift", "tether lift", id="refuse-after-or"),
    bash("yes | tether stop", "tether stop", id="refuse-in-pipe"),
    bash(
        "timeout 5 nice -n 3 uv run tether stop",
        "tether stop",
        id="refuse-nested-wrappers",
    ),
    bash("T=tether; $T lift", "tether lift", id="refuse-variable-program"),
    bash("eval 'tether lift'", "tether lift", id="refuse-eval"),
    bash("echo tether stop | bash", "tether", id="refuse-code-piped-into-shell"),
    bash(
        'bash -c "$(printf tether) stop"',
        "tether",
        id="refuse-program-built-at-run-time",
    ),
    bash(
        "bash <<'EOF'\necho hi\ntether lift\nEOF",
        "tether lift",
        id="refuse-heredoc-to-shell",
    ),
    bash(
        "python3 -c 'import tether.cli as c; c.main()' stop",
        "stop",
        id="refuse-inline-python-verb",
    ),
    # -- writes, moves and removals inside the stop directory --------------------------
    bash("echo x > @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-redirect"),
    bash("echo x >> @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-append"),
    bash("ls nothing 2> @STOP_DIR@/err", "@STOP_DIR@/err", id="refuse-stderr-redirect"),
    bash("make &> @STOP_DIR@/log", "@STOP_DIR@/log", id="refuse-both-redirect"),
    bash(
        "cat > @STOP_DIR@/stop <<'EOF'\nx\nEOF",
        "@STOP_DIR@/stop",
        id="refuse-heredoc-into-stop",
    ),
    # -- code fed where the parser cannot see it (regressions) --------------------------
    bash(
        "bash /dev/stdin <<< 'rm @STOP_DIR@/stop'",
        "@STOP_DIR@",
        id="refuse-here-string-into-a-shell-on-stdin",
    ),
    bash(
        "python3 /proc/self/fd/0 <<< 'import os; os.remove(\"@STOP_DIR@/stop\")'",
        "@STOP_DIR@",
        id="refuse-interpreter-reading-stdin",
    ),
    bash(
        ". <(echo rm @STOP_DIR@/stop)",
        "@STOP_DIR@",
        id="refuse-source-process-substitution",
    ),
    bash("echo 'rm @STOP_DIR@/stop' | at now", "@STOP_DIR@", id="refuse-at-job"),
    bash(
        "crontab <<< '* * * * * rm @STOP_DIR@/stop'",
        "@STOP_DIR@",
        id="refuse-crontab-here-string",
    ),
    bash("rm @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-rm"),
    bash("sudo rm -f -- @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-sudo-rm"),
    bash("rm -rf @FOLDER@", "@FOLDER@", id="refuse-rm-folder-above"),
    bash("mv @STOP_DIR@/stop /tmp/gone", "@STOP_DIR@/stop", id="refuse-mv-out"),
    bash(
        "cp @WS@/notes.txt @STOP_DIR@/stop",
        "@STOP_DIR@/stop",
        id="refuse-cp-destination",
    ),
    bash("cp @WS@/notes.txt @FOLDER@/1000/", "@STOP_DIR@", id="refuse-cp-into-dir"),
    bash("echo x | tee -a @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-tee"),
    bash("sed -i 's/a/b/' @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-sed-i"),
    bash("ln -sf /dev/null @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-ln"),
    bash("chmod 777 @STOP_DIR@", "@STOP_DIR@", id="refuse-chmod"),
    bash("chown -R nobody @STOP_DIR@", "@STOP_DIR@", id="refuse-chown"),
    bash("touch @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-touch"),
    bash("truncate -s 0 @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-truncate"),
    bash(
        "dd if=/dev/zero of=@STOP_DIR@/stop count=1",
        "@STOP_DIR@/stop",
        id="refuse-dd-of",
    ),
    bash(
        "install -m 644 @WS@/notes.txt @STOP_DIR@/stop",
        "@STOP_DIR@/stop",
        id="refuse-install",
    ),
    bash("rsync -a --delete @WS@/ @STOP_DIR@/", "@STOP_DIR@", id="refuse-rsync"),
    bash("mkdir @STOP_DIR@/stop.d", "@STOP_DIR@/stop.d", id="refuse-mkdir"),
    bash(
        """python -c 'import os; os.remove("@STOP_DIR@/stop")'""",
        "@STOP_DIR@",
        id="refuse-python-c",
    ),
    bash("""perl -e 'unlink "@STOP_DIR@/stop"'""", "@STOP_DIR@", id="refuse-perl-e"),
    bash(
        """node -e 'require("fs").rmSync("@FOLDER@", {recursive: true})'""",
        "@FOLDER@",
        id="refuse-node-e-folder",
    ),
    bash(
        """ruby -e 'File.delete("@STOP_DIR@/stop")'""", "@STOP_DIR@", id="refuse-ruby-e"
    ),
    bash("perl -pi -e 's/x/y/' @STOP_DIR@/stop", "@STOP_DIR@/stop", id="refuse-perl-i"),
    bash("find @FOLDER@ -name stop -delete", "@FOLDER@", id="refuse-find-delete"),
    bash("find @FOLDER@ -type f -exec rm {} +", "@STOP_DIR@", id="refuse-find-exec-rm"),
    bash("rm @LINK@/stop", "@STOP_DIR@/stop", id="refuse-through-symlink"),
    bash("rm -- @WS@/../srv/tether/1000/stop", "@STOP_DIR@/stop", id="refuse-dotdot"),
    bash("cd @STOP_DIR@ && rm stop", "@STOP_DIR@/stop", id="refuse-after-cd"),
    bash(
        'f=@STOP_DIR@/stop; rm "$f"',
        "@STOP_DIR@/stop",
        id="refuse-variable-indirection",
    ),
    bash(
        'rm -f "$SOME_UNSET_PATH"',
        "known only at run time",
        id="refuse-unknown-variable",
    ),
    bash("rm @FOLDER@/*/stop", "@STOP_DIR@", id="refuse-glob-into-stop"),
    bash(
        "rm @ROOT@/srv/teth*/1000/stop".replace("@ROOT@", "@WS@/.."),
        "@STOP_DIR@",
        id="refuse-glob-prefix",
    ),
    bash("rm ~/.config/tether/stop-setup.json", "@SETUP@", id="refuse-tilde-setup"),
    bash(
        "echo '{}' > $HOME/.config/tether/stop-setup.json",
        "@SETUP@",
        id="refuse-home-var-setup",
    ),
    bash('rm "@STOP_DIR@/stop', "@STOP_DIR@", id="refuse-unparseable-naming-stop"),
    bash(
        "git -C @STOP_DIR@ clean -fdx",
        "@STOP_DIR@",
        id="refuse-unknown-program-naming-stop",
    ),
    bash(
        "ln -s @STOP_DIR@ alias && rm alias/stop",
        "@STOP_DIR@",
        id="refuse-ln-alias-of-stop-dir",
    ),
    bash("tar -C @FOLDER@ -xf backup.tar", "@FOLDER@", id="refuse-extract-into-folder"),
    bash("echo x > @STOP_DIR@//./stop", "@STOP_DIR@/stop", id="refuse-odd-spelling"),
    # -- forms that hide a verb or a path (issue: the truth under attack, 5(d)) ----------
    bash('c="tether lift"; $c', "tether lift", id="refuse-word-split-variable"),
    bash('x="rm -f @STOP_DIR@/stop"; $x', "@STOP_DIR@/stop", id="refuse-split-rm"),
    bash("tether l{i,o}ft", "tether lift", id="refuse-brace-verb"),
    bash("{tether,stop}", "tether stop", id="refuse-brace-program"),
    bash("rm -f @FOLDER@/{1000,x}/stop", "@STOP_DIR@/stop", id="refuse-brace-path"),
    bash("tether l?ft", "tether lift", id="refuse-glob-verb"),
    bash("/usr/bin/teth* st*p", "tether stop", id="refuse-glob-program"),
    bash("HOME=@FOLDER@; rm ~/1000/stop", "@STOP_DIR@/stop", id="refuse-home-rebound"),
    bash("CDPATH=@FOLDER@ cd 1000 && rm stop", "run time", id="refuse-cdpath"),
    bash("alias t=tether; t lift", "tether lift", id="refuse-inline-alias"),
    bash('f() { tether "$1"; }; f lift', "tether", id="refuse-inline-function"),
    bash("function g { rm -rf @STOP_DIR@; }", "@STOP_DIR@", id="refuse-function-kw"),
    bash("a=V; V=lift; tether ${!a}", "tether lift", id="refuse-indirect-expansion"),
    bash("$'\\x74ether' lift", "tether lift", id="refuse-ansi-c-hex"),
    bash("tether $'\\163top'", "tether stop", id="refuse-ansi-c-octal-verb"),
    bash("rbash -c 'tether stop'", "tether stop", id="refuse-rbash"),
    bash("strace -f -o /tmp/log tether lift", "tether lift", id="refuse-strace"),
    bash("taskset -c 0 tether stop", "tether stop", id="refuse-taskset"),
    bash("parallel tether ::: lift", "tether lift", id="refuse-parallel"),
    bash("git -c alias.x='!tether lift' x", "tether lift", id="refuse-git-alias"),
    bash("frob --now tether setup", "tether setup", id="refuse-unknown-given-verb"),
    bash(
        """/usr/bin/../bin/python3 -c 'import os; os.remove("@FOLDER@/../tether/1000/stop")'""",
        "@FOLDER@",
        id="refuse-interpreter-dotdot-path",
    ),
    bash(
        """python3 -c 'open("@FOLDER@//1000/./stop", "w")'""",
        "@FOLDER@",
        id="refuse-interpreter-double-slash-path",
    ),
    bash(
        "ln -s / r && rm -f r@STOP_DIR@/stop",
        "@STOP_DIR@/stop",
        id="refuse-symlink-made-earlier",
    ),
    bash("mv --exchange @WS@/notes.txt @FOLDER@", "@FOLDER@", id="refuse-mv-exchange"),
    bash("rm -rf @ROOT@/srv", "@ROOT@/srv", id="refuse-rm-two-levels-up"),
    bash("git -C @ROOT@/srv clean -fdx", "@ROOT@/srv", id="refuse-git-two-levels-up"),
    bash(
        """python3 -c 'import shutil; shutil.rmtree("@ROOT@/srv")'""",
        "@ROOT@/srv",
        id="refuse-code-two-levels-up",
    ),
    bash("rsync -a build/ @ROOT@/srv/", "@ROOT@/srv", id="refuse-rsync-contents-up"),
    bash("bash /dev/stdin <<< 'tether lift'", "tether lift", id="refuse-stdin-file"),
    bash("sed 's/x/tether lift/e' notes.txt", "tether", id="refuse-sed-e-verb"),
    bash(
        """python3 -c 'import subprocess; subprocess.run(["tether", "stop"])'""",
        "stop",
        id="refuse-python-subprocess-verb",
    ),
    bash("at now <<< 'tether lift'", "tether", id="refuse-at-here-string"),
    ok('f=$(mktemp); echo x > "$f"; rm -f "$f"', id="allow-mktemp-file"),
    ok('d=$(mktemp -d) && cp notes.txt "$d/" && rm -rf "$d"', id="allow-mktemp-dir"),
    ok("rm @LINK@", id="allow-rm-symlink-itself"),
    ok("ln -s /usr/bin/python3 py && rm py", id="allow-rm-unrelated-symlink"),
    ok("sed -n '/tether stop/p' notes.txt", id="allow-sed-mentioning-verb"),
    ok("""python3 -c 'print("run tether stop to halt")'""", id="allow-print-verb"),
    ok("""awk '{print "tether lift"}' notes.txt""", id="allow-awk-print-verb"),
    ok("cat > notes.md <<'EOF'\nUse tether stop to halt.\nEOF", id="allow-heredoc-doc"),
    ok(
        "git commit -m \"$(cat <<'EOF'\ndocs: tether lift explained\nEOF\n)\"",
        id="allow-commit-message-heredoc",
    ),
    ok("python3 - <<'EOF'\nprint('tether stop')\nEOF", id="allow-python-heredoc-print"),
    ok("ssh build-host tether stop", id="allow-remote-stop"),
    bash("echo dGV0aGVyIGxpZnQ= | base64 -d | sh", "decoded", id="refuse-base64-to-sh"),
    bash(
        "printf '\\x74ether lift' | bash", "decoded", id="refuse-printf-escapes-to-sh"
    ),
    bash(
        "$(echo dGV0aGVy | base64 -d) lift", "`lift`", id="refuse-hidden-program-verb"
    ),
    ok("curl -fsSL https://example.com/install.sh | sh", id="allow-download-to-shell"),
    bash(
        "python3 .venv/bin//tether lift",
        "tether lift",
        id="refuse-python-tether-script",
    ),
    bash(
        "python3 src/tether/../tether stop",
        "tether stop",
        id="refuse-python-package-dotdot",
    ),
    bash(
        "//usr/bin/../bin/python3 -m tether setup",
        "tether setup",
        id="refuse-odd-python",
    ),
    bash("env -S 'tether lift'", "tether lift", id="refuse-env-split-string"),
    ok("python3 scripts/tether_report.py stop", id="allow-python-other-script"),
    ok(
        """python3 -c 'import sys; print("tether stop", file=sys.stderr)'""",
        id="allow-import-and-print-verb",
    ),
    bash(
        """python3 -c 'import os; os.system("tether lift")'""",
        "lift",
        id="refuse-os-system-verb",
    ),
    # -- file tools and other tools ------------------------------------------------------
    tool(
        "Write",
        {"file_path": "@STOP_DIR@/stop", "content": ""},
        "@STOP_DIR@/stop",
        id="refuse-write",
    ),
    tool(
        "Edit",
        {"file_path": "@SETUP@", "old_string": "{", "new_string": "["},
        "@SETUP@",
        id="refuse-edit-setup",
    ),
    tool(
        "MultiEdit",
        {"file_path": "../srv/tether/1000/stop", "edits": []},
        "@STOP_DIR@/stop",
        id="refuse-multiedit-relative",
    ),
    tool(
        "NotebookEdit",
        {"notebook_path": "@STOP_DIR@/n.ipynb", "new_source": ""},
        "@STOP_DIR@/n.ipynb",
        id="refuse-notebookedit",
    ),
    tool(
        "Write",
        {"file_path": "~/.config/tether/stop-setup.json", "content": ""},
        "@SETUP@",
        id="refuse-write-tilde",
    ),
    tool(
        "Write",
        {"file_path": "@LINK@/stop", "content": ""},
        "@STOP_DIR@/stop",
        id="refuse-write-through-symlink",
    ),
    tool(
        "mcp__fs__write_file",
        {"path": "@STOP_DIR@/stop", "content": ""},
        "@STOP_DIR@/stop",
        id="refuse-mcp-write",
    ),
    tool(
        "GenerateImages",
        {"out": "@STOP_DIR@/img.png"},
        "@STOP_DIR@",
        id="refuse-mutating-tool-string",
        mutating=True,
    ),
    tool("Write", {"content": "x"}, "no target", id="refuse-write-without-target"),
    # -- allowed: reading the stop, look-alike paths, writes elsewhere --------------------
    ok("python3 /dev/stdin <<< 'print(1)'", id="allow-here-string-naming-no-stop"),
    ok("source ~/.bashrc && make", id="allow-source-elsewhere"),
    ok("ls -la @STOP_DIR@", id="allow-ls-stop-dir"),
    ok("cat @STOP_DIR@/stop", id="allow-cat-stop"),
    ok("stat -c %U @STOP_DIR@/stop", id="allow-stat-stop"),
    ok("find @FOLDER@ -name stop -print", id="allow-find-without-delete"),
    ok("find @FOLDER@ -type f -exec cat {} +", id="allow-find-exec-cat"),
    ok("head -c 10 @STOP_DIR@/stop 2>/dev/null", id="allow-head-stop"),
    ok("test -e @STOP_DIR@/stop && echo stopped", id="allow-test-stop"),
    ok("cp @STOP_DIR@/stop @WS@/copy", id="allow-copy-stop-out"),
    ok("cd @STOP_DIR@ && ls -l", id="allow-cd-and-list"),
    ok("tether status", id="allow-tether-status"),
    ok("tether status --json", id="allow-tether-status-json"),
    ok("tether --version", id="allow-tether-version"),
    ok("command -v tether", id="allow-command-v-tether"),
    ok("cat @WS@/notes.txt /etc/hostname", id="allow-cat-other-files"),
    ok("rm -rf @OTHER@/x", id="allow-rm-prefix-sibling"),
    ok("echo x > @OTHER@/x", id="allow-redirect-prefix-sibling"),
    ok("echo hi > @WS@/out.txt 2>&1", id="allow-write-in-workspace"),
    ok(
        "mkdir -p build && touch build/a && cp notes.txt build/",
        id="allow-relative-writes",
    ),
    ok("sed -i 's/a/b/' notes.txt", id="allow-sed-i-elsewhere"),
    ok("find . -name '*.pyc' -delete", id="allow-find-delete-workspace"),
    ok("find . -name '*.pyc' | xargs rm -f", id="allow-xargs-rm-workspace"),
    ok('for f in *.tmp; do rm -f "$f"; done', id="allow-loop-over-glob"),
    ok('grep -rn "tether stop" @WS@', id="allow-grep-for-verb-text"),
    ok(
        'git commit -m "docs: explain tether stop"', id="allow-commit-message-with-verb"
    ),
    ok(
        "python -c 'import tether.stop; print(1)' > out.txt",
        id="allow-python-c-module-name",
    ),
    ok("python -m pytest -q tests/stop", id="allow-python-m-other"),
    ok("git -C ~ status && ln -s /usr/bin/python3 py", id="allow-home-and-other-links"),
    tool("Read", {"file_path": "@STOP_DIR@/stop"}, None, id="allow-read-stop"),
    tool(
        "Glob", {"pattern": "*", "path": "@STOP_DIR@"}, None, id="allow-glob-stop-dir"
    ),
    tool(
        "Write",
        {"file_path": "@OTHER@/x", "content": "x"},
        None,
        id="allow-write-prefix-sibling",
    ),
    tool(
        "Edit",
        {"file_path": "notes.txt", "old_string": "n", "new_string": "m"},
        None,
        id="allow-edit-workspace",
    ),
    tool(
        "Write",
        {"file_path": "@WS@/doc.md", "content": "rm @STOP_DIR@/stop"},
        None,
        id="allow-write-text-naming-stop",
    ),
    tool(
        "mcp__shell__exec",
        {"cmd": "tether lift"},
        "`lift`",
        id="refuse-mcp-shell-running-a-verb",
    ),
    tool("mcp__db__query", {"sql": "select 1"}, None, id="allow-mcp-unrelated"),
    tool(
        "mcp__docs__read",
        {"path": "@STOP_DIR@/stop"},
        None,
        id="allow-declared-read-only",
        mutating=False,
    ),
]


@pytest.mark.rule("guard-table")
@pytest.mark.parametrize(("tool_name", "tool_input", "mutating", "names"), GUARD_TABLE)
def test_guard_table_refuses_what_touches_a_stop_and_allows_the_rest(
    world: World,
    tool_name: str,
    tool_input: dict[str, Any],
    mutating: bool | None,
    names: str | None,
) -> None:
    """Each row is one tool call: refused with a reason naming the path or verb, or allowed."""
    verdict = judge(world, tool_name, tool_input, mutating=mutating)
    if names is None:
        assert verdict.allowed, verdict.reason
        assert verdict.reason == ""
    else:
        assert not verdict.allowed
        assert world.fill(names) in verdict.reason


def test_guard_table_has_the_rows_the_spec_asks_for() -> None:
    """Spec 02 asks for at least 30 commands; the table holds 40 and more, both ways."""
    refused = [p for p in GUARD_TABLE if p.values[3] is not None]
    allowed = [p for p in GUARD_TABLE if p.values[3] is None]
    assert len(GUARD_TABLE) >= 40
    assert len(refused) >= 30
    assert len(allowed) >= 15


def test_refused_verdict_raises_guard_refused_with_its_code(world: World) -> None:
    """A refusal becomes `GuardRefused` (GUARD_REFUSED) carrying the same reason."""
    verdict = judge(world, "Bash", {"command": "rm @STOP_DIR@/stop"})
    with pytest.raises(GuardRefused) as caught:
        verdict.raise_if_refused()
    assert caught.value.code is ErrorCode.GUARD_REFUSED
    assert str(caught.value) == verdict.reason
    judge(world, "Bash", {"command": "ls"}).raise_if_refused()


def test_write_through_a_hard_link_to_the_setup_record_is_refused(world: World) -> None:
    """A hard link has no protected spelling; the guard compares file identities."""
    alias = world.ws / "alias.json"
    os.link(world.setup, alias)
    verdict = judge(world, "Bash", {"command": f"echo '{{}}' > {alias}"})
    assert not verdict.allowed
    assert str(world.setup) in verdict.reason


def test_without_protected_paths_only_the_verbs_are_refused(world: World) -> None:
    """With nothing to protect, writes pass, and `tether stop` is still refused."""
    for command, allowed in (
        ("rm -rf /tmp/whatever", True),
        ("tether stop", False),
        ("python -c 'from tether.cli import main; main()' lift", False),
    ):
        verdict = guard_tool_call(
            "Bash", {"command": command}, cwd=world.ws, protected=[], environ={}
        )
        assert verdict.allowed is allowed, command


def test_malformed_tool_inputs_are_refused(world: World) -> None:
    """A Bash call without a command string, or an input that is no object, fails closed."""
    assert not judge(world, "Bash", {"cmd": "ls"}).allowed
    assert not judge(world, "Bash", {"command": 7}).allowed
    refused = guard_tool_call(
        "Write",
        ["not", "a", "mapping"],  # type: ignore[arg-type]
        cwd=world.ws,
        protected=world.protected,
    )
    assert not refused.allowed


def test_a_command_given_as_an_argv_list_is_judged_like_a_string(world: World) -> None:
    """Some agents send `command` as a list of words; it is joined and parsed."""
    verdict = judge(world, "shell", {"command": ["rm", "-f", "@STOP_DIR@/stop"]})
    assert not verdict.allowed


def test_a_protected_path_that_does_not_exist_yet_is_still_protected(
    world: World,
) -> None:
    """The own store is often missing before the first stop; writes into it are refused."""
    missing = world.home / ".local" / "state" / "tether" / "stop"
    verdict = guard_tool_call(
        "Bash",
        {"command": f"mkdir -p {missing}/1000 && touch {missing}/1000/stop"},
        cwd=world.ws,
        protected=[missing],
        environ=world.environ,
    )
    assert not verdict.allowed
    assert str(missing) in verdict.reason


HARMLESS = [
    "ls -la",
    "cat notes.txt",
    "echo hi > out.txt",
    "cd @WS@",
    "git status --short",
    "grep -rn foo .",
    "python -m pytest -q",
    "tether status",
    "cat @STOP_DIR@/stop",
    "find . -name '*.py'",
]
HARMFUL = [
    "rm -f @STOP_DIR@/stop",
    "tether stop",
    "echo x > @STOP_DIR@/stop",
    "touch @SETUP@",
    "python -m tether lift",
    "cp notes.txt @STOP_DIR@/stop",
]
SEPARATORS = ["; ", " && ", " || ", " | ", "\n", " & "]
WRAPPERS = ["{}", "sh -c {q}", "bash -lc {q}", "echo $({})", "sudo {}", "( {} )"]


@pytest.fixture(scope="module")
def shared_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(tmp_path_factory.mktemp("guard-world"))


@pytest.mark.rule("guard-table")
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    before=st.lists(st.sampled_from(HARMLESS), max_size=3),
    after=st.lists(st.sampled_from(HARMLESS), max_size=3),
    harmful=st.sampled_from(HARMFUL),
    separators=st.lists(st.sampled_from(SEPARATORS), min_size=6, max_size=6),
    wrapper=st.sampled_from(WRAPPERS),
)
def test_guard_table_refusal_holds_wherever_the_command_sits(
    shared_world: World,
    before: list[str],
    after: list[str],
    harmful: str,
    separators: list[str],
    wrapper: str,
) -> None:
    """A refused command stays refused among harmless ones, behind any separator or wrapper."""
    parts = [*before, wrapper.format(harmful, q=shlex.quote(harmful)), *after]
    command = parts[0]
    for separator, part in zip(separators, parts[1:], strict=False):
        command += separator + part
    verdict = judge(shared_world, "Bash", {"command": command})
    assert not verdict.allowed, command


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    commands=st.lists(st.sampled_from(HARMLESS), min_size=1, max_size=5),
    separators=st.lists(st.sampled_from(SEPARATORS), min_size=5, max_size=5),
)
def test_harmless_commands_stay_allowed_together(
    shared_world: World, commands: list[str], separators: list[str]
) -> None:
    """Reads and writes elsewhere, chained any way, are never refused."""
    command = commands[0]
    for separator, part in zip(separators, commands[1:], strict=False):
        command += separator + part
    verdict = judge(shared_world, "Bash", {"command": command})
    assert verdict.allowed, (command, verdict.reason)


@make_tool(stop_class=StopClass.READ_ONLY)
async def Peek(ctx: ToolContext) -> str:
    """Read nothing."""
    return ""


@make_tool(stop_class=StopClass.MUTATING, subject_field="path")
async def Put(ctx: ToolContext, path: str) -> str:
    """Write a file."""
    return path


def test_the_runtime_guard_finds_the_protected_paths_once(world: World) -> None:
    """The guard a runtime builds pins its protected paths: 100 calls, one look-up, and
    a read-only call that names nothing is answered without judging (issue: the
    default path is the measured path)."""
    from tether.host._broker import stop_guard

    looked: list[int] = []

    def protected() -> list[Path]:
        looked.append(1)
        return world.protected

    check = stop_guard(protected)
    for _ in range(100):
        assert check(Peek, {}, world.ws) is None
    assert check(Put, {"path": str(world.stop_dir / "stop")}, world.ws) is not None
    assert check(Put, {"path": str(world.ws / "x")}, world.ws) is None
    assert looked == [1]


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        pytest.param("echo __TETHER_STASH_99__", True, id="old-sentinel-stash"),
        pytest.param("echo __TETHER_LITERAL_ff__", True, id="old-sentinel-literal"),
        pytest.param("echo ${__TETHER_OPAQUE__} \0heredoc-0", True, id="markers"),
        pytest.param("rm -f @FOLDER@/*/..", False, id="glob-normalised-away"),
        pytest.param(";>" * 500 + "&", True, id="operator-run"),
        pytest.param("echo " + "$(" * 5000 + "x" + ")" * 5000, False, id="deep-dollar"),
        pytest.param('echo "' + '$("' * 3000, False, id="deep-open-quotes"),
        pytest.param("echo `" + "\\`" * 5000, True, id="backtick-escapes"),
        pytest.param("cat <<", True, id="heredoc-without-name"),
        pytest.param("echo $'\\x'", True, id="ansi-c-bare-escape"),
        pytest.param("echo $'\\U0010ffff\\777\\c'", True, id="ansi-c-edges"),
    ],
)
def test_inputs_that_crashed_the_guard_get_an_answer(
    world: World, command: str, allowed: bool
) -> None:
    """Text that looks like the parser's own markers, nesting past any stack, broken
    escapes: each gets a verdict of its own, never "the guard could not judge"
    (regression: StopIteration, IndexError, RecursionError)."""
    verdict = judge(world, "Bash", {"command": command})
    assert verdict.allowed is allowed, verdict.reason
    assert "could not judge" not in verdict.reason


_WORK_BOUND = 1.5
"""CPU seconds one judgment at a 0.2 s bound may spend, the work past the bound in."""


def _judged(guard: StopGuard, world: World, command: str) -> tuple[GuardVerdict, float]:
    """The guard's verdict on a Bash `command` and the CPU seconds it spent on it."""
    before = time.thread_time()
    verdict = guard.judge("Bash", {"command": command}, cwd=world.ws)
    return verdict, time.thread_time() - before


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("tether lift; echo " + "a*" * 2_000_000, id="4MB-glob-word"),
        pytest.param("rm " + "a*" * 2_000_000 + "; tether stop", id="4MB-rm-glob"),
        pytest.param("a;" * 1_000_000, id="2MB-of-commands"),
        pytest.param("echo " + "$(a)" * 200_000, id="200k-substitutions"),
        pytest.param("echo " + "'a'" * 1_000_000, id="1M-quoted-pieces"),
        pytest.param("echo " + "$a" * 1_000_000, id="1M-variables"),
        pytest.param("python3 -c '" + "tether " * 500_000 + "'", id="long-code"),
    ],
)
def test_a_huge_command_is_answered_within_the_bound_and_refused_when_capped(
    world: World, command: str
) -> None:
    """A hook that takes longer than its host waits lets the call run (regression: a
    4 MB `tether lift; echo a*a*…` took 828 s). Every command is answered within the
    guard's bound (0.2 s here) and the work it does past it, and a judgment cut by the
    bound refuses."""
    guard = StopGuard(world.protected, environ=world.environ, time_limit=0.2)
    started = time.monotonic()
    verdict, spent = _judged(guard, world, command)
    elapsed = time.monotonic() - started
    # The work the guard does is bounded (~0.4 s of CPU at most here, the 828 s
    # regression its opposite): counted in CPU time, which a loaded machine does not
    # stretch and a quiet one spends as wall time.
    assert spent < _WORK_BOUND, (spent, elapsed)
    # A command that runs a verb is refused, judged in time or cut by the bound; one
    # that only names tether may pass when judged whole within the bound.
    runs_a_verb = "tether lift" in command or "tether stop" in command
    assert not (verdict.allowed and runs_a_verb), verdict.reason
    if verdict.allowed:
        assert elapsed < 0.2 + 0.5, elapsed  # judged whole, not past its bound


_CODE = "tether " * 1_000_000
"""7 MB of inline code that names tether but runs nothing."""


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(f"python3 -c '{_CODE}'", id="python-c"),
        pytest.param(f"bash -c '{_CODE}'", id="bash-c"),
        pytest.param(f"python3 - <<'EOF'\n{_CODE}\nEOF\n", id="here-document"),
    ],
)
def test_megabytes_of_inline_code_are_judged_within_the_bound(
    world: World, command: str
) -> None:
    """The searches over inline code (what it can run, the paths it spells) look at
    the deadline as they go (regression: 0.5 s of CPU here at a 0.2 s bound), and the
    judgment cut by it refuses."""
    guard = StopGuard(world.protected, environ=world.environ, time_limit=0.2)
    verdict, spent = _judged(guard, world, command)
    assert spent < 0.2 + 0.1, spent
    assert not verdict.allowed
    assert "cannot tell what this command does" in verdict.reason, verdict.reason


@pytest.mark.rule("guard-table")
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    text=st.one_of(
        st.text(),
        st.text(alphabet=st.sampled_from(list("$(){}[]'\"`\\;&|<> \n\t*?!~#=-/.ab"))),
        st.lists(
            st.sampled_from(
                [
                    *("tether", "stop", "lift", "rm", "$(", ")", "<<EOF", "\nEOF", "'"),
                    *('"', "`", "${", "}", "{a,b}", "$'\\x74'", "@STOP_DIR@", "~"),
                    *("..", "|", ";", "&&", "sh -c", "python3 -c", "eval", "alias x="),
                    *("f()", " "),
                ]
            )
        ).map("".join),
    )
)
def test_any_text_gets_a_verdict_within_the_bound(
    shared_world: World, text: str
) -> None:
    """Whatever the command text, the guard answers (allowed, or refused with a reason)
    within its bound: "cannot tell" is a refusal, never a crash."""
    guard = StopGuard(
        shared_world.protected, environ=shared_world.environ, time_limit=0.2
    )
    verdict, spent = _judged(guard, shared_world, shared_world.fill(text))
    assert spent < _WORK_BOUND, spent
    assert verdict.allowed or verdict.reason
    assert "could not judge" not in verdict.reason, verdict.reason


def test_a_path_spelled_in_another_unicode_form_is_the_same_path(
    tmp_path: Path,
) -> None:
    """A stop under `café` (one composed `é`) is reached by a Write or a Bash command
    spelling it `cafe` + a combining accent: paths are compared in NFC."""
    composed = tmp_path / "caf\u00e9" / "stop"
    composed.mkdir(parents=True)
    decomposed = str(tmp_path / "cafe\u0301" / "stop" / "stop")
    guard = StopGuard([composed])
    write = guard.judge("Write", {"file_path": decomposed}, cwd=tmp_path)
    assert not write.allowed
    assert str(composed) in write.reason
    bash = guard.judge("Bash", {"command": f"rm -f '{decomposed}'"}, cwd=tmp_path)
    assert not bash.allowed
    assert guard.judge(
        "Write", {"file_path": str(tmp_path / "x")}, cwd=tmp_path
    ).allowed


def _nested(leaf: object, levels: int) -> dict[str, Any]:
    """A JSON-Schema-shaped input with `leaf` at the bottom of `levels` levels."""
    value: Any = leaf
    for n in range(levels):
        value = {"items": [value], "level": n} if n % 2 else {"properties": value}
    return {"schema": value}


@pytest.mark.rule("guard-table")
def test_an_input_nested_deep_is_judged_at_every_depth_not_refused_for_its_depth(
    world: World,
) -> None:
    """A JSON-Schema-shaped input nested 50 levels deep is allowed when nothing in it
    names a stop, and refused when a stop's path sits at depth 40, as a value or as a
    key (a regression: six levels were refused whatever they held)."""
    assert judge(world, "mcp__schema__check", _nested("plain text", 50)).allowed
    deep = _nested(world.fill("@STOP_DIR@/stop"), 40)
    verdict = judge(world, "mcp__schema__check", deep)
    assert not verdict.allowed
    assert f"names the protected path {world.stop_dir}" in verdict.reason
    keyed = _nested({world.fill("@STOP_DIR@/stop"): "x"}, 40)
    verdict = judge(world, "mcp__files__write_many", keyed)
    assert not verdict.allowed
    assert f"names the protected path {world.stop_dir}" in verdict.reason
    command = _nested("tether lift --reason done", 40)
    verdict = judge(world, "mcp__shell__run", command)
    assert not verdict.allowed
    assert "stop, lift and setup are the person's acts" in verdict.reason


@pytest.mark.rule("guard-table")
@pytest.mark.parametrize(
    ("tool_input", "bound"),
    [
        ({"rows": [[0] * 1000 for _ in range(101)]}, "more than 100,000 values"),
        (
            {"blobs": [c * 1_000_000 for c in "abcdefghi"]},
            "more than 8,000,000 characters of text",
        ),
    ],
    ids=["values", "text"],
)
def test_an_input_past_the_guards_bound_of_work_is_refused_naming_the_bound(
    world: World, tool_input: dict[str, Any], bound: str
) -> None:
    """The guard's work on an unknown tool's input is bounded by the values and the
    text it visits; past either bound the call is refused with one line naming both
    bounds and what to do (a tether choice: the guard refuses what it cannot judge)."""
    verdict = judge(world, "mcp__db__insert", tool_input)
    assert not verdict.allowed
    assert verdict.reason == (
        f"mcp__db__insert: the input holds {bound}; the guard judges at most "
        "100,000 values and 8,000,000 characters of an input and refuses what it "
        "cannot judge: send a smaller input"
    )
