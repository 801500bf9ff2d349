"""The release habits: the version comes from git tags and the changelog describes it."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def _sections() -> list[str]:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return [line[3:].split(" ")[0] for line in text.splitlines() if line[:3] == "## "]


def test_the_changelog_describes_the_installed_version() -> None:
    """A tagged build has its own section; a build after a tag has Unreleased too,
    and the release it follows has one."""
    version = importlib.metadata.version("tether")
    found = _RELEASE.match(version)
    if found is None:  # `0.1.devN`: built from a copy whose history holds no tag
        tags = subprocess.run(
            ["git", "-C", str(ROOT), "tag", "--merged", "HEAD", "--list", "v*"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        assert not tags, f"version {version} ignores the tags {tags}"
        pytest.skip(f"no release tag in this copy's history ({version})")
    sections = _sections()
    if ".dev" in version:
        assert sections[0] == "Unreleased", sections
        major, minor, patch = map(int, found.groups())
        previous = f"{major}.{minor}.{max(patch - 1, 0)}"
        assert previous in sections, (version, sections)
    else:
        assert found.group(0) in sections, (version, sections)


def test_tether_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip().endswith(importlib.metadata.version("tether"))


def test_the_distribution_carries_its_license_and_metadata() -> None:
    meta = importlib.metadata.metadata("tether")
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("Classifier")
    assert meta["Author"] or meta["Author-email"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
