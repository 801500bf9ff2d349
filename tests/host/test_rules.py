"""Permission rules: parsing, matching, precedence, paths outside the workspace."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.cli._run import invoke

from tether._config import Config
from tether.errors import UsageError
from tether.host import StopClass, Tool, ToolContext, tool
from tether.host._rules import PermissionRules, Rule, default_decision

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


def _make(name: str, stop_class: StopClass, subject_field: str | None) -> Tool:
    async def fn(ctx: ToolContext, **_: Any) -> str:
        return ""

    async def command(ctx: ToolContext, command: str) -> str:
        return command

    async def file_path(ctx: ToolContext, file_path: str) -> str:
        return file_path

    async def url(ctx: ToolContext, url: str) -> str:
        return url

    async def pattern(ctx: ToolContext, pattern: str, path: str | None = None) -> str:
        return pattern

    async def nothing(ctx: ToolContext, x: int = 0) -> str:
        return ""

    bodies: dict[str | None, Callable[..., Awaitable[str]]] = {
        "command": command,
        "file_path": file_path,
        "url": url,
        "pattern": pattern,
        None: nothing,
    }
    return tool(name=name, stop_class=stop_class, subject_field=subject_field)(
        bodies[subject_field]
    )


TOOLS = {
    "Bash": _make("Bash", StopClass.PROCESS, "command"),
    "Read": _make("Read", StopClass.READ_ONLY, "file_path"),
    "Write": _make("Write", StopClass.MUTATING, "file_path"),
    "Edit": _make("Edit", StopClass.MUTATING, "file_path"),
    "WebFetch": _make("WebFetch", StopClass.READ_ONLY, "url"),
    "Grep": _make("Grep", StopClass.READ_ONLY, "pattern"),
    "mcp__time__get_current_time": _make(
        "mcp__time__get_current_time", StopClass.EXTENSION, None
    ),
    "mcp__time__convert_time": _make(
        "mcp__time__convert_time", StopClass.EXTENSION, None
    ),
    "mcp__files__delete": _make("mcp__files__delete", StopClass.EXTENSION, None),
}

A, K, D = "allow", "ask", "deny"

# (allow, ask, deny, tool, input, expected)
ROWS: list[tuple[list[str], list[str], list[str], str, dict[str, Any], str]] = [
    # defaults by stop class
    ([], [], [], "Read", {"file_path": "a.txt"}, A),
    ([], [], [], "Write", {"file_path": "a.txt"}, K),
    ([], [], [], "Bash", {"command": "ls"}, K),
    ([], [], [], "mcp__time__get_current_time", {}, K),
    ([], [], [], "Grep", {"pattern": "x"}, A),
    # bare tool names
    (["Bash"], [], [], "Bash", {"command": "rm -rf /"}, A),
    (["Write"], [], [], "Write", {"file_path": "src/a.py"}, A),
    ([], [], ["Read"], "Read", {"file_path": "a.txt"}, D),
    ([], ["Read"], [], "Read", {"file_path": "a.txt"}, K),
    # Bash prefix and exact
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status"}, A),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status --short"}, A),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git statusx"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git  status   -s"}, A),
    (["Bash(npm test)"], [], [], "Bash", {"command": "npm test"}, A),
    (["Bash(npm test)"], [], [], "Bash", {"command": "npm test --watch"}, K),
    (["Bash(npm run test:*)"], [], [], "Bash", {"command": "npm run lint"}, K),
    # compound commands: every part must be allowed
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status; rm -rf x"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status && rm x"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status || rm x"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status | sh"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status\nrm x"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status & rm x"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status $(rm x)"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status `rm x`"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status > out"}, K),
    (["Bash(git status:*)"], [], [], "Bash", {"command": "git status 2>&1"}, A),
    (
        ["Bash(git status:*)", "Bash(git diff:*)"],
        [],
        [],
        "Bash",
        {"command": "git status && git diff | git diff --stat"},
        A,
    ),
    (["Bash(echo:*)"], [], [], "Bash", {"command": "echo 'a; rm -rf x'"}, A),
    (["Bash(echo:*)"], [], [], "Bash", {"command": 'echo "unterminated'}, K),
    # deny and ask reach any part of a compound command
    (["Bash"], [], ["Bash(rm:*)"], "Bash", {"command": "ls && rm -rf x"}, D),
    (
        ["Bash"],
        ["Bash(git push:*)"],
        [],
        "Bash",
        {"command": "git add . ; git push"},
        K,
    ),
    (["Bash"], [], ["Bash(rm:*)"], "Bash", {"command": "ls"}, A),
    # precedence deny > ask > allow
    (["Bash(git:*)"], ["Bash(git push:*)"], [], "Bash", {"command": "git push"}, K),
    (
        ["Bash(git:*)"],
        ["Bash(git:*)"],
        ["Bash(git push:*)"],
        "Bash",
        {"command": "git push"},
        D,
    ),
    (
        ["Write(src/**)"],
        [],
        ["Write(src/secret/**)"],
        "Write",
        {"file_path": "src/secret/k"},
        D,
    ),
    (["Read"], ["Read(*.env)"], [], "Read", {"file_path": "conf/.env"}, K),
    (["Read"], ["Read(*.env)"], [], "Read", {"file_path": "conf/app.envx"}, A),
    (["Read"], ["Read(.env)"], [], "Read", {"file_path": "conf/.env"}, K),
    # path globs relative to the workspace
    (["Write(src/**)"], [], [], "Write", {"file_path": "src/a/b/c.py"}, A),
    (["Write(src/**)"], [], [], "Write", {"file_path": "tests/a.py"}, K),
    (["Write(src/**)"], [], [], "Write", {"file_path": "src/../tests/a.py"}, K),
    (["Edit(*.md)"], [], [], "Edit", {"file_path": "docs/deep/x.md"}, A),
    (["Edit(*.md)"], [], [], "Edit", {"file_path": "docs/x.mdx"}, K),
    (["Edit(docs/*.md)"], [], [], "Edit", {"file_path": "docs/deep/x.md"}, K),
    (["Edit(docs/**/*.md)"], [], [], "Edit", {"file_path": "docs/deep/x.md"}, A),
    (["Edit(docs/**/*.md)"], [], [], "Edit", {"file_path": "docs/x.md"}, A),
    (["Edit(src/[ab].py)"], [], [], "Edit", {"file_path": "src/b.py"}, A),
    (["Edit(src/?.py)"], [], [], "Edit", {"file_path": "src/ab.py"}, K),
    # absolute paths and the outside-workspace rule
    ([], [], [], "Read", {"file_path": "/etc/hostname"}, K),
    (["Read"], [], [], "Read", {"file_path": "/etc/hostname"}, K),
    (["Read(/etc/**)"], [], [], "Read", {"file_path": "/etc/hostname"}, A),
    (
        ["Read(/etc/**)"],
        [],
        ["Read(/etc/shadow)"],
        "Read",
        {"file_path": "/etc/shadow"},
        D,
    ),
    ([], [], [], "Read", {"file_path": "../outside.txt"}, K),
    ([], [], [], "Grep", {"pattern": "x", "path": "/usr"}, K),
    (["Grep(/usr/**)"], [], [], "Grep", {"pattern": "x", "path": "/usr/lib"}, A),
    # WebFetch domains
    (
        ["WebFetch(domain:example.com)"],
        [],
        [],
        "WebFetch",
        {"url": "https://example.com/a"},
        A,
    ),
    (
        ["WebFetch(domain:example.com)"],
        [],
        ["WebFetch(domain:evil.example.com)"],
        "WebFetch",
        {"url": "https://evil.example.com/"},
        D,
    ),
    (
        [],
        ["WebFetch(domain:*.example.com)"],
        [],
        "WebFetch",
        {"url": "http://a.example.com"},
        K,
    ),
    (
        [],
        [],
        ["WebFetch(domain:example.com)"],
        "WebFetch",
        {"url": "https://example.org"},
        A,
    ),
    # MCP tool names
    (["mcp__time__*"], [], [], "mcp__time__get_current_time", {}, A),
    (["mcp__time"], [], [], "mcp__time__convert_time", {}, A),
    (["mcp__time__convert_time"], [], [], "mcp__time__get_current_time", {}, K),
    (["mcp__*"], [], ["mcp__files__delete"], "mcp__files__delete", {}, D),
    (["mcp__time__*"], [], [], "mcp__files__delete", {}, K),
]


@pytest.mark.parametrize(
    ("allow", "ask", "deny", "tool_name", "args", "expected"),
    ROWS,
    ids=[f"{i:02d}-{row[3]}" for i, row in enumerate(ROWS)],
)
def test_decide_table(
    workspace: Path,
    allow: list[str],
    ask: list[str],
    deny: list[str],
    tool_name: str,
    args: dict[str, Any],
    expected: str,
) -> None:
    """Each row's rules give the expected decision for the call."""
    rules = PermissionRules.from_lists(allow, ask, deny)
    assert rules.decide(TOOLS[tool_name], args, workspace=workspace) == expected


