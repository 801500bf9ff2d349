"""The attacks of the wall's tests (S15) as one shell script, run by a stage's agent.

Each attempt prints `changed-NAME` or `refused-NAME` into a results file; every one
must be refused. The script takes what it attacks from its arguments and environment,
as an agent would find it: the person's repository, tether's home, the lane's own
`.git` (its alternates name the person's objects), the other lanes beside it.
"""

from __future__ import annotations

import hashlib
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

ATTACKS: dict[str, str] = {
    # 1. The run's own truth: the store, the plan, the lane logs.
    "store-write": 'printf x >> "$HOME_T/state/runs.sqlite3"',
    "store-rows": (
        'python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); '
        'c.execute(\'delete from events\'); c.commit()" "$HOME_T/state/runs.sqlite3"'
    ),
    "store-remove": 'rm "$HOME_T/state/runs.sqlite3"',
    "plan-edit": 'printf x >> "$PLAN"',
    "lane-log": 'for f in ../*.log; do printf x >> "$f" || exit 1; done; ls ../*.log',
    # 2. The person's repository and the other lanes.
    "repo-checkout": 'printf x >> "$REPO/README.md"',
    "repo-branch": 'git -C "$REPO" branch -D tether/keep',
    "repo-ref": 'git -C "$REPO" update-ref refs/heads/planted HEAD',
    "repo-hook": 'printf "#!/bin/sh\\ntouch /tmp/owned\\n" > "$REPO/.git/hooks/post-checkout"',
    "repo-config": 'git -C "$REPO" config core.fsmonitor "touch /tmp/owned"',
    "repo-objects": 'touch "$(cat .git/objects/info/alternates)/planted"',
    "repo-gc": 'git -C "$REPO" gc --prune=now -q',
    "other-lane": (
        'for d in ../*/; do [ "$d" = "../$(basename "$PWD")/" ] && continue; '
        'touch "$d/planted" || exit 1; done; ls -d ../*/ | grep -v "$(basename "$PWD")"'
    ),
    # 3. The stop, around the wall.
    "stop-setup": (
        'mkdir -p "$HOME_T/config" && echo "{}" > "$HOME_T/config/stop-setup.json"'
    ),
    "config-toml": 'mkdir -p "$HOME_T/config" && echo "x=1" >> "$HOME_T/config/config.toml"',
    "stop-folder": 'touch "$HOME_T/state/stop/planted"',
    # 5. Out of the wall.
    "core-pattern": "echo '|/bin/true' > /proc/sys/kernel/core_pattern",
    "etc-passwd": "printf x >> /etc/passwd",
    "cron": "touch /etc/cron.d/tether-owned",
    "tmux-variable": 'test -n "$TMUX"',
    # 6. Secrets.
    "model-key": 'test -n "$OPENAI_API_KEY$TETHER_MODEL_KEY"',
    "store-url": 'test -n "$TETHER_STORE_URL$TETHER_STORE"',
}
"""Attempt name -> a shell command that succeeds only if the attack worked."""


def secrets(store: Path) -> dict[str, str]:
    """For the run's environment: none may reach its agents' trees. `TETHER_STORE`
    names the run's own SQLite store, which goes before the URL's server."""
    return {
        "OPENAI_API_KEY": "sk-secret",
        "TETHER_MODEL_KEY": "tk-secret",
        "TETHER_STORE": str(store),
        "TETHER_STORE_URL": "postgresql://u:secret@127.0.0.1:9/none",
        "TMUX": "/tmp/tmux-0/default,1,0",
    }


def attack_script(
    path: Path, results: str, *, repo: Path, home: Path, plan: Path
) -> Path:
    """Write the script to `path`; it appends its outcomes to `results` (a shell
    word, expanded where it runs: the lane is its working directory)."""
    lines = ["#!/bin/sh", f"REPO='{repo}'", f"HOME_T='{home}'", f"PLAN='{plan}'"]
    for name, cmd in ATTACKS.items():
        lines.append(
            f"if ( {cmd} ) >/dev/null 2>&1; then echo changed-{name}; "
            f"else echo refused-{name}; fi >> {results}"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def outcomes(text: str) -> dict[str, str]:
    """Attempt name -> `changed` or `refused`, from a results file."""
    found: dict[str, str] = {}
    for word in text.split():
        said, _, name = word.partition("-")
        if said in ("changed", "refused"):
            found[name] = said
    return found


def repo_state(repo: Path) -> str:
    """The person's repository as an attack would change it: refs (but the branches
    and saved refs tether makes), config, hooks, the checkout. (Objects are not in it:
    bringing a lane's branch back adds some.)"""
    refs = subprocess.run(
        [
            "git",
            "-c",
            "safe.directory=*",
            "for-each-ref",
            "--format=%(refname) %(objectname)",
        ],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    h = hashlib.sha256()
    for line in refs:
        if (
            not line.startswith(("refs/heads/tether/", "refs/tether/"))
            or "keep" in line
        ):
            h.update(line.encode())
    git = repo / ".git"
    for path in sorted([git / "config", *git.glob("hooks/*"), repo / "README.md"]):
        h.update(path.name.encode() + path.read_bytes())
    h.update(str(sorted(p.name for p in (git / "objects").glob("planted*"))).encode())
    return h.hexdigest()
