"""Runtime test support: the test tools, each allowed."""

from __future__ import annotations

from tether.testing import (
    Echo,
    Fail,
    Hang,
    Obedient,
    SlowExtension,
    SlowWrite,
    Stubborn,
    Stuck,
)

TEST_TOOLS = [Echo, Fail, Hang, Obedient, SlowExtension, SlowWrite, Stubborn, Stuck]
ALLOW_ALL = {"allow": [t.name for t in TEST_TOOLS]}
