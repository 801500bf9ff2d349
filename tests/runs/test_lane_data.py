"""A lane's git state is data to tether (spec 01 S16): what a lane wrote never runs,
is never followed, never blocks a stage end, a halt's save or its view, and a lane
tether cannot read is held with a one-line reason.

Each attack is planted in a real lane (as its agent would, from inside the wall) and
tether's own operations on it are run: the stage end's commit (`commit_leftovers`),
bringing its branch back, the halt's save (`move_aside`) and its view
(`view_of_save`). The commands a lane names write proof files; none may appear.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from typing import TYPE_CHECKING

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.runs._lane_git import (
    GitFailed,
    LaneUnreadable,
    SaveFailed,
    bring_back,
    commit_leftovers,
    lane_dir,
    move_aside,
    open_lane,
    view_of_save,
)

from .support import git as sh_git
from .support import make_repo

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.rule("S16"), pytest.mark.slow]

OTHER_UID = 1000
BOUND = 20.0
"""Seconds any one of tether's operations on a hostile lane may take here."""


def _proof_cmd(proof: Path, name: str) -> str:
    return f"touch {proof / name}"


def _config(lane: Path, text: str) -> None:
    with (lane / ".git" / "config").open("a", encoding="utf-8") as f:
        f.write(text)


def _filters(lane: Path, proof: Path, *, hidden: bool) -> None:
    """clean/smudge/process filters, a textconv, a merge driver, fsmonitor..."""
    _config(
        lane,
        f'[filter "x"]\n\tclean = {_proof_cmd(proof, "clean")}\n'
        f"\tsmudge = {_proof_cmd(proof, 'smudge')}\n"
        f"\tprocess = {_proof_cmd(proof, 'process')}\n\trequired = true\n"
        f'[diff "x"]\n\ttextconv = {_proof_cmd(proof, "textconv")}\n'
        f'[merge "x"]\n\tdriver = {_proof_cmd(proof, "merge")}\n'
        f"[core]\n\tfsmonitor = {_proof_cmd(proof, 'fsmonitor')}\n"
        f"\talternateRefsCommand = {_proof_cmd(proof, 'altrefs')}\n"
        f"\tsshCommand = {_proof_cmd(proof, 'ssh')}\n",
    )
    line = "* filter=x diff=x merge=x\n"
    if hidden:
        (lane / ".git" / "info").mkdir(exist_ok=True)
        (lane / ".git" / "info" / "attributes").write_text(line, encoding="utf-8")
    else:
        (lane / ".gitattributes").write_text(line, encoding="utf-8")


async def _open(tmp_path: Path, name: str = "a") -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    if not repo.exists():
        make_repo(tmp_path)
    lane = lane_dir("run_s16", f"lane_{name}")
    if lane.with_name(f"{lane.name}.git").exists():
        # A lane id is never reused across repositories; a test example that does
        # starts from a fresh state dir.
        shutil.rmtree(lane.with_name(f"{lane.name}.git"))
    await open_lane(repo, lane, f"tether/{name}")
    return repo, lane


def _person(repo: Path) -> tuple[str, str, str, bytes]:
    """The person's checkout, branch, refs and index as an attack would change them."""
    return (
        sh_git(repo, "status", "--porcelain"),
        sh_git(repo, "rev-parse", "HEAD"),
        sh_git(
            repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main"
        ),
        (repo / ".git" / "index").read_bytes(),
    )


async def _stage_end_and_halt(repo: Path, lane: Path, name: str) -> str:
    """A stage end, the branch brought back, the halt's save and its view; what the
    lane's outcome was (committed / held: reason / saved)."""
    said = []
    with anyio.fail_after(BOUND):
        try:
            made = await commit_leftovers(lane, "work")
            said.append(f"committed {made}")
            await bring_back(repo, lane, f"tether/{name}")
        except GitFailed as exc:
            said.append(f"held: {exc}")
    with anyio.fail_after(BOUND):
        moved = await move_aside(lane, run="run_s16", lane_id=f"lane_{name}")
    assert not await anyio.Path(lane).exists()
    with anyio.fail_after(BOUND):
        try:
            save = await view_of_save(
                repo, moved, run="run_s16", lane_id=f"lane_{name}", message="v"
            )
            said.append(f"saved {save.commit}")
        except SaveFailed as exc:
            said.append(f"view failed: {exc}")
    # Each reason tether gives is one line.
    assert all("\n" not in line for line in said), said
    return "; ".join(said)


