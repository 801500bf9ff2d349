"""The plan file: a valid plan reads into values; every error names line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tether.runs import PlanError, load_plan

GOOD = """\
repo = "."
lanes = 2

[[stage]]
name = "implement"
agent = ["sh", "-c", "echo {brief}"]

[[stage]]
name = "review"
agent = ["true"]
timeout = 30

[[item]]
id = "fix-typo"
brief = "Fix the typo"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_a_valid_plan_reads_into_stages_and_items(tmp_path: Path) -> None:
    """Stages keep their order and command lines; the repo resolves beside the plan."""
    plan = load_plan(_write(tmp_path, GOOD))
    assert plan.repo == tmp_path.resolve()
    assert plan.lanes == 2
    assert [s.name for s in plan.stages] == ["implement", "review"]
    assert plan.stages[0].agent == ("sh", "-c", "echo {brief}")
    assert plan.stages[1].timeout == 30.0
    assert [(i.id, i.brief) for i in plan.items] == [("fix-typo", "Fix the typo")]
    assert (plan.poll, plan.heartbeat, plan.lease) == (2.0, 10.0, 60.0)


@pytest.mark.rule("plan-file")
@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("lanes = 2", "lanes = 0", ":2: lanes: must be a whole number above 0"),
        ('agent = ["true"]', "agent = 5", ":10: stage[1].agent: must be"),
        ('name = "review"', 'name = "implement"', ":9: stage[1].name:"),
        ('id = "fix-typo"', 'id = "a b"', ":14: item[0].id:"),
        ('brief = "Fix the typo"', "brief = 1", ":15: item[0].brief:"),
        ("timeout = 30", "timeout = -1", ":11: stage[1].timeout:"),
        ("timeout = 30", "colour = 1", ":11: stage[1].colour: unknown field"),
        (
            "timeout = 30",
            "timout = 30",
            ":11: stage[1].timout: unknown field; did you mean timeout?",
        ),
        ("lanes = 2", "lane = 2", ":2: lane: unknown field; did you mean lanes?"),
        (
            'agent = ["true"]',
            'agent = ["x", "{who}"]',
            ":10: stage[1].agent: unknown placeholder {who}",
        ),
        (
            'agent = ["true"]',
            'agent = "builtin"',
            ":8: stage[1].model: a builtin stage needs a model",
        ),
        ("lanes = 2", 'lanes = "2', ":2: not valid TOML"),
    ],
)
def test_plan_errors_name_the_line_and_the_field(
    tmp_path: Path, old: str, new: str, where: str
) -> None:
    """Each bad field is reported as `<file>:<line>: <field>: what to do`."""
    path = _write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    assert str(caught.value).startswith(str(path))
    assert where in str(caught.value)


@pytest.mark.rule("plan-file")
def test_a_plan_without_stages_or_file_is_refused_with_what_to_do(
    tmp_path: Path,
) -> None:
    """No stage, or no file: one line saying what is missing."""
    with pytest.raises(PlanError, match="at least one"):
        load_plan(_write(tmp_path, 'repo = "."\n'))
    with pytest.raises(PlanError, match="cannot read the plan"):
        load_plan(tmp_path / "missing.toml")


def test_a_stage_declares_folders_its_agent_may_write_and_variables_it_needs(
    tmp_path: Path,
) -> None:
    """`writable` (relative to the plan's folder, `~` expanded) and `env` on a command
    stage; refused on a builtin stage, whose tools write only the lane."""
    from tether.runs import PlanError, load_plan

    plan = tmp_path / "plan.toml"
    plan.write_text(
        'repo = "."\n[[stage]]\nname = "a"\nagent = ["true"]\n'
        'writable = ["cache", "/opt/shared"]\nenv = ["OPENAI_API_KEY"]\n',
        encoding="utf-8",
    )
    (stage,) = load_plan(plan).stages
    assert stage.writable == (tmp_path / "cache", Path("/opt/shared"))
    assert stage.env == ("OPENAI_API_KEY",)
    plan.write_text(
        'repo = "."\n[[stage]]\nname = "a"\nagent = "builtin"\n'
        'model = "scripted:m.jsonl"\nwritable = ["x"]\n',
        encoding="utf-8",
    )
    with pytest.raises(PlanError, match=r"stage\[0\]\.writable: a builtin stage"):
        load_plan(plan)
    plan.write_text(
        'repo = "."\n[[stage]]\nname = "a"\nagent = ["true"]\nenv = ["NOT OK"]\n',
        encoding="utf-8",
    )
    with pytest.raises(PlanError, match="is not a variable name"):
        load_plan(plan)
