"""Every `TETHER_*` environment variable name, in one place.

`tests/test_env_names.py` holds it: no other module of `src/tether` spells a `TETHER_`
name as a string; they name `TetherEnv.<NAME>`. A plain class of strings (as hatch's
`config/constants.py`), not an enum: the agent hook (`tether guard --claude-hook`, run
before every tool call of an agent) reads names from here, and making an enum class
costs that path about a millisecond, a sizeable share of its whole start.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (the hook's path)
if TYPE_CHECKING:
    from typing import Final

__all__ = ("PREFIX", "SET_FOR_CHILDREN", "TetherEnv", "names")

PREFIX: Final = "TETHER_"
"""What every name starts with (a child's environment keeps tether's own)."""

_for_children: set[str] = set()


def _set_for_children(name: str) -> str:
    """Return `name`, noted as one tether sets for what it starts (`SET_FOR_CHILDREN`)."""
    _for_children.add(name)
    return name


class TetherEnv:
    """Names of the environment variables tether reads or sets for what it starts.

    `tests/test_env_names.py` checks that every value starts with `PREFIX`.
    """

    HOME: Final = "TETHER_HOME"
    """Root of the account's tether config and state (tests give each case its own)."""
    CONFIG: Final = "TETHER_CONFIG"
    """Path of the config file, instead of `<config dir>/config.toml`."""
    HOST_ID: Final = "TETHER_HOST_ID"
    """Set by the runtime on a stdio host it starts; every process the host starts
    inherits it, so they can all be found if the host dies."""
    AGENT: Final = "TETHER_AGENT"
    """Set to `1` in every process an agent tool starts; the verbs refuse such callers."""
    CONTAINMENT: Final = "TETHER_CONTAINMENT"
    """How process trees are contained: `auto` (default), `namespace` or `subreaper`."""
    GRACE: Final = "TETHER_GRACE"
    """PROCESS grace window in seconds."""
    ABORT_BOUND: Final = "TETHER_ABORT_BOUND"
    """Bound in seconds on `Session.abort()`."""
    MODEL_URL: Final = "TETHER_MODEL_URL"
    """Base URL of an OpenAI-compatible endpoint."""
    MODEL_KEY: Final = "TETHER_MODEL_KEY"
    """API key for that endpoint."""
    IMAGE_COMMAND: Final = "TETHER_IMAGE_COMMAND"
    """Command template of the GenerateImages tool, with `{prompt}` and `{out}`."""
    STORE: Final = "TETHER_STORE"
    """Store of runs, claims and ledger (spec 03): a SQLite path or a `postgresql://` URL."""
    STORE_URL: Final = "TETHER_STORE_URL"
    """Deprecated (documented in 0.1.0): the config's `store_url`; still honoured below
    the plan's `store`, with a line saying to set `STORE` instead."""
    WRITABLE: Final = "TETHER_WRITABLE"
    """Folders (`os.pathsep`-separated, absolute) every stage agent of a run may write
    besides its lane, as a stage would declare them (S15); read by the run only."""
    LOG_BOUND: Final = "TETHER_LOG_BOUND"
    """Bytes a lane log keeps on disk at most, head and tail (default 8 MiB)."""
    MACHINE_ID: Final = "TETHER_MACHINE_ID"
    """This machine's id in a shared store (default: host name and /etc/machine-id)."""
    TEST_CRASH_AT: Final = "TETHER_TEST_CRASH_AT"
    """Test-only: a run SIGKILLs itself at the named point (crash tests)."""

    # Set by tether in the processes it starts, never a setting: each is noted in
    # `SET_FOR_CHILDREN` where it is named.
    RUN: Final = _set_for_children("TETHER_RUN")
    """The run a stage agent works for; its hook then honours the run's stop."""
    LANE: Final = _set_for_children("TETHER_LANE")
    """The lane a stage agent works in (named in the hook's refusal)."""
    ITEM: Final = _set_for_children("TETHER_ITEM")
    """The work item a stage agent works on."""
    CALLS: Final = _set_for_children("TETHER_CALLS")
    """The call record a preset stage's hook appends to (`tether._channel`)."""
    TREE: Final = _set_for_children("TETHER_TREE")
    """The marker every process of one tree inherits, so the host can sweep what is left."""
    PROMPT: Final = _set_for_children("TETHER_PROMPT")
    """The prompt of a GenerateImages call, for its command (never in the command line)."""


SET_FOR_CHILDREN: Final = frozenset(_for_children)
"""Names tether sets for what it starts that are no setting of the account."""


def names() -> tuple[str, ...]:
    """Every name `TetherEnv` lists, in the order it lists them."""
    return tuple(
        value
        for key, value in vars(TetherEnv).items()
        if key.isupper() and isinstance(value, str)
    )
