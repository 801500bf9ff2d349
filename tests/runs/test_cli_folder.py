"""A preset's CLI folder (S16): the person's credentials in, as data; nothing back."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest

from tether.runs._cli_folder import make_cli_folder

pytestmark = pytest.mark.rule("S16")

if TYPE_CHECKING:
    from pathlib import Path


def test_the_copy_holds_only_the_credentials_and_the_account_fields(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"t":1}')
    (home / ".claude" / "settings.json").write_text('{"hooks":{}}')
    (home / ".claude.json").write_text(
        json.dumps({"oauthAccount": {"a": 1}, "mcpServers": {"x": {}}, "projects": {}})
    )
    folder, notes = make_cli_folder("claude", {"HOME": str(home)}, tmp_path / "l.agent")
    assert notes == []
    assert folder == tmp_path / "l.agent" / "claude"
    assert sorted(p.name for p in folder.iterdir()) == [
        ".claude.json",
        ".credentials.json",
    ]
    assert json.loads((folder / ".claude.json").read_text()) == {
        "oauthAccount": {"a": 1}
    }
    assert oct((folder / ".credentials.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("owner", [0, 1000], ids=["caller", "second-uid"])
def test_links_fifos_and_devices_are_not_read_and_links_in_the_copy_are_replaced(
    tmp_path: Path, owner: int
) -> None:
    """The person's folder may hold what an earlier stage planted (it was writable to
    stages before): a FIFO, a link to `/dev/zero`, a link to another file are not
    read (a note each, nothing blocks); a link the lane's own agent planted at a
    credential's name in the copy is replaced, its target unchanged."""
    if owner and os.geteuid() != 0:
        pytest.skip("needs root to chown files to a second uid")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    codex = tmp_path / "codex"
    codex.mkdir()
    os.mkfifo(codex / "auth.json")
    (codex / "config.toml").symlink_to("/dev/zero")
    agent = tmp_path / "l.agent"
    (agent / "codex").mkdir(parents=True)
    (agent / "codex" / "auth.json").symlink_to(victim)
    for path in [victim, codex, *codex.iterdir(), *(agent / "codex").iterdir()]:
        os.lchown(path, owner, owner)
    folder, notes = make_cli_folder("codex", {"CODEX_HOME": str(codex)}, agent)
    assert notes == [
        f"{codex / 'auth.json'} not copied: not a regular file (a FIFO)",
        f"{codex / 'config.toml'} not copied: not a regular file (a symlink)",
    ]
    assert victim.read_text() == "precious"
    # A stage's planted link is left in its own copy, never written through.
    assert (folder / "auth.json").is_symlink()
    (codex / "auth.json").unlink()
    (codex / "auth.json").write_text('{"k":1}')
    make_cli_folder("codex", {"CODEX_HOME": str(codex)}, agent)
    assert victim.read_text() == "precious"
    assert not (folder / "auth.json").is_symlink()
    assert (folder / "auth.json").read_text() == '{"k":1}'