@pytest.mark.parametrize(
    "hidden", [False, True], ids=["gitattributes", "info-attributes"]
)
async def test_a_lanes_filters_and_drivers_never_run(
    tmp_path: Path, hidden: bool
) -> None:
    proof = tmp_path / "proof"
    proof.mkdir()
    repo, lane = await _open(tmp_path)
    _filters(lane, proof, hidden=hidden)
    (lane / "work.txt").write_text("work\n", encoding="utf-8")
    outcome = await _stage_end_and_halt(repo, lane, "a")
    assert outcome.startswith("committed"), outcome
    assert "saved" in outcome, outcome
    assert sorted(os.listdir(proof)) == []
    # The bytes are kept as on disk: no filter, no conversion.
    assert sh_git(repo, "show", "tether/a:work.txt") == "work"


async def test_gitdir_and_commondir_pointers_and_a_link_to_another_lane_are_refused(
    tmp_path: Path,
) -> None:
    repo, lane = await _open(tmp_path, "a")
    _, other = await _open(tmp_path, "b")
    other_branch = sh_git(other, "rev-parse", "HEAD")
    before = _person(repo)
    outcomes = {}
    # `.git` a gitdir: file naming the person's repository.
    shutil.rmtree(lane / ".git")
    (lane / ".git").write_text(f"gitdir: {repo / '.git'}\n", encoding="utf-8")
    (lane / "new.txt").write_text("x\n", encoding="utf-8")
    with anyio.fail_after(BOUND), pytest.raises(LaneUnreadable, match="not a folder"):
        await commit_leftovers(lane, "work")
    # `.git` a link to the other lane's git dir.
    (lane / ".git").unlink()
    (lane / ".git").symlink_to(other / ".git")
    with anyio.fail_after(BOUND), pytest.raises(LaneUnreadable, match="symlink"):
        await commit_leftovers(lane, "work")
    # A real `.git` holding a commondir pointer.
    (lane / ".git").unlink()
    _, third = await _open(tmp_path, "c")
    (third / ".git" / "commondir").write_text(f"{repo / '.git'}\n", encoding="utf-8")
    (third / "new.txt").write_text("x\n", encoding="utf-8")
    with anyio.fail_after(BOUND), pytest.raises(LaneUnreadable, match="commondir"):
        await commit_leftovers(third, "work")
    outcomes["c"] = await _stage_end_and_halt(repo, third, "c")
    assert "held" in outcomes["c"]
    assert _person(repo) == before
    assert sh_git(other, "rev-parse", "HEAD") == other_branch
    assert "new.txt" not in sh_git(repo, "ls-tree", "-r", "--name-only", "tether/b")


async def test_worktree_shared_repository_and_include_have_no_effect(
    tmp_path: Path,
) -> None:
    proof = tmp_path / "proof"
    proof.mkdir()
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    (secret / "secret.txt").write_text("secret\n", encoding="utf-8")
    included = tmp_path / "included.cfg"
    included.write_text(
        f"[core]\n\tfsmonitor = {_proof_cmd(proof, 'include')}\n", encoding="utf-8"
    )
    repo, lane = await _open(tmp_path)
    _config(
        lane,
        f"[core]\n\tworktree = {secret}\n\tsharedRepository = 0777\n"
        f"[include]\n\tpath = {included}\n",
    )
    (lane / "work.txt").write_text("work\n", encoding="utf-8")
    outcome = await _stage_end_and_halt(repo, lane, "a")
    assert outcome.startswith("committed"), outcome
    files = sh_git(repo, "ls-tree", "-r", "--name-only", "tether/a").split()
    assert "secret.txt" not in files
    assert "work.txt" in files
    assert os.listdir(proof) == []
    for top, dirs, _ in os.walk(repo / ".git" / "objects"):
        for d in dirs:
            mode = os.stat(os.path.join(top, d)).st_mode
            assert not mode & (stat.S_ISGID | stat.S_IWOTH), (top, d, oct(mode))


