"""S16 through real runs: git state an agent plants in its lane is data to tether.

A command agent (one shell stage) and the built-in agent (its Write tool alone) plant a
filter in the lane's own git config with the attributes that select it, or replace the
lane's `.git` by a `gitdir:` pointer at the person's repository. The filter's command
would write a proof file outside the wall. After the run: no proof file, the person's
repository (its branches, HEAD, index and files) as it was, and the run over in time.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pytest

from tether.host import containment

from .support import git, make_repo, tether, write_plan

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.rule("S16")

RUN_BOUND = 60.0
"""Seconds a one-item run may take here, whatever its lane holds."""


@pytest.fixture(autouse=True)
def walled() -> None:
    if containment().kind != "namespace":
        pytest.skip(f"the proof needs the wall (namespace): {containment().reason}")


def _person(repo: Path) -> tuple[str, ...]:
    """What of the person's repository a planted pointer could change (the run's own
    `tether/*` branches and saved refs aside)."""
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "symbolic-ref", "HEAD"),
        "\n".join(
            r for r in refs.splitlines() if not r.startswith("refs/heads/tether/")
        ),
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        (repo / ".git" / "index").read_bytes().hex(),
    )


def _filter_config(proof: Path) -> str:
    run = f"sh -c 'echo ran >> {proof} && cat'"  # (a ';' starts a comment)
    return (
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        f'[filter "x"]\n\tclean = {run}\n\tsmudge = {run}\n'
        f'[diff "x"]\n\ttextconv = {run}\n'
    )


PLANTS = {
    "gitattributes": (
        'cat >> .git/config <<"EOF"\n{config}EOF\n'
        'printf "* filter=x diff=x\\n" > .gitattributes\n'
    ),
    "info-attributes": (
        'cat >> .git/config <<"EOF"\n{config}EOF\n'
        'mkdir -p .git/info && printf "* filter=x\\n" > .git/info/attributes\n'
    ),
    "gitdir-pointer": 'rm -rf .git && printf "gitdir: {repo}/.git\\n" > .git\n',
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_s16_git_state_a_command_agent_plants_never_acts(
    tmp_path: Path, plant: str
) -> None:
    repo = make_repo(tmp_path)
    proof = tmp_path / "proof"
    script = PLANTS[plant].format(config=_filter_config(proof), repo=repo)
    plan = write_plan(
        tmp_path,
        repo,
        items=["a"],
        stages=[("plant", script + "echo work > work.txt\n"), ("more", "true")],
    )
    before = _person(repo)
    start = time.monotonic()
    result = tether("run", str(plan))
    took = time.monotonic() - start
    assert not proof.exists(), proof.read_text()
    assert _person(repo)[:3] == before[:3]
    assert _person(repo)[3:] == before[3:]
    assert took < RUN_BOUND
    if plant == "gitdir-pointer":
        assert result.returncode != 0, result.stdout
        assert "gitdir" in result.stdout + result.stderr
    else:
        assert result.returncode == 0, result.stdout + result.stderr
        assert git(repo, "show", "tether/a:work.txt") == "work"


def test_s16_git_state_the_builtin_agent_writes_with_write_alone_never_acts(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    proof = tmp_path / "proof"
    moves = [
        {
            "text": "Planting.",
            "tool_calls": [
                {
                    "id": f"c{n}",
                    "name": "Write",
                    "input": {"file_path": path, "content": content},
                }
                for n, (path, content) in enumerate(
                    [
                        (".git/config", _filter_config(proof)),
                        (".git/info/attributes", "* filter=x diff=x\n"),
                        ("work.txt", "work\n"),
                    ]
                )
            ],
        },
        {"text": "Done."},
    ]
    script = tmp_path / "moves.jsonl"
    lines = [json.dumps({"tether_script": 1}), *(json.dumps(m) for m in moves)]
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'repo = "{repo}"\npoll = 0.1\n\n'
        f'[[stage]]\nname = "implement"\nagent = "builtin"\nmodel = "scripted:{script}"\n\n'
        '[[item]]\nid = "a"\nbrief = "Plant"\n',
        encoding="utf-8",
    )
    before = _person(repo)
    result = tether("run", str(plan))
    assert not proof.exists(), proof.read_text()
    assert _person(repo) == before
    assert result.returncode == 0, result.stdout + result.stderr
    assert git(repo, "show", "tether/a:work.txt") == "work"
