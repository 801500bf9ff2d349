"""The manifest of spec rules; every rule needs a test marked `@pytest.mark.rule(id)`.

`docs/rules.md` shows each line here under the rule's anchor: `python -m tests.spec.render`.
"""

from __future__ import annotations

RULES: dict[str, str] = {
    # spec 01: stopping a turn while tools run
    "S1": "every tool is stoppable",
    "S2": "the wait is a race; losing it abandons the wait and tells the host",
    "S3": "a late result of an abandoned call is discarded",
    "S4": "progress of an abandoned call stops at the stop",
    "S5": "abort() drives every in-flight call itself",
    "S6": "abort() returns within its bound and tells the truth",
    "S7": "aborts are typed; early arrivals are tombstones under the full key",
    "S8": "call ids are unique within a session",
    "S9": "TOOL_ABORTED means a stop; error codes are one enum",
    "S10": "nothing starts after a stop",
    "S11": "a stop during a model request cancels it",
    "S12": "stopping twice or a settled turn is harmless; the session stays usable",
    "S13": "process tools reclaim the whole tree",
    "S13b": "output is bounded; a tool's failure or an oversized message ends that call only",
    "S14": "read-only local tools are cancellable for real",
    "S15": "the wall: a tree writes only its workspace, its private tmp and declared "
    "paths, reaches no daemon of the session, never acts as root, gets no secrets",
    "S16": "what a tree wrote is data: never run, followed, blocked on or trusted by "
    "tether outside the wall; bounded on disk and on screen",
    # spec 02: the recorded stop
    "folder-rule": "the folder rule, checked on every read",
    "read-outcomes": "a read has exactly three outcomes: CLEAR, STOPPED, HOLD",
    "one-descriptor": "the stop is judged on one descriptor, no bytes read",
    "not-honoured": "stops of other accounts are ignored and reported",
    "verbs-caller": "the verbs refuse callers without a terminal or in an agent session",
    "atomic-stop": "the stop is written atomically and fails loudly",
    "bounded-read": "every reading is bounded in time and never follows a link",
    "system-binding": "a root-owned binding makes the agents' account honour the stop",
    "guard-table": "the guard refuses tool calls that would touch a stop",
    # spec 04: the agent loop and the chat
    "agent-results": "every tool call of a stopped turn goes back to the model with a result that says what happened",
    "chat-stop": "Esc or Ctrl-C stops a chat turn and shows what settles",
    # spec 03: unattended runs
    "plan-file": "plan errors name the line and the field",
    "claims": "a claim is taken atomically, leased and fenced by its epoch",
    "agent-stop": "a stop reaches inside a stage agent: no call starts after it, the call in flight is never cut",
    "halt-order": "the halt: calls finish, receipts, save aside, then release; a failed save holds",
    "save-aside": "uncommitted work, untracked included, saved aside touching nothing",
    "save-lossless": "a lane is saved aside losslessly: every path, mode, byte, nested repository, its index and rebase state come back",
    "save-never-replaces": "a save never replaces another; a restore copies a save",
    "no-crash-strands": "a run or take-over killed between any two durable writes leaves every item done once or recoverable",
    "lanes-prune": "nothing of a lane is deleted without a lossless copy; lanes prune lists first",
    "lanes-git": "a lane is a repository of its own: its agent reaches none of the person's refs, hooks, config or objects, and no person's hook runs for tether's git",
    "halted-stays": "a halted run stays halted after a lift; only a take-over steps on",
    "hold": "HOLD makes no move and lets nothing go",
    "restart-path": "a dead run is found; its worktrees saved first; a take-over loses nothing",
    "ctrl-c": "first Ctrl-C halts in order; the second kills every agent tree, saves, exits 130",
    "usage-window": "a usage limit is a wait for the reset, not a stop; nothing released",
    "digest": "a run writes the dated digest into the person's directory",
    "status-runs": "tether status lists this account's runs with their state",
    # spec 00 / 03: beyond one machine
    "several-machines": "one PostgreSQL store shared by hosts: another host's run is judged by its leases on the store's clock, never by a pid here",
    # spec 04: the ACP server
    "acp-cancel": "session/prompt answers cancelled only once settled, final statuses first",
    "acp-errors": "malformed or unknown ACP messages get JSON-RPC errors; serving goes on",
}