@pytest.mark.parametrize(
    "where", ["config", "HEAD", "index", "objects/info/alternates", ".gitignore"]
)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
async def test_a_fifo_or_dev_zero_at_a_file_tether_reads_never_blocks(
    tmp_path: Path, where: str, kind: str
) -> None:
    repo, lane = await _open(tmp_path)
    (lane / "work.txt").write_text("work\n", encoding="utf-8")
    target = lane / where if where == ".gitignore" else lane / ".git" / where
    target.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    started = time.monotonic()
    outcome = await _stage_end_and_halt(repo, lane, "a")
    assert time.monotonic() - started < BOUND
    if where in ("HEAD", "objects/info/alternates"):
        assert "held" in outcome, outcome
        assert "view failed" in outcome, outcome
    else:
        # What tether does not read (config, index) or reads as data (.gitignore,
        # noted and not honoured) does not hold the lane.
        assert outcome.startswith("committed"), outcome
        assert "saved" in outcome, outcome


async def test_a_sparse_file_and_a_sparse_index_fill_no_disk(tmp_path: Path) -> None:
    repo, lane = await _open(tmp_path)
    with (lane / ".git" / "index").open("r+b") as f:
        f.truncate(1 << 30)
    with (lane / "huge.bin").open("wb") as f:
        f.truncate(1 << 30)
    objects_before = sh_git(repo, "count-objects", "-v")
    outcome = await _stage_end_and_halt(repo, lane, "a")
    assert "sparse" in outcome, outcome
    assert "held" in outcome, outcome
    assert "view failed" in outcome, outcome
    assert sh_git(repo, "count-objects", "-v") == objects_before


@pytest.mark.parametrize(
    "head", [b"garbage\n", b"ref: refs/heads/../../../etc\n", b"ref: refs/heads/nope\n"]
)
async def test_a_garbage_head_holds_the_lane_with_a_reason(
    tmp_path: Path, head: bytes
) -> None:
    repo, lane = await _open(tmp_path)
    (lane / ".git" / "HEAD").write_bytes(head)
    _config(lane, "[core\n\tgarbage line = = =\n")
    outcome = await _stage_end_and_halt(repo, lane, "a")
    assert outcome.startswith("held: its HEAD") or "has no commit" in outcome, outcome


async def test_a_git_file_in_a_subfolder_is_data_and_holds_nothing(
    tmp_path: Path,
) -> None:
    repo, lane = await _open(tmp_path)
    (lane / "vendor" / "x").mkdir(parents=True)
    (lane / "vendor" / "x" / ".git").write_text("gitdir: /nowhere\n", encoding="utf-8")
    (lane / "vendor" / "x" / "lib.c").write_text("int x;\n", encoding="utf-8")
    (lane / "fixture").mkdir()
    await anyio.run_process(["git", "init", "-q", str(lane / "fixture")])
    (lane / "fixture" / "f.txt").write_text("f\n", encoding="utf-8")
    outcome = await _stage_end_and_halt(repo, lane, "a")
    assert outcome.startswith("committed"), outcome
    assert "saved" in outcome, outcome
    files = sh_git(repo, "ls-tree", "-r", "--name-only", "tether/a").split()
    assert "vendor/x/lib.c" in files
    assert "fixture/f.txt" in files
    assert not any(f.endswith(".git") or "/.git/" in f for f in files)


