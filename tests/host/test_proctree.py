"""ProcessTree: the supervisor, its orders, and reclaiming escaped descendants (S13)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import anyio
import psutil
import pytest

from tether._bounded_output import BoundedOutput
from tether.host._contain import containment as probe_containment
from tether.host._proctree import ProcessTree, run_command
from tether.testing import alive, tree_pids, tree_procs

if TYPE_CHECKING:
    from pathlib import Path

_SAY = "echo tree-pid $$ $(readlink /proc/self/ns/pid)"
_ESCAPEES = (
    f'setsid sh -c \'trap "echo escapee-term; exit 0" TERM; {_SAY}; '
    "sleep 300 & wait' & "
    f"( sh -c '{_SAY}; exec sleep 300' & ) ; "
    f"{_SAY}; exec sleep 300"
)


@pytest.fixture(params=["namespace", "subreaper"], autouse=True)
def containment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs under both containments."""
    kind = str(request.param)
    monkeypatch.setenv("TETHER_CONTAINMENT", kind)
    return kind


async def _read_until_pids(
    tree: ProcessTree, count: int
) -> tuple[list[str], list[psutil.Process]]:
    chunks: list[str] = []
    with anyio.fail_after(10):
        # Closing the generator at once is what this early return needs.
        async with contextlib.aclosing(tree.output()) as output:
            async for chunk in output:
                chunks.append(chunk.decode())
                if len(tree_pids("".join(chunks))) >= count:
                    return chunks, tree_procs("".join(chunks))
    raise AssertionError("the tree ended before announcing its pids")


@pytest.mark.anyio
async def test_process_tree_reports_the_command_pid_and_its_exit_code(
    workspace: Path,
) -> None:
    """The command runs in its own process group below the supervisor; its code comes back."""
    async with ProcessTree() as tree:
        await tree.start(
            ["bash", "-c", f"{_SAY}; ps -o pgid= -p $$; exit 5"],
            cwd=workspace,
            env=dict(os.environ),
        )
        assert tree.pid is not None
        assert tree.supervisor_pid is not None
        output = b"".join([chunk async for chunk in tree.output()]).decode()
        with anyio.fail_after(5):
            assert await tree.wait() == 5
    assert tree_pids(output) == [tree.pid]
    assert int(output.split()[-1]) == tree.pid
    assert tree.returncode == 5
    assert not psutil.pid_exists(tree.supervisor_pid)


@pytest.mark.rule("S13")
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_s13_kill_reaps_setsid_and_double_forked_descendants(
    workspace: Path,
) -> None:
    """S13: kill() leaves no process of the tree, escaped ones included, and reaps them."""
    async with ProcessTree() as tree:
        await tree.start(["bash", "-c", _ESCAPEES], cwd=workspace, env=dict(os.environ))
        _, procs = await _read_until_pids(tree, 3)
        found = set(tree.alive_pids())
        assert {p.pid for p in procs} <= found
        assert tree.supervisor_pid in found
        with anyio.fail_after(5):
            code = await tree.kill()
    assert code == -signal.SIGKILL
    assert alive(procs) == []
    assert tree.alive_pids() == []


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_terminate_reaches_descendants_outside_the_process_group(
    workspace: Path,
) -> None:
    """S13: terminate() sends SIGTERM to a setsid escapee too, whose TERM trap runs."""
    # The main shell ignores SIGTERM (set after the escapees started, so they can still
    # trap it) so the escapee's trap can report before the kill.
    head, _, main = _ESCAPEES.rpartition(f"{_SAY};")
    command = f"{head}trap '' TERM; {_SAY};{main}"
    async with ProcessTree() as tree:
        await tree.start(["bash", "-c", command], cwd=workspace, env=dict(os.environ))
        chunks, procs = await _read_until_pids(tree, 3)
        await tree.terminate()
        assert tree.terminated
        with anyio.fail_after(10):
            async for chunk in tree.output():
                chunks.append(chunk.decode())
                if "escapee-term" in "".join(chunks):
                    break
            code = await tree.kill()
    assert code == -signal.SIGKILL
    assert alive(procs) == []


