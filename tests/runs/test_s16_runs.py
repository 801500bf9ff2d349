"""S16 through real runs: git state an agent plants in its lane is data to tether.

A command agent (one shell stage per item, one run for every plant) plants git config
that names commands (filters with the attributes that select them, drivers, hooks,
fsmonitor, an editor, gpg, an include), `core.worktree` and `core.sharedRepository`,
FIFOs and links, and pointers out of its lane (`gitdir:`, a `.git` link, `commondir`,
alternates); the built-in agent does it with its Write tool alone. Each command would
write a proof file outside the wall. After the run's own git steps (the stage end's
commit, bringing the branch, the halt's save and view, `tether lanes prune`): no proof
file, the person's repository (its branches, HEAD, index, files and object folders'
modes) as it was, and the stop and the run over in time.
"""

from __future__ import annotations

import json
import stat
from typing import TYPE_CHECKING

import pytest
from tests.waiting import wait_until

from tether.host import containment
from tether.runs import LaneState
from tether.stop import set_stop

from .support import (
    WAIT_FOR_GO,
    git,
    kinds,
    make_repo,
    open_default_store,
    run_id_of,
    start,
    tether,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.rule("S16"), pytest.mark.slow]

RUN_BOUND = 25.0
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


HOOKS = (
    "pre-commit prepare-commit-msg commit-msg post-commit post-checkout "
    "reference-transaction post-index-change pre-auto-gc post-rewrite "
    "fsmonitor-watchman pre-push post-merge"
)

PLANT = """\
set -e
echo work > work.txt
case "$TETHER_ITEM" in
config)
    cat >> .git/config <<'END'
[filter "x"]
\tclean = touch {proof}/clean
\tsmudge = touch {proof}/smudge
\tprocess = touch {proof}/process
\trequired = true
[diff "x"]
\ttextconv = touch {proof}/textconv
[merge "x"]
\tdriver = touch {proof}/merge
[core]
\tfsmonitor = touch {proof}/fsmonitor
\thooksPath = planted-hooks
\tsshCommand = touch {proof}/ssh
\taskPass = touch {proof}/askpass
\teditor = touch {proof}/editor
\talternateRefsCommand = touch {proof}/altrefs
\tworktree = {victim}
\tsharedRepository = 0777
[commit]
\tgpgSign = true
[gpg]
\tprogram = touch {proof}/gpg
[uploadpack]
\tpackObjectsHook = touch {proof}/packhook
[include]
\tpath = more-config
END
    printf '[core]\\n\\tpager = touch {proof}/pager\\n' > .git/more-config
    printf '* filter=x diff=x merge=x\\n' > .gitattributes
    mkdir -p .git/info .git/hooks planted-hooks
    printf '* filter=x diff=x merge=x\\n' > .git/info/attributes
    for h in {hooks}; do
        printf '#!/bin/sh\\ntouch {proof}/hook-%s\\n' "$h" > ".git/hooks/$h"
        cp ".git/hooks/$h" "planted-hooks/$h"
        chmod +x ".git/hooks/$h" "planted-hooks/$h"
    done
    ;;
fifos)
    mkfifo pipe
    mkdir -p sub vendor .git/info
    mkfifo sub/pipe
    mkfifo .gitignore
    rm -f .git/info/exclude .git/index
    mkfifo .git/info/exclude .git/index
    ln -s {victim}/secret link-out
    printf 'gitdir: {repo}/.git\\n' > vendor/.git
    ;;
gitdir) rm -rf .git; printf 'gitdir: {repo}/.git\\n' > .git ;;
gitlink) rm -rf .git; ln -s {repo}/.git .git ;;
commondir) printf '{repo}/.git\\n' > .git/commondir ;;
alternates) printf '{repo}/.git/objects\\n{victim}\\n' > .git/objects/info/alternates ;;
headfifo) rm .git/HEAD; mkfifo .git/HEAD ;;
esac
"""
"""What each item's agent plants in its lane (a command agent: one shell stage)."""

HELD = {
    "gitdir": "gitdir",
    "gitlink": "a symlink",
    "commondir": "commondir",
    "alternates": "alternates",
    "headfifo": "HEAD",
}
"""Items whose lane tether cannot read, and a word of the one-line reason it gives."""
READ = ("config", "fifos")
"""Items whose plants are data in a lane tether reads: committed, saved, viewed."""
STOP_BOUND = 10.0
"""Seconds from the stop seen to the run halted here (spec 05: 2 s, plus load)."""