async def test_a_lane_owned_by_another_uid_is_read_as_data_too(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("os.chown to a second uid needs root")
    proof = tmp_path / "proof"
    proof.mkdir()
    repo, lane = await _open(tmp_path)
    _filters(lane, proof, hidden=True)
    (lane / "work.txt").write_text("work\n", encoding="utf-8")
    for top, dirs, files in os.walk(lane):
        for name in [*dirs, *files]:
            os.chown(
                os.path.join(top, name), OTHER_UID, OTHER_UID, follow_symlinks=False
            )
    os.chown(lane, OTHER_UID, OTHER_UID)
    outcome = await _stage_end_and_halt(repo, lane, "a")
    assert outcome.startswith("committed"), outcome
    assert "saved" in outcome, outcome
    assert os.listdir(proof) == []


# -- the property: random hostile git state -------------------------------------------

_COMMAND_KEYS = [
    "core.fsmonitor",
    "core.sshCommand",
    "core.pager",
    "core.editor",
    "core.askPass",
    "core.alternateRefsCommand",
    "core.hooksPath",
    "filter.x.clean",
    "filter.x.smudge",
    "filter.x.process",
    "diff.x.textconv",
    "diff.x.command",
    "merge.x.driver",
    "credential.helper",
    "gpg.program",
    "sequence.editor",
    "uploadpack.packObjectsHook",
    "alias.status",
    "alias.add",
]
_ATTRIBUTES = ["* filter=x", "* diff=x", "* merge=x", "* text eol=crlf", "*.txt ident"]
_POINTERS = ["gitdir-file", "commondir", "link", "none"]
_KINDS = ["fifo-gitignore", "link-gitignore", "socket", "none", "nested-git"]


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    keys=st.lists(st.sampled_from(_COMMAND_KEYS), min_size=1, max_size=6, unique=True),
    attributes=st.lists(st.sampled_from(_ATTRIBUTES), max_size=3),
    hidden=st.booleans(),
    pointer=st.sampled_from(_POINTERS),
    kind=st.sampled_from(_KINDS),
    hook=st.booleans(),
)
def test_random_hostile_git_state_never_runs_and_never_hangs(
    tmp_path_factory: pytest.TempPathFactory,
    keys: list[str],
    attributes: list[str],
    hidden: bool,
    pointer: str,
    kind: str,
    hook: bool,
) -> None:
    tmp_path = tmp_path_factory.mktemp("hostile")

    async def main() -> str:
        proof = tmp_path / "proof"
        proof.mkdir()
        repo, lane = await _open(tmp_path)
        lines = []
        for n, key in enumerate(keys):
            section, _, name = key.rpartition(".")
            head, _, sub = section.partition(".")
            title = f'[{head} "{sub}"]' if sub else f"[{head}]"
            lines.append(f"{title}\n\t{name} = touch {proof}/{n}-{key}\n")
        _config(lane, "".join(lines))
        if attributes:
            text = "\n".join(attributes) + "\n"
            if hidden:
                (lane / ".git" / "info").mkdir(exist_ok=True)
                (lane / ".git" / "info" / "attributes").write_text(
                    text, encoding="utf-8"
                )
            else:
                (lane / ".gitattributes").write_text(text, encoding="utf-8")
        if hook:
            hooks = lane / ".git" / "hooks"
            hooks.mkdir(exist_ok=True)
            for name in ("pre-commit", "post-commit", "reference-transaction"):
                (hooks / name).write_text(f"#!/bin/sh\ntouch {proof}/hook-{name}\n")
                (hooks / name).chmod(0o755)
        (lane / "work.txt").write_text("work\n", encoding="utf-8")
        if kind == "fifo-gitignore":
            os.mkfifo(lane / ".gitignore")
        elif kind == "link-gitignore":
            (lane / ".gitignore").symlink_to("/dev/zero")
        elif kind == "nested-git":
            (lane / "sub").mkdir()
            (lane / "sub" / ".git").write_text(f"gitdir: {repo / '.git'}\n")
        elif kind == "socket":
            import socket

            with socket.socket(socket.AF_UNIX) as s:
                s.bind(str(lane / "sock"))
        if pointer == "gitdir-file":
            shutil.rmtree(lane / ".git")
            (lane / ".git").write_text(f"gitdir: {repo / '.git'}\n", encoding="utf-8")
        elif pointer == "commondir":
            (lane / ".git" / "commondir").write_text(str(repo / ".git"))
        elif pointer == "link":
            shutil.move(lane / ".git", tmp_path / "elsewhere.git")
            (lane / ".git").symlink_to(tmp_path / "elsewhere.git")
        before = _person(repo)
        outcome = await _stage_end_and_halt(repo, lane, "a")
        assert os.listdir(proof) == [], outcome
        assert _person(repo) == before
        return outcome

    outcome = anyio.run(main)
    assert outcome
