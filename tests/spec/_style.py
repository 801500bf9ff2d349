"""The numbered points of the code style, one line each, for `docs/rules.md`.

A comment that gives its reason by a style point cites it as `style 18` (or `style
point 18`); the numbers are the style guide's own.
"""

from __future__ import annotations

STYLE: dict[int, str] = {
    1: "One typed distribution in the src layout: `src/tether/` with `py.typed`.",
    2: "The public subpackages are the spec's components; what implements them is "
    "private (`_module`) inside them.",
    3: "A test pins the public surface: every public module's `__all__` and what each "
    "name is.",
    4: "Layering goes one way (base, `stop`, `host`, `models`, `runtime`, `runs` and "
    "`acp`, `testing`, `cli`), and `tests/test_layering.py` fails on an upward import.",
    5: "Modules stay small, about 100 to 400 lines; a longer one is split by job.",
    6: "A function is `async` only if it can wait, and its name says whether it "
    "blocks.",
    7: "Names say what a stop really does: abandon, terminate, wait for the result.",
    8: "Every `TETHER_*` environment variable is read in one place.",
    9: "Values are frozen attrs classes; live objects (a session, a turn) have "
    "identity.",
    10: "Classes are closed (`@final`) unless designed for extension.",
    11: "Domain objects are not wire objects: frames and messages are converted at the "
    "boundary.",
    12: "Closed sets are typed enums, and every branch over one is handled.",
    13: "Each state machine (tool call, turn, lane, run) is written down with its "
    "moves.",
    14: "`mypy --strict` holds on `src/`, with trio's extra flags.",
    15: "Structured concurrency only: every task belongs to a task group some object "
    "owns.",
    16: "A timeout is a scope around the awaited thing, not a flag passed down.",
    17: "Every abort records who asked and why: its source (user, turn, deadline, "
    "shutdown, halt) and an optional reason, shown by the report, the ledger and its "
    "printed form.",
    18: "Asked for and taken effect are different fields: a call is `ABORTING` until "
    "its host confirms and `ABORTED` after, and a report says settled only when the "
    "ledger does.",
    19: "A stop is an application outcome (`ToolAborted`), not a cancellation leaking "
    "out.",
    20: "Stops are level-triggered: the loop and the run look for the stop again at "
    "every step.",
    21: "Cancellation is never swallowed, and every shield is bounded.",
    22: "Waiters are removed on every path, and an abandoned wait still tells the other "
    "side.",
    23: "No tool call is left without a result in the history: a missing one is "
    "written for it.",
    24: "Long-lived services say when they are ready; nothing waits for them by "
    "guessing.",
    25: "Threads cooperate through a cancel flag or are abandoned on purpose, and "
    "bounded.",
    26: "One error tree, drawn in `tether.errors`' docstring, each error with its "
    "code.",
    27: "An error subclasses the stdlib's where the meaning matches.",
    28: "Exit codes live on the exception classes and are mapped to the process once.",
    29: "Docstrings are Google style in Markdown; the first line is one sentence of "
    "behaviour.",
    30: "A module docstring states the module's job and its boundary.",
    31: "Comments give invariants and reasons, never narration, and cite the rule they "
    "keep.",
    32: "`tests/` mirrors `src/tether/`, and each test is a sentence with a docstring.",
    33: "The spec's rules are a manifest with a coverage test (`tests/spec/`).",
    34: "No sleeping to wait: tests wait on events, every wait bounded.",
    35: "Pure logic runs on virtual time: clocks are parameters.",
    36: "Fakes over mocks, and each fake passes the contract suite of the real thing.",
    37: "Races are tested on purpose: hypothesis picks where an abort lands.",
    38: "Strict pytest (warnings are errors) and an honest coverage bar.",
    39: "The CLI is click, shaped like hatch's: a root group and one module per "
    "command.",
    40: "Recorded state is written atomically and durably.",
}
"""Style point number: what it asks of the code."""
