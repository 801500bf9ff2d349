"""The other things the code cites, defined for `docs/rules.md`: the spec's chapters,
rows of the stop folder's checklist of bad inputs, and numbered points of the code style.

A citation in `src/` or `tests/` that names none of these (nor a rule of the manifest)
fails `test_rules_doc.py`; add its definition here and regenerate the page.
"""

from __future__ import annotations

CHAPTERS: dict[str, tuple[str, str]] = {
    "00": (
        "Overview",
        "What tether is for: a Stop that is honest and prompt, for a person watching a "
        "turn and for a person who leaves agents running unattended, often under a "
        "second account. It names the components (`tether.runtime`, `tether.host`, "
        "`tether.stop`, `tether.runs`, `tether.models`, `tether.acp`, `tether.cli`), "
        "the glossary (session, turn, call, stop class, run, lane, stage, move, claim, "
        "hold, halt, take-over), the defaults that work with no set-up (embedded "
        "SQLite, the stop in the account's own state directory, a scripted model) and "
        "how several machines share one PostgreSQL store.",
    ),
    "01": (
        "Stopping a turn while tools run",
        "A stop ends a turn at once wherever that cannot hide a side effect, and waits, "
        "saying why, wherever it could. Each tool declares a stop class (`READ_ONLY`, "
        "`PROCESS`, `MUTATING`, `EXTENSION`) and the class decides what a stop does: "
        "read-only work is abandoned and cancelled, a process tree is terminated within "
        "a grace window, a write or an extension call is waited for. Nothing starts "
        "after a stop, including a call still waiting for permission. Its rules are "
        "S1 to S15 below; it also fixes the public API and the built-in tools.",
    ),
    "02": (
        "The recorded stop",
        "A person who is not at the terminal sets a stop with their own command; every "
        "run reads it before each move, and a stop acts between moves, never inside a "
        "call. The chapter says where the stop lives (the account's own state, or a "
        "shared folder chosen at setup, with a root-owned system binding for a second "
        "account), the folder rule, how a stop is read on one descriptor with three "
        "outcomes, the person's verbs and the guard that keeps agents off the stop.",
    ),
    "03": (
        "Unattended runs",
        "`tether run PLAN` works through work items without a person: a lane per item, "
        "stages handed to agents, a receipt at the end. It fixes the plan file, the "
        "moves and how each reads the stop, the halt and its order, Ctrl-C and kills, "
        "claims with leases and epochs, the agents and their presets, the lossless "
        "save, the restart path, usage windows, the ledger and the digest, and the "
        "exit codes and JSON shapes of the run commands.",
    ),
    "04": (
        "Surfaces: agent loop, models, ACP, CLI",
        "The agent loop (ask the model, run its tool calls, hand the results back, "
        "looking for a stop between moves), the models (a scripted file of moves and "
        "any OpenAI-compatible endpoint), the Agent Client Protocol server on stdio, "
        "the `tether` command with its conventions, and the one configuration file per "
        "account.",
    ),
    "05": (
        "The quality bar",
        "Two set-up commands in the README, CI that runs the same test command, lint "
        "and types as part of it. Every spec rule has a test that fails if the rule "
        "breaks; time in tests is a parameter, not a sleep; races, adversarial process "
        "trees, other owners and crashes are tested on purpose. The benchmarks and "
        "their targets (abort time, settle time, trees reclaimed, stop reads, guard "
        "cost, claims per second, saves) are listed there and reported in "
        "`docs/benchmarks.md`.",
    ),
}
"""Chapter number: (title, what the chapter covers)."""

ROWS: dict[str, tuple[str, str]] = {
    "A16": (
        "An access control list grants another account write to the folder or a "
        "parent, with no write bit in the mode.",
        "On Linux an ACL shows in the group bits of the mode (its mask), so the folder "
        "rule's group-write check sees it and the reading holds.",
    ),
    "A17": (
        "`/` itself is writable by others without the sticky bit, or is not owned by "
        "root.",
        "`/` is judged like every other parent in the chain: the reading holds.",
    ),
    "C16": (
        "The stop is removed between the moment it is opened and the moment its "
        "descriptor is judged.",
        "It existed when it was opened, so that reading is `STOPPED`; the next reading "
        "sees it gone.",
    ),
    "C17": (
        "The person removes the stop: an ordinary lift.",
        "The next clear reading is `CLEAR`, and a stop seen before is reported as "
        "lifted by the person, with the time.",
    ),
    "C18": (
        "The stop appears and disappears again and again.",
        "Each reading is judged on its own, never from the memory of earlier ones, and "
        "every change is reported.",
    ),
    "D9": (
        "The reader's view is changed: it is moved into another mount namespace where "
        "something else is mounted over the folder, or runs inside the agents' "
        "sandbox.",
        "A run pins its mount namespace (and the identity of `/`'s mount where the "
        "kernel gives one) at its start; a reading from another namespace or root "
        "holds.",
    ),
    "D12": (
        "On the writer's side, the stop's name in the uid directory is already taken "
        "by something that is not the person's stop (a file of another owner, a FIFO, a "
        "link, a directory).",
        "`tether stop` replaces what it can remove, says so, and writes the stop "
        "atomically; a directory with entries is left alone and the stop fails loudly.",
    ),
}
"""Checklist row: (the bad input, what tether does about it)."""

STYLE: dict[int, tuple[str, str]] = {
    4: (
        "Layering goes one way, and a test enforces it.",
        "Base modules, then `stop`, `host`, `models`, `runtime`, `runs` and `acp`, "
        "`testing`, `cli`: a module imports only from its own layer or below, and "
        "`tests/test_layering.py` parses the imports to fail on an upward one.",
    ),
    17: (
        "Every abort records who asked and why.",
        "An abort carries its source (user, turn, deadline, shutdown, halt) and an "
        "optional reason; the report, the ledger and the printed form show them.",
    ),
    18: (
        "Asked for and taken effect are two different facts.",
        "A call is `ABORTING` until its host confirms and `ABORTED` after; a report "
        "says settled only when the ledger does, and each unfinished call says why it "
        "is still running.",
    ),
}
"""Style point number: (the point, what it asks of the code)."""
