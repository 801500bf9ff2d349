"""The `builtin` stage agent: the agent loop in the lane's worktree, walled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .support import git, make_repo, open_default_store, tether

COMMIT_ALL = (
    "git add -A && { git diff --cached --quiet || "
    "git -c user.email=a@b -c user.name=agent commit -qm 'review {item}'; }"
)


def _script(path: Path, moves: list[dict[str, object]]) -> None:
    lines = [json.dumps({"tether_script": 1}), *(json.dumps(m) for m in moves)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _plan(tmp_path: Path, repo: Path, script: str) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'repo = "{repo}"\npoll = 0.1\n\n'
        f'[[stage]]\nname = "implement"\nagent = "builtin"\nmodel = "scripted:{script}"\n\n'
        f"[[stage]]\nname = \"review\"\nagent = ['sh', '-c', '''{COMMIT_ALL}''']\n\n"
        '[[item]]\nid = "greet"\nbrief = "Write a greeting"\n',
        encoding="utf-8",
    )
    return plan


def test_a_builtin_stage_runs_the_agent_loop_in_the_lane_with_file_and_shell_tools(
    tmp_path: Path,
) -> None:
    """The scripted model writes a file and runs Bash in the lane's worktree (whose
    processes carry TETHER_AGENT=1); a tool outside the wall does not exist for it."""
    repo = make_repo(tmp_path)
    _script(
        tmp_path / "moves.jsonl",
        [
            {
                "text": "Writing.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "name": "Write",
                        "input": {"file_path": "hello.txt", "content": "hello\n"},
                    },
                    {
                        "id": "c2",
                        "name": "Bash",
                        "input": {"command": "echo $TETHER_AGENT > agent.txt"},
                    },
                    {
                        "id": "c3",
                        "name": "WebFetch",
                        "input": {"url": "http://127.0.0.1:9/"},
                    },
                ],
            },
            {"text": "Done."},
        ],
    )
    plan = _plan(tmp_path, repo, "moves.jsonl")  # relative: found beside the plan
    result = tether("run", str(plan))
    assert result.returncode == 0, result.stdout + result.stderr
    assert git(repo, "show", "tether/greet:hello.txt") == "hello"
    assert git(repo, "show", "tether/greet:agent.txt") == "1"
    store = open_default_store()
    (implement, _review) = store.receipts(result.stdout.split()[1])
    assert implement.exit_status == 0
    assert "[Write: succeeded]" in implement.log_tail
    assert "[WebFetch: " in implement.log_tail
    assert "[WebFetch: succeeded]" not in implement.log_tail


@pytest.mark.rule("plan-file")
def test_a_builtin_stage_whose_model_cannot_be_used_is_refused_at_the_start(
    tmp_path: Path,
) -> None:
    """A missing script is refused before anything is claimed, exit 2, one line."""
    repo = make_repo(tmp_path)
    plan = _plan(tmp_path, repo, "missing.jsonl")
    result = tether("run", str(plan))
    assert result.returncode == 2
    assert "stage 'implement': the model cannot be used" in result.stderr
    assert result.stdout == ""
