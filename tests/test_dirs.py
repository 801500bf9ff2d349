"""`tether._dirs`: the account's directories without platformdirs, and platformdirs' answer."""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

import platformdirs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import _dirs

pytestmark = pytest.mark.slow


_PARTS = st.sampled_from(["", ".", "..", "a", "b c", "~", "tether", "x.y"])
_TEXT = st.builds(
    lambda lead, parts, tail: lead + "/".join(parts) + tail,
    st.sampled_from(["", "/", "//", "///", "./", "~/"]),
    st.lists(_PARTS, max_size=5),
    st.sampled_from(["", "/", "//", "/."]),
)


@given(_TEXT)
def test_path_text_is_what_pathlib_prints(text: str) -> None:
    """The text of a path is `str(PurePosixPath(text))`, so `Path`s made of it are equal."""
    assert _dirs.path_text(text) == str(PurePosixPath(text))


_VALUES = st.one_of(
    st.none(),
    st.sampled_from(["", "relative/dir", "/abs", "/abs/", "//net/x", "/a/./b", "~/x"]),
)


@pytest.mark.skipif(sys.platform != "linux", reason="the computed path is Linux's")
@settings(max_examples=300, deadline=None)
@given(home=_VALUES, xdg_config=_VALUES, xdg_state=_VALUES)
def test_the_directories_are_platformdirs_own(
    home: str | None, xdg_config: str | None, xdg_state: str | None
) -> None:
    """Without `TETHER_HOME`, the config and state dirs are platformdirs' user paths for
    tether, whatever `HOME` and the XDG variables say (set, unset, empty, relative)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TETHER_HOME", raising=False)
        for name, value in (
            ("HOME", home),
            ("XDG_CONFIG_HOME", xdg_config),
            ("XDG_STATE_HOME", xdg_state),
        ):
            if value is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        for ours, theirs in (
            (_dirs.config_dir, platformdirs.user_config_path),
            (_dirs.state_dir, platformdirs.user_state_path),
        ):
            try:
                expected: object = theirs("tether")
            except RuntimeError as exc:  # no home at all: the same error
                expected = repr(exc)
            try:
                got: object = Path(ours())
            except RuntimeError as exc:
                got = repr(exc)
            assert got == expected
            if isinstance(got, Path):
                assert str(got) == ours()


@given(_TEXT.filter(bool))
def test_tether_home_roots_both(home: str) -> None:
    """`TETHER_HOME` roots both, as `Path(home) / "config"` and `/ "state"`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TETHER_HOME", home)
        assert _dirs.config_dir() == str(Path(home) / "config")
        assert _dirs.state_dir() == str(Path(home) / "state")