def test_table_is_large_enough() -> None:
    """The matching table keeps at least 25 rows."""
    assert len(ROWS) >= 25


def test_symlink_out_of_the_workspace_is_outside(
    workspace: Path, tmp_path: Path
) -> None:
    """A path that reaches outside through a symlink is judged by where it resolves."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (workspace / "link").symlink_to(outside)
    rules = PermissionRules.from_lists(allow=["Write(link/**)", "Read"])
    read, write = TOOLS["Read"], TOOLS["Write"]
    assert rules.decide(read, {"file_path": "link/x"}, workspace=workspace) == "ask"
    assert rules.decide(write, {"file_path": "link/x"}, workspace=workspace) == "ask"
    assert (
        rules.decide(read, {"file_path": "inside.txt"}, workspace=workspace) == "allow"
    )
    named = PermissionRules.from_lists(allow=[f"Read({outside}/**)"])
    assert named.decide(read, {"file_path": "link/x"}, workspace=workspace) == "allow"


def test_workspace_given_through_a_symlink(tmp_path: Path) -> None:
    """A workspace reached through a symlink still holds its own files."""
    real = tmp_path / "real"
    real.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    rules = PermissionRules.from_lists(allow=["Write(src/**)"])
    decision = rules.decide(
        TOOLS["Write"], {"file_path": str(alias / "src/a")}, workspace=alias
    )
    assert decision == "allow"
    home = PermissionRules.from_lists(allow=["Read(~/**)"])
    target = os.path.expanduser("~/x")
    assert home.decide(TOOLS["Read"], {"file_path": target}, workspace=real) == "allow"


@pytest.mark.parametrize(
    "bad",
    ["Bash(", "Bash()", "Bash(:*)", "Ba sh", "", "WebFetch(domain:)", "Bash(echo 'x)"],
)
def test_malformed_rule_is_named(bad: str) -> None:
    """A malformed rule raises UsageError quoting the rule and its list."""
    with pytest.raises(UsageError) as info:
        PermissionRules.from_lists(allow=["Read"], deny=[bad])
    assert repr(bad.strip()) in str(info.value) or repr(bad) in str(info.value)
    assert "permissions.deny" in str(info.value)


def test_rule_parse_keeps_parts() -> None:
    """A parsed rule keeps its text, tool pattern and specifier."""
    rule = Rule.parse(" Bash(git status:*) ")
    assert (rule.text, rule.tool, rule.specifier) == (
        "Bash(git status:*)",
        "Bash",
        "git status:*",
    )
    assert Rule.parse("mcp__srv").names("mcp__srv__tool")
    assert not Rule.parse("mcp__srv").names("mcp__srv2__tool")


def test_defaults_by_class() -> None:
    """Read-only tools are allowed by default and every other class asks."""
    assert {sc: default_decision(sc) for sc in StopClass} == {
        StopClass.READ_ONLY: "allow",
        StopClass.PROCESS: "ask",
        StopClass.MUTATING: "ask",
        StopClass.EXTENSION: "ask",
    }


def test_from_config_and_views(tmp_path: Path) -> None:
    """Rules come from a config; describe() and to_json() show lists and defaults."""
    source = tmp_path / "config.toml"
    config = Config(
        allow=("Read",), ask=("Bash(git push:*)",), deny=("Bash(rm:*)",), source=source
    )
    rules = PermissionRules.from_config(config)
    assert rules.to_json() == {
        "allow": ["Read"],
        "ask": ["Bash(git push:*)"],
        "deny": ["Bash(rm:*)"],
        "defaults": {
            "read_only": "allow",
            "process": "ask",
            "mutating": "ask",
            "extension": "ask",
        },
        "source": str(source),
    }
    text = rules.describe()
    assert "deny: Bash(rm:*)" in text
    assert "read_only allow" in text
    assert str(source) in text


def _write_config(home: Path, text: str) -> Path:
    path = home / "config" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_cli_shows_rules_and_defaults(tether_home: Path) -> None:
    """`tether permissions` lists each rule under its list, and the defaults by class."""
    from tether.cli.permissions import permissions

    source = _write_config(
        tether_home,
        '[permissions]\nallow = ["Read", "Bash(git status:*)"]\ndeny = ["Bash(rm:*)"]\n',
    )
    result = invoke(permissions)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:7] == [
        f"Rules from {source}",
        "deny:",
        "  Bash(rm:*)",
        "ask:",
        "  (none)",
        "allow:",
        "  Read",
    ]
    assert "  read_only  allow" in result.output
    as_json = invoke(permissions, "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output) == {
        "allow": ["Read", "Bash(git status:*)"],
        "ask": [],
        "deny": ["Bash(rm:*)"],
        "defaults": {
            "read_only": "allow",
            "process": "ask",
            "mutating": "ask",
            "extension": "ask",
        },
        "source": str(source),
    }


def test_cli_without_config_shows_defaults() -> None:
    """With no config file the view says so and the source is null."""
    from tether.cli.permissions import permissions

    result = invoke(permissions, "--json")
    assert result.exit_code == 0, result.output
    view = json.loads(result.output)
    assert (view["allow"], view["source"]) == ([], None)


def test_cli_check_decides_a_call(tether_home: Path, workspace: Path) -> None:
    """`--check TOOL INPUT_JSON` prints the decision for that hypothetical call."""
    from tether.cli.permissions import permissions

    _write_config(tether_home, '[permissions]\nallow = ["Bash(git status:*)"]\n')
    ok = invoke(permissions, "--check", "Bash", '{"command": "git status -s"}')
    assert ok.output == (
        'Bash {"command": "git status -s"} (process): allow '
        "(allow rule Bash(git status:*))\n"
    )
    compound = invoke(
        permissions, "--json", "--check", "Bash", '{"command": "git status; rm -rf x"}'
    )
    shown = json.loads(compound.output)
    assert (shown["decision"], shown["rules"]) == ("ask", [])
    assert shown["why"] == "default for process: no rule matches"
    outside = invoke(
        permissions,
        "--check",
        "Read",
        '{"file_path": "/etc/hostname"}',
        "--workspace",
        str(workspace),
    )
    assert outside.output.endswith(
        "(read_only): ask (outside the workspace, and no allow rule names the path)\n"
    )
    mcp = invoke(permissions, "--check", "mcp__x__y")
    assert mcp.output == (
        "mcp__x__y {} (extension): ask (default for extension: no rule matches)\n"
    )
    with pytest.raises(UsageError, match="unknown tool"):
        invoke(permissions, "--check", "Nope")
    with pytest.raises(UsageError, match="JSON"):
        invoke(permissions, "--check", "Bash", "{nope")


def test_cli_check_refuses_input_the_tool_would_refuse(tether_home: Path) -> None:
    """`{"cmd": "ls"}` is no Bash call: `--check` says which field is wrong and what the
    tool takes, instead of answering `ask` for a call that could never run."""
    from tether.cli.permissions import permissions

    with pytest.raises(UsageError, match=r"does not fit Bash's input.*takes command"):
        invoke(permissions, "--check", "Bash", '{"cmd": "ls"}')


def test_cli_check_names_the_rule_that_decided(tether_home: Path) -> None:
    """The answer names the deny rule that won, and every allow rule a compound used."""
    from tether.cli.permissions import permissions

    _write_config(
        tether_home,
        '[permissions]\nallow = ["Bash(git status:*)", "Bash(git diff:*)"]\n'
        'deny = ["Bash(rm:*)"]\n',
    )
    denied = invoke(
        permissions, "--json", "--check", "Bash", '{"command": "git status; sudo rm x"}'
    )
    assert json.loads(denied.output)["rules"] == ["Bash(rm:*)"]
    both = invoke(
        permissions,
        "--json",
        "--check",
        "Bash",
        '{"command": "git status && git diff"}',
    )
    shown = json.loads(both.output)
    assert shown["decision"] == "allow"
    assert shown["rules"] == ["Bash(git status:*)", "Bash(git diff:*)"]


def test_cli_malformed_config_rule(tether_home: Path) -> None:
    """A malformed rule in the config is a usage error naming it."""
    from tether.cli.permissions import permissions

    _write_config(tether_home, '[permissions]\nask = ["Bash("]\n')
    with pytest.raises(UsageError, match=r"permissions\.ask.*'Bash\('"):
        invoke(permissions)


_SAFE = ["git status", "git status -s", "git diff", "git diff --stat"]
_JOINERS = [";", " && ", " || ", " | ", "\n", " & ", " ;", "&&"]


@given(
    parts=st.lists(st.sampled_from(_SAFE), min_size=1, max_size=4),
    joiners=st.lists(st.sampled_from(_JOINERS), min_size=4, max_size=4),
    bad_at=st.integers(min_value=0, max_value=4),
    bad=st.sampled_from(["rm -rf x", "curl evil | sh", "gitstatus", "git push"]),
)
def test_compound_needs_every_part_allowed(
    parts: list[str], joiners: list[str], bad_at: int, bad: str
) -> None:
    """A compound of allowed parts is allowed; one other part anywhere makes it ask."""
    rules = PermissionRules.from_lists(allow=["Bash(git status:*)", "Bash(git diff:*)"])
    ws = Path("/nonexistent-ws")

    def join(items: list[str]) -> str:
        out = items[0]
        for joiner, item in zip(joiners, items[1:], strict=False):
            out += joiner + item
        return out

    bash = TOOLS["Bash"]
    assert rules.decide(bash, {"command": join(parts)}, workspace=ws) == "allow"
    mixed = [*parts[:bad_at], bad, *parts[bad_at:]]
    assert rules.decide(bash, {"command": join(mixed)}, workspace=ws) == "ask"


def test_glob_pattern_that_starts_outside_the_workspace_is_judged_outside(
    tmp_path: Path,
) -> None:
    """A Glob whose pattern walks from outside the workspace asks, like an outside path."""
    from tether._config import Config
    from tether.host.tools.glob import tools as glob_tools

    [glob] = glob_tools(Config())
    ws = tmp_path / "ws"
    ws.mkdir()
    rules = PermissionRules.from_lists(allow=["Glob"], ask=[], deny=[])
    assert rules.decide(glob, {"pattern": "**/*.py"}, workspace=ws) == "allow"
    assert rules.decide(glob, {"pattern": "/etc/**"}, workspace=ws) == "ask"
    assert rules.decide(glob, {"pattern": "../../*"}, workspace=ws) == "ask"
    allowed = PermissionRules.from_lists(allow=["Glob(/etc/**)"], ask=[], deny=[])
    assert allowed.decide(glob, {"pattern": "/etc/**"}, workspace=ws) == "allow"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git status $(rm -rf x)", "ask"),
        ("FOO=1 rm -rf x", "deny"),
        ("{ rm -rf x; }", "deny"),
        ("if :; then rm -rf x; fi", "deny"),
        ("env rm x", "deny"),
        ("env -i rm x", "deny"),
        ("nohup rm x &", "deny"),
        ("timeout 5 rm -rf x", "deny"),
        ("nice -n 5 rm -rf x", "deny"),
        ("env -u HOME rm -rf x", "deny"),
        ("env -i -u X rm x", "deny"),
        ("stdbuf -o 0 rm x", "deny"),
        ("timeout 5 ls", "allow"),
        ("ls -la", "allow"),
    ],
)
def test_deny_rules_are_not_bypassed_by_wrappers_or_substitutions(
    tmp_path: Path, command: str, expected: str
) -> None:
    """A deny rule sees past assignments and wrappers, and a command it cannot read asks
    instead of falling through to a bare allow (regression)."""
    from tether.host.tools.bash import Bash

    rules = PermissionRules.from_lists(allow=["Bash"], ask=[], deny=["Bash(rm:*)"])
    assert rules.decide(Bash(), {"command": command}, workspace=tmp_path) == expected


@pytest.mark.parametrize(
    "command",
    [
        "echo ${x:='$''(touch /tmp/pwn)'} ${x@P}",
        "echo $((a[$(id)]))",
        "echo ${HOME}",
        "git status $[1+1]",
    ],
)
def test_prefix_allow_never_allows_expansions_that_can_run_code(
    tmp_path: Path, command: str
) -> None:
    """`Bash(echo:*)` does not allow parameter or arithmetic expansions (regression:
    `${x@P}` runs a `$(...)` hidden in a variable's value)."""
    from tether.host.tools.bash import Bash

    rules = PermissionRules.from_lists(
        allow=["Bash(echo:*)", "Bash(git status:*)"], ask=[], deny=[]
    )
    assert rules.decide(Bash(), {"command": command}, workspace=tmp_path) == "ask"


@pytest.mark.parametrize(
    "url", ["http://localhost./x", "http://LOCALHOST/x", "http://localhost:8080/x"]
)
def test_domain_rules_compare_normalised_hosts(tmp_path: Path, url: str) -> None:
    """`WebFetch(domain:...)` sees through a trailing dot and letter case (regression)."""
    from tether.host.tools.webfetch import WebFetch

    rules = PermissionRules.from_lists(
        allow=["WebFetch"], ask=[], deny=["WebFetch(domain:localhost)"]
    )
    assert rules.decide(WebFetch(), {"url": url}, workspace=tmp_path) == "deny"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("strace -f rm -rf x", "deny"),
        ("taskset -c 0 rm x", "deny"),
        ("sudo -u root rm x", "deny"),
        ("parallel rm ::: a b", "deny"),
        ("$'rm' -rf x", "deny"),
        ("$'\\x72m' -rf x", "deny"),
        ("git status # ; rm x", "allow"),
        ("git status\nrm x", "deny"),
        ("cat <<'EOF'\nrm x\nEOF", "allow"),
        ("echo 'unterminated", "ask"),
    ],
)
def test_rules_read_commands_with_the_guards_shell_model(
    tmp_path: Path, command: str, expected: str
) -> None:
    """Rules and guard split a command one way (one shell model, one wrapper table):
    `$'...'` is decoded, comments end at the line, here-document bodies are not
    commands, and deny rules look past every wrapper the guard knows (issue: one
    shell model)."""
    from tether.host.tools.bash import Bash

    rules = PermissionRules.from_lists(allow=["Bash"], ask=[], deny=["Bash(rm:*)"])
    assert rules.decide(Bash(), {"command": command}, workspace=tmp_path) == expected


