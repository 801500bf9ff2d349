"""The spec's chapters, 00 to 05, for `docs/rules.md`: what each one covers.

A citation of a chapter (`spec 02`) resolves to its section of the page; the rules of
each chapter follow it there (`_requires.py` says which chapter a rule is of).
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
