"""The board's HTML: plain markup, every piece of text escaped, no script inline.

What an agent wrote reaches here already without control sequences (`_source`); here it
is HTML-escaped as well, so no byte of it is markup. The page's one script (`SCRIPT`,
served as `/board.js`) takes the server's fragments from its event stream and puts them
in place; the Content-Security-Policy lets no other script run.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._source import LaneCard, RunCard

__all__ = ("SCRIPT", "STYLE", "dom_id", "page", "run_section", "text_page")

STYLE = """\
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .3em}h2{font-size:1.05em;margin:0 0 .4em}
header p{margin:.2em 0;color:#555}
code,pre,.line,.id{font-family:ui-monospace,monospace}
section.run{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.6em .9em;
margin:.7em 0;content-visibility:auto;contain-intrinsic-size:auto 9em}
.state{display:inline-block;padding:0 .45em;border-radius:3px;background:#e4e4e4;
font-size:.9em}
.state-running,.state-in-call,.state-open{background:#d7f0d7}
.state-halting,.state-held,.state-saved{background:#ffe9b3}
.state-halted,.state-halt-held,.state-dead{background:#f6d0d0}
.state-done{background:#d6e4f5}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.15em .5em;
vertical-align:top;border-top:1px solid #eee}th{font-weight:600;color:#555}
td.line{white-space:pre-wrap;word-break:break-all;color:#333}
ol.timeline{margin:.4em 0 0;padding-left:1.4em}ol.timeline time{color:#555;
margin-right:.6em}
pre{background:#fff;border:1px solid #ddd;padding:.8em;overflow:auto;white-space:pre-wrap}
pre .add{color:#116611}pre .del{color:#a31515}pre .hunk{color:#555}
small{color:#666}
"""

SCRIPT = """\
"use strict";
// Live lines: the server sends each run's section when it changes (already escaped).
const page = document.getElementById("runs").dataset.page;
const feed = new EventSource("/events?page=" + encodeURIComponent(page));
feed.addEventListener("run", (event) => {
  const part = JSON.parse(event.data);
  const old = document.getElementById(part.id);
  if (old) {
    old.outerHTML = part.html;
  } else {
    document.getElementById("runs").insertAdjacentHTML("afterbegin", part.html);
  }
  const live = document.getElementById("live");
  if (live) live.textContent = "live";
});
feed.onopen = () => {
  const live = document.getElementById("live");
  if (live) live.textContent = "live";
};
feed.onerror = () => {
  const live = document.getElementById("live");
  if (live) live.textContent = "reconnecting";
};
"""

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def dom_id(*parts: str) -> str:
    """An element id made of `parts` (anything outside `[A-Za-z0-9_-]` replaced)."""
    return "-".join(_ID_UNSAFE.sub("_", p) for p in parts)


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _lane_row(run: RunCard, lane: LaneCard) -> str:
    work = "-"
    label = lane.work or (f"{lane.commits} commit(s)" if lane.commits else None)
    if label is not None:
        href = "/diff/" + "/".join(
            quote(p, safe="") for p in (run.account, run.id, lane.id)
        )
        work = f'<a href="{escape(href)}">{escape(label)}</a>'
    return (
        f'<tr id="{dom_id("lane", run.account, run.id, lane.id)}">'
        f"<td>{escape(lane.item)}</td>"
        f'<td><span class="state state-{escape(lane.state)}">{escape(lane.state)}</span></td>'
        f"<td>{escape(lane.stage or '-')}</td>"
        f'<td class="line">{escape(lane.line or "")}</td>'
        f"<td>{work}</td></tr>"
    )


def run_section(run: RunCard) -> str:
    """A run's section: its state, lanes with their live lines, the stop's timeline."""
    parts = [
        f'<section class="run" id="{dom_id("run", run.account, run.id)}" '
        f'data-state="{escape(run.state)}">',
        f'<h2><span class="state state-{escape(run.state)}">{escape(run.state)}</span> '
        f'<span class="id">{escape(run.id)}</span> '
        f"<small>{escape(run.account)} · started {_clock(run.started_at)}</small></h2>",
    ]
    if run.note:
        parts.append(f'<p class="note">{escape(run.note)}</p>')
    if run.lanes:
        parts.append(
            "<table><tr><th>item</th><th>state</th><th>stage</th><th>live line</th>"
            "<th>work</th></tr>"
        )
        parts.extend(_lane_row(run, lane) for lane in run.lanes)
        parts.append("</table>")
    if run.timeline:
        parts.append('<ol class="timeline">')
        for step in run.timeline:
            who = f" {escape(step.lane)}" if step.lane else ""
            detail = f" <small>{escape(step.detail)}</small>" if step.detail else ""
            parts.append(
                f'<li data-what="{escape(step.what)}"><time>{step.clock}</time>'
                f"{escape(step.what)}{who}{detail}</li>"
            )
        parts.append("</ol>")
    parts.append("</section>")
    return "".join(parts)


def page(title: str, body: str, *, live: bool = False) -> str:
    """A whole page: `body` (markup already escaped) under the board's header."""
    script = '<script src="/board.js"></script>' if live else ""
    status = ' <small id="live">connecting</small>' if live else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)}</title>"
        '<meta name="referrer" content="no-referrer">'
        '<link rel="stylesheet" href="/board.css"></head><body>'
        f"<header><h1>tether board{status}</h1>"
        "<p>Read-only. Stop, lift and take over in a terminal: "
        "<code>tether stop</code>, <code>tether lift</code>, "
        "<code>tether takeover RUN</code>.</p>"
        '<p><a href="/">runs</a> · <a href="/digest">today\'s digest</a></p></header>'
        f"{body}{script}</body></html>"
    )


def runs_page(runs: Sequence[RunCard], older: Sequence[RunCard], *, shown: str) -> str:
    """The board's front page: the runs in full, then older ones in a line each.

    `shown` names what it shows, for its event stream to go on from.
    """
    body = [f'<main id="runs" data-page="{escape(shown)}">']
    body.extend(run_section(run) for run in runs)
    body.append("</main>")
    if not runs:
        body.append("<p>No runs yet.</p>")
    if older:
        body.append("<h2>Older runs</h2><ul>")
        body.extend(
            f"<li><span class=id>{escape(r.id)}</span> {escape(r.state)} "
            f"<small>{escape(r.account)}</small></li>"
            for r in older
        )
        body.append("</ul>")
    return page("tether board", "".join(body), live=True)


def text_page(title: str, text: str | None, *, diff: bool = False) -> str:
    """A page of one text (a diff, the digest), escaped; `diff` colours its lines."""
    if text is None:
        return page(title, f"<h2>{escape(title)}</h2><p>Nothing to show.</p>")
    lines = []
    for line in text.splitlines():
        shown = escape(line)
        if diff and line.startswith("+") and not line.startswith("+++"):
            shown = f'<span class="add">{shown}</span>'
        elif diff and line.startswith("-") and not line.startswith("---"):
            shown = f'<span class="del">{shown}</span>'
        elif diff and line.startswith("@@"):
            shown = f'<span class="hunk">{shown}</span>'
        lines.append(shown)
    return page(title, f"<h2>{escape(title)}</h2><pre>" + "\n".join(lines) + "</pre>")