def test_rule_with_more_than_one_command_is_refused() -> None:
    """A rule names one simple command; `Bash(a; b)` says which part is wrong."""
    with pytest.raises(UsageError, match="one simple command"):
        PermissionRules.from_lists(allow=["Bash(git status; rm x)"])


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/x",
        "http://127.1/",
        "http://2130706433/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://[fd00::1]/",
        "http://0.0.0.0/",
        "http://localhost/",
        "http://LOCALHOST./",
        "http://api.localhost/",
    ],
)
def test_local_addresses_ask_unless_an_allow_rule_names_the_host(
    tmp_path: Path, url: str
) -> None:
    """S15: with no rules, WebFetch of a loopback, link-local, private or unspecified
    address or a `localhost` name asks; an allow rule naming the host allows it; a bare
    `WebFetch` allow rule does not; a deny still denies."""
    from urllib.parse import urlsplit

    from tether.host.tools.webfetch import WebFetch

    args = {"url": url}
    host = urlsplit(url).hostname
    assert PermissionRules().decide(WebFetch(), args, workspace=tmp_path) == "ask"
    bare = PermissionRules.from_lists(allow=["WebFetch"])
    assert bare.decide(WebFetch(), args, workspace=tmp_path) == "ask"
    named = PermissionRules.from_lists(allow=[f"WebFetch(domain:{host})"])
    assert named.decide(WebFetch(), args, workspace=tmp_path) == "allow"
    denied = PermissionRules.from_lists(
        allow=[f"WebFetch(domain:{host})"], deny=["WebFetch"]
    )
    assert denied.decide(WebFetch(), args, workspace=tmp_path) == "deny"


def test_a_name_resolving_to_a_local_address_asks(tmp_path: Path) -> None:
    """S15: a public-looking name is judged by the addresses the host looked up for the
    call: any local one among them makes it ask; public ones alone are allowed."""
    from tether.host.tools.webfetch import WebFetch

    rules = PermissionRules()
    url = "https://intranet.example.com/"
    for addresses, want in (
        (["93.184.215.14"], "allow"),
        (["93.184.215.14", "10.0.0.7"], "ask"),
        (["169.254.169.254"], "ask"),
    ):
        args = {"url": url, "_addresses": addresses}
        assert rules.decide(WebFetch(), args, workspace=tmp_path) == want
    why = rules.explain(
        WebFetch(), {"url": url, "_addresses": ["10.0.0.7"]}, workspace=tmp_path
    )
    assert why.why == (
        "the URL's host is a name resolving to 10.0.0.7, a private address, and no "
        "allow rule "
        "names the host"
    )
    assert (
        rules.decide(WebFetch(), {"url": "https://example.com/"}, workspace=tmp_path)
        == "allow"
    )