@pytest.mark.rule("S13")
def test_s13_a_host_that_dies_takes_its_trees_with_it(tmp_path: Path) -> None:
    """S13: when the host process is SIGKILLed, its supervisors kill their trees."""
    script = f"""
import anyio, os, sys
from pathlib import Path
from tether.host._contain import containment as probe_containment
from tether.host._proctree import ProcessTree, run_command

async def main():
    tree = ProcessTree()
    await tree.start(["bash", "-c", {_ESCAPEES!r}], cwd=Path({str(tmp_path)!r}),
                     env=dict(os.environ))
    async for chunk in tree.output():
        sys.stdout.write(chunk.decode())
        sys.stdout.flush()

anyio.run(main)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    assert env["TETHER_CONTAINMENT"] in ("namespace", "subreaper")
    host = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert host.stdout is not None
        seen = ""
        while len(tree_pids(seen)) < 3:
            line = host.stdout.readline()
            assert line, "the host ended before its tree was up"
            seen += line
        procs = tree_procs(seen)
        host.kill()
        host.wait(timeout=10)
        gone, alive = psutil.wait_procs(procs, timeout=10)
        assert alive == []
        assert len(gone) == 3
    finally:
        host.kill()
        host.wait(timeout=10)
        if host.stdout is not None:
            host.stdout.close()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_tree_cancelled_while_starting_is_fully_known_and_reclaimed(
    workspace: Path,
) -> None:
    """A cancellation that comes while a tree starts is delivered once the tree is
    fully known, so the caller's clean-up reclaims every process of it."""
    probe_containment()  # probed already: the start has no waiting point before it
    tree = ProcessTree()
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await tree.start(["sleep", "60"], cwd=workspace, env=dict(os.environ))
        finally:
            assert tree.pid is not None
            procs = [psutil.Process(pid) for pid in tree.alive_pids()]
            assert len(procs) >= 2  # the supervisor and the command
            await tree.aclose()
    assert scope.cancelled_caught
    assert alive(procs) == []


@pytest.mark.anyio
async def test_process_tree_start_failures_raise_oserror_with_the_reason(
    workspace: Path,
) -> None:
    """A command that cannot start raises OSError naming why; nothing is left running."""
    env = dict(os.environ)
    cases = [
        (["no-such-command-xyz"], workspace, "command not found"),
        ([str(workspace)], workspace, "Permission denied"),
        (["bash"], workspace / "missing", "not a directory"),
    ]
    for argv, cwd, reason in cases:
        tree = ProcessTree()
        with pytest.raises(OSError, match=reason):
            await tree.start(argv, cwd=cwd, env=env)
        await tree.aclose()
        assert tree.alive_pids() == []


def test_bounded_output_keeps_head_and_tail_and_counts_the_rest() -> None:
    """Bounded output keeps the first and last halves and says how many bytes it dropped."""
    kept = BoundedOutput(10)
    kept.add(b"abc")
    assert kept.text() == "abc"
    for chunk in (b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        kept.add(chunk)
    assert kept.total == 26
    assert kept.dropped == 16
    assert kept.text() == "abcde\n[... 16 bytes of output dropped ...]\nvwxyz"


@pytest.mark.rule("S13b")
def test_s13b_bounded_output_never_holds_more_than_its_limit() -> None:
    """S13b: one huge chunk, or many, never make the kept bytes exceed the limit."""
    kept = BoundedOutput(1000)
    kept.add(b"h" * 10)
    kept.add(b"x" * 5_000_000)
    assert kept.kept == 1000
    for _ in range(100):
        kept.add(b"y" * 70_000)
        assert kept.kept == 1000
    kept.add(b"tail")
    text = kept.text()
    assert text.startswith("h" * 10 + "x" * 490)
    assert text.endswith("y" * 496 + "tail")
    assert kept.dropped == kept.total - 1000


@pytest.mark.rule("S13b")
@pytest.mark.anyio
async def test_s13b_a_flood_streams_at_most_the_progress_limit(workspace: Path) -> None:
    """S13b: a command printing without end streams at most `progress_limit` bytes (then
    one marker), and its result keeps only head and tail."""
    streamed: list[str] = []
    command = "head -c 3000000 /dev/zero | tr '\\0' y; echo END"
    with anyio.fail_after(30):
        outcome = await run_command(
            ["bash", "-c", command],
            cwd=workspace,
            env=dict(os.environ),
            stop=anyio.Event(),
            on_output=streamed.append,
            limit=2000,
            progress_limit=100_000,
        )
    text = "".join(streamed)
    assert text.endswith("\n[... streaming paused after 100000 bytes ...]\n")
    assert len(text) < 100_100
    assert outcome.output.endswith("yyyEND\n")
    assert "[... 2998004 bytes of output dropped ...]" in outcome.output
    assert outcome.returncode == 0
