"""Every `TETHER_*` environment variable tether reads, in one place."""

from __future__ import annotations

import enum

__all__ = ("TetherEnv",)


class TetherEnv(enum.StrEnum):
    """Names of the environment variables tether reads."""

    HOME = "TETHER_HOME"
    """Root of the account's tether config and state (tests give each case its own)."""
    CONFIG = "TETHER_CONFIG"
    """Path of the config file, instead of `<config dir>/config.toml`."""
    HOST_ID = "TETHER_HOST_ID"
    """Set by the runtime on a stdio host it starts; every process the host starts
    inherits it, so they can all be found if the host dies."""
    AGENT = "TETHER_AGENT"
    """Set to `1` in every process an agent tool starts; the verbs refuse such callers."""
    CONTAINMENT = "TETHER_CONTAINMENT"
    """How process trees are contained: `auto` (default), `namespace` or `subreaper`."""
    GRACE = "TETHER_GRACE"
    """PROCESS grace window in seconds."""
    ABORT_BOUND = "TETHER_ABORT_BOUND"
    """Bound in seconds on `Session.abort()`."""
    MODEL_URL = "TETHER_MODEL_URL"
    """Base URL of an OpenAI-compatible endpoint."""
    MODEL_KEY = "TETHER_MODEL_KEY"
    """API key for that endpoint."""
    IMAGE_COMMAND = "TETHER_IMAGE_COMMAND"
    """Command template of the GenerateImages tool, with `{prompt}` and `{out}`."""
    STORE = "TETHER_STORE"
    """Store of runs, claims and ledger (spec 03): a SQLite path or a `postgresql://` URL."""
    STORE_URL = "TETHER_STORE_URL"
    """Store for claims and ledger: a SQLite path or a `postgresql://` URL."""
    WRITABLE = "TETHER_WRITABLE"
    """Folders (`os.pathsep`-separated, absolute) every stage agent of a run may write
    besides its lane, as a stage would declare them (S15); read by the run only."""
    LOG_BOUND = "TETHER_LOG_BOUND"
    """Bytes a lane log keeps on disk at most, head and tail (default 8 MiB)."""
    MACHINE_ID = "TETHER_MACHINE_ID"
    """This machine's id in a shared store (default: host name and /etc/machine-id)."""
    TEST_CRASH_AT = "TETHER_TEST_CRASH_AT"
    """Test-only: a run SIGKILLs itself at the named point (crash tests)."""