def _plan(root: Path, repo: Path, script: str) -> Path:
    stages = [
        ("plant", script, ""),
        ("wait", "echo more > more.txt; " + WAIT_FOR_GO.format(stage="wait"), "never"),
        ("last", "true", ""),
    ]
    parts = [f'repo = "{repo}"', "lanes = 4", "poll = 0.1", ""]
    for name, body, commit in stages:
        parts += [
            "[[stage]]",
            f'name = "{name}"',
            f"agent = ['sh', '-c', '''{body}''']",
        ]
        parts += [f'commit = "{commit}"'] if commit else []
        parts.append("")
    for item in (*READ, *HELD):
        parts += ["[[item]]", f'id = "{item}"', f'brief = "{item}"', ""]
    plan = root / "plan.toml"
    plan.write_text("\n".join(parts), encoding="utf-8")
    return plan


def _loose_modes(repo: Path) -> set[int]:
    """Modes of the folders of the person's objects."""
    return {
        stat.S_IMODE(p.stat().st_mode)
        for p in (repo / ".git" / "objects").rglob("*")
        if p.is_dir()
    }


def test_s16_git_state_a_command_agent_plants_never_acts_at_any_git_step(
    tmp_path: Path,
) -> None:
    """One run, an item per plant: config commands (filters, drivers, fsmonitor,
    hooks and hooksPath, editors, gpg, an include, `core.worktree`,
    `core.sharedRepository`) with both attribute files; FIFOs in the tree, at
    `.gitignore`, `info/exclude` and the index, a link out, a `.git` file in a
    subfolder; and pointers tether must refuse (`gitdir:`, `.git` a link to the
    person's, `commondir`, alternates it did not write, a FIFO at HEAD). The run's own
    git steps (the stage end's commit, bringing the branch, the halt's save, its view,
    `tether lanes prune`) run none of it, follow none of it, block on none of it; the
    person's repository and the victim folder are as they were."""
    repo = make_repo(tmp_path)
    proof = tmp_path / "proof"
    proof.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("not the lane's\n", encoding="utf-8")
    (victim / "secret").chmod(0o600)
    marks = tmp_path / "marks"
    marks.mkdir()
    script = PLANT.format(proof=proof, victim=victim, repo=repo, hooks=HOOKS)
    plan = _plan(tmp_path, repo, script)
    before = _person(repo)
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    store = open_default_store()

    def ready() -> bool:
        ended = {e.lane for e in store.events(run) if e.kind == "lane-done"}
        return len(ended) == len(HELD) and all(
            (marks / f"{item}.wait").exists() for item in READ
        )

    wait_until(
        ready,
        what="held lanes ended, the others waiting",
        bound=RUN_BOUND,
        explain=lambda: (
            [(e.kind, e.lane, e.detail[:150]) for e in store.events(run)],
            sorted(p.name for p in marks.iterdir()),
        ),
    )
    set_stop("test")
    wait_until(
        lambda: ("stop-observed", None) in kinds(store, run), what="the stop seen"
    )
    (marks / "go").touch()
    assert proc.wait(timeout=RUN_BOUND) == 3, proc.communicate()
    events = store.events(run)
    at = {(e.kind, e.lane): e.at for e in events}
    halt = at["halted", None] - at["stop-observed", None]
    print(f"stop seen -> halted {halt:.2f} s")
    assert halt <= STOP_BOUND

    assert sorted(p.name for p in proof.iterdir()) == []
    assert _person(repo) == before
    assert not {m for m in _loose_modes(repo) if m & (stat.S_ISGID | 0o002)}
    assert (victim / "secret").read_text(encoding="utf-8") == "not the lane's\n"
    lanes = {lane.item: lane for lane in store.lanes(run)}
    for item in READ:
        # Committed at the stage end, brought, saved aside and viewed after the halt.
        assert git(repo, "show", f"tether/{item}:work.txt") == "work"
        assert lanes[item].state is LaneState.HALTED
        assert git(repo, "show", f"{lanes[item].saved_ref}:more.txt") == "more"
    tree = git(repo, "ls-tree", "-r", "--name-only", "tether/config").split()
    assert "secret" not in tree
    assert ".gitattributes" in tree
    tree = git(repo, "ls-tree", "-r", "--name-only", "tether/fifos").split()
    assert sorted(tree) == ["README.md", "link-out", "work.txt"]
    assert git(repo, "show", "tether/fifos:link-out") == f"{victim}/secret"
    for item, word in HELD.items():
        why = [
            e.detail
            for e in events
            if e.kind == "commit-failed" and e.lane == lanes[item].id
        ]
        assert why, item
        assert word in why[0], (item, why)
        assert all("\n" not in line for line in why)

    pruned = tether("lanes", "prune", "--yes")
    assert pruned.returncode == 0, pruned.stderr
    kept = pruned.stderr.splitlines()
    assert len(kept) == len(HELD), kept
    assert sorted(p.name for p in proof.iterdir()) == []
    assert _person(repo) == before


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
