"""What each rule of the manifest requires, in a paragraph: the body of `docs/rules.md`.

The one-line statements stay in `_rules.py` (the manifest); this module adds the chapter
each rule belongs to and the longer reading. `render.py` joins the two.
"""

from __future__ import annotations

REQUIRES: dict[str, tuple[str, str]] = {
    # rule id: (chapter, what it requires)
    "S1": (
        "01",
        "No tool name is exempt from a stop. Whatever a tool's stop class, a stop while "
        "its call waits (for permission, for admission, to be sent) or runs brings the "
        "call to the final state its class promises.",
    ),
    "S2": (
        "01",
        "Waiting on a tool is a race between the host's answer and the stop. When the "
        "stop wins, the runtime stops waiting, and the host is told with a typed abort "
        "so it can cancel the work; the host's work is never dropped silently.",
    ),
    "S3": (
        "01",
        "When an abandoned call answers after all, the answer is thrown away: the "
        "caller gets no second result, the ledger does not change after the turn "
        "settled, and no progress event is delivered for it.",
    ),
    "S4": (
        "01",
        "The progress output of an abandoned call ends at the moment of the stop; "
        "whatever the tool prints later reaches no subscriber.",
    ),
    "S5": (
        "01",
        "`Session.abort()` walks the registry of the turn's active calls and runs each "
        "call's stop handler itself. It does not rely on a token or signal the tool was "
        "given: a tool that ignores its token is released all the same.",
    ),
    "S6": (
        "01",
        "`Session.abort()` returns within its abort bound (1 s by default) whatever the "
        "tools do. Its report says whether the turn settled and, for each call still "
        "running, why, starting with the call's stop class in lower case. When the turn "
        "settles later a `turn.settled` event follows and the ledger holds the final "
        "state; report and ledger always agree.",
    ),
    "S7": (
        "01",
        "An abort names the session, the call id and the tool. An abort that reaches "
        "the host before its call is kept for a short while (60 s by default) as a "
        "tombstone under that whole key, so a later call with the same id in another "
        "session or for another tool is untouched.",
    ),
    "S8": (
        "01",
        "Within a session every call id is used once: new turns and retries draw fresh "
        "ids, and the runtime refuses (`DUPLICATE_CALL_ID`) to run a call whose id was "
        "used before, running nothing.",
    ),
    "S9": (
        "01",
        "`TOOL_ABORTED` says one thing: a stop cancelled the call before it finished. "
        "All error codes are members of one documented enum, and a call stopped while "
        "its permission prompt was open ends `TOOL_ABORTED`, not as a refusal.",
    ),
    "S10": (
        "01",
        "Between every two moves (a model request, each tool call) the agent loop looks "
        "for a stop again, and after a stop it starts nothing: at the turn, `turn.call` "
        "then ends `TOOL_ABORTED` at once without reaching the host.",
    ),
    "S11": (
        "01",
        "A model request is read-only work: a stop while it streams cancels the "
        "request rather than waiting for the answer.",
    ),
    "S12": (
        "01",
        "A second stop, or a stop of a turn that already settled, changes nothing and "
        "returns the same kind of report. A stop ends the current turn only; the "
        "session remains usable and its next turn starts clean with fresh call ids.",
    ),
    "S13": (
        "01",
        "A process-backed tool takes back its whole tree: children in their own "
        "session, double-forked daemons and processes that ignore SIGTERM are all gone "
        "when the call ends. A stop sends SIGTERM at once and SIGKILL to every "
        "descendant when the grace window closes; a turn counts as settled only once "
        "every process of it was reaped. Trees run in their own PID namespace where the "
        "kernel allows, with a documented fallback where it does not.",
    ),
    "S13b": (
        "01",
        "Output is bounded from its first byte on every side of the host boundary "
        "(head and tail kept). A message too big for the wire fails its own call only, "
        "and so does any failure of a tool, whatever it raises: the host and the other "
        "calls carry on.",
    ),
    "S14": (
        "01",
        "Read-only local tools are cancelled for real, not only abandoned: Grep's "
        "ripgrep child is killed on a stop, and Glob and Read check a cancel flag often "
        "enough that their worker ends within 100 ms.",
    ),
    "S15": (
        "01",
        "Every process tree tether starts runs inside one wall. It may write its "
        "workspace, a private temporary directory and the paths its tool or stage "
        "declares; tether's config and state, the stop folders and the person's "
        "repository stay read-only. It reaches no daemon of the session through sockets "
        "or variables, never acts as the machine's root, and gets none of tether's "
        "secrets unless a stage names them. tether's file tools resolve paths through "
        "descriptors beneath the workspace, and the docs say per containment kind what "
        "holds.",
    ),
    "S16": (
        "01",
        "Everything a walled tree can write is untrusted input to tether, which works "
        "outside the wall as the person: no git setting, attribute, hook, filter or "
        "pointer a tree wrote acts in a git command tether runs; tether never follows a "
        "link a tree planted nor blocks on a file it made (reads by descriptor, "
        "no-follow, non-blocking, type-checked, bounded); nothing a tree wrote becomes "
        "code the person runs later; a stop, halt, save and take-over finish within "
        "their bounds whatever a tree left; what a tree prints is bounded on disk and its "
        "terminal escapes never reach the person's terminal.",
    ),
    "folder-rule": (
        "02",
        "On every read the shared folder and every parent up to `/` are real "
        "directories owned by root or the person, sticky wherever others may write; "
        "the person's uid directory is theirs and writable by no one else; the file "
        "system must be one whose owners can be trusted; and the identities pinned at "
        "the run's start must not have changed. Any failure holds.",
    ),
    "read-outcomes": (
        "02",
        "A reading is `CLEAR` (the rule held and no stop is there), `STOPPED` (a stop "
        "that passes every check) or `HOLD` (anything that prevents a clear look). "
        "Only `CLEAR` counts as no stop.",
    ),
    "one-descriptor": (
        "02",
        "The stop is opened once, without following links and without blocking, "
        "relative to the checked uid directory, and judged by `fstat` alone: a small "
        "regular file owned by the person. None of its bytes is read.",
    ),
    "not-honoured": (
        "02",
        "A stop left by another account, anywhere in the folder, does not stop the "
        "person's runs and does not hold them either: it is ignored and named in "
        "`tether status`, the setup board and each run's step answer.",
    ),
    "verbs-caller": (
        "02",
        "Setting, lifting and choosing the folder are a person's acts: the verbs refuse "
        "(exit 2, a clear message) a caller without a terminal and a caller inside an "
        "agent host session.",
    ),
    "atomic-stop": (
        "02",
        "`tether stop` writes the stop through a fresh temporary file, fsync, rename "
        "and a directory fsync, and fails loudly on a full disk or read-only file "
        "system instead of claiming success.",
    ),
    "bounded-read": (
        "02",
        "A reading that does not finish in time is a `HOLD` naming what hung, and no "
        "reading follows a link placed in the shared folder.",
    ),
    "system-binding": (
        "02",
        "A root-owned record at a fixed path, written by `tether setup --system`, makes "
        "a second account honour the person's stop; that account's own settings may add "
        "stops but never remove one, and a binding that cannot be checked holds.",
    ),
    "guard-table": (
        "02",
        "Before permission is asked, the guard refuses (`GUARD_REFUSED`) a write into a "
        "stop directory or the setup record and a shell command that runs the stop verbs "
        "or changes a path in a stop directory; its parser is tested on a table of "
        "commands and refuses when in doubt.",
    ),
    "plan-file": (
        "03",
        "A plan that cannot be used is refused before any run starts, and the error "
        "names the line and the field at fault.",
    ),
    "claims": (
        "03",
        "A run takes a work item atomically under a lease it renews; each take raises "
        "the claim's epoch, and a lane whose epoch is stale is refused when it records, "
        "renews, releases or finishes.",
    ),
    "agent-stop": (
        "03",
        "Inside a stage agent a stop takes hold at the next tool call: while it stands "
        "no new call starts, and the call already running finishes; an agent idle "
        "between calls past `stop_wait` is ended.",
    ),
    "halt-order": (
        "03",
        "A halt runs in order: nothing new starts, calls in flight finish and their "
        "receipts are recorded, each idle lane is saved aside, and only then are its "
        "claims released. A save that fails holds that lane and its claims.",
    ),
    "save-aside": (
        "03",
        "A lane's uncommitted work, untracked files included, is saved aside without "
        "touching the lane's index, files or branch, or the person's checkout.",
    ),
    "save-lossless": (
        "03",
        "The save keeps everything a lane's directory holds and a restore brings it "
        "back exactly: every path and mode, the bytes as on disk, nested repositories, "
        "the index and an in-progress rebase, merge or cherry-pick.",
    ),
    "save-never-replaces": (
        "03",
        "Each save of a lane is kept beside the earlier ones; a restore copies the "
        "newest complete save and leaves it in place.",
    ),
    "no-crash-strands": (
        "03",
        "Wherever a run or a take-over is killed between two durable writes, the "
        "restart path finds a state it recovers: each item done once or recoverable, "
        "no work lost, no claim held by a dead process.",
    ),
    "lanes-prune": (
        "03",
        "tether deletes nothing of a lane without a lossless copy; `tether lanes prune` "
        "lists what it would delete before it deletes.",
    ),
    "lanes-git": (
        "03",
        "A lane has a git directory of its own, borrowing the person's objects "
        "read-only, so its agent cannot reach the person's refs, hooks, config or "
        "objects, and none of the person's hooks runs for tether's own git work.",
    ),
    "halted-stays": (
        "03",
        "A lift does not wake a halted run; only a take-over, made while no stop "
        "stands, steps on with its work.",
    ),
    "hold": (
        "03",
        "While the stop cannot be read clearly a run makes no move and lets nothing "
        "go (lanes, claims and worktrees stay), records why, and reads again.",
    ),
    "restart-path": (
        "03",
        "A run whose process is gone or whose leases expired is found; a take-over "
        "saves its worktrees aside first and then goes on without losing anything.",
    ),
    "ctrl-c": (
        "03",
        "The first Ctrl-C halts the run in the usual order; a second one kills every "
        "agent tree, saves the worktrees aside within a bound and exits 130.",
    ),
    "usage-window": (
        "03",
        "A model account near its usage limit makes the run wait for the window's "
        "reset; that is a wait, not a stop, so nothing is saved aside or released.",
    ),
    "digest": (
        "03",
        "A run writes the dated digest of items done, receipts, halts, holds and lifts "
        "into the person's directory of the stop folder, or the account's own state.",
    ),
    "status-runs": (
        "03",
        "`tether status` lists the runs of the calling account with their state.",
    ),
    "several-machines": (
        "00",
        "Several hosts share one PostgreSQL store for claims and the run ledger; a run "
        "of another host is judged by its leases against the store's clock, never by a "
        "process id looked up here.",
    ),
    "agent-results": (
        "04",
        "Every tool call of a stopped turn is answered to the model with a result that "
        "carries its code, so the next turn knows what happened; no call is left "
        "without a result in the history.",
    ),
    "chat-stop": (
        "04",
        "In `tether chat`, Esc or Ctrl-C stops the current turn and the screen shows "
        "what is still settling.",
    ),
    "acp-cancel": (
        "04",
        "After `session/cancel`, `session/prompt` answers `cancelled` only once the "
        "turn has settled, and every tool call's final status is sent before that "
        "answer.",
    ),
    "acp-errors": (
        "04",
        "A malformed or unknown ACP message gets a JSON-RPC error and the server keeps "
        "serving.",
    ),
}
