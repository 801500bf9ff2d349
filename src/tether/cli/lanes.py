"""`tether lanes prune`: delete what of finished lanes is kept, after listing it."""

from __future__ import annotations

import sys

import click

from ._output import echo_json

__all__ = ("lanes",)

_STORE_HELP = "A SQLite file or postgresql:// URL [env var: TETHER_STORE]."


def _human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"  # pragma: no cover - the loop returns at GB


def _age(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f}{unit}"
    return f"{seconds:.0f}s"


@click.group()
def lanes() -> None:
    """What tether keeps of lanes: done lanes' folders and saves of finished items.

    \b
    Examples:
      tether lanes prune
      tether lanes prune --older-than 7d --yes
      tether lanes prune --json | jq '.[].path'
    """


@lanes.command("prune")
@click.option(
    "--older-than",
    "older_than",
    default=None,
    metavar="AGE",
    help="Only what has not changed for AGE (30m, 12h, 7d, 2w).",
)
@click.option("--yes", is_flag=True, help="Delete without asking.")
@click.option(
    "--refs",
    "with_refs",
    is_flag=True,
    help="Also the saved refs (refs/tether/saved/...) finished items went on from.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def prune(
    older_than: str | None,
    yes: bool,
    with_refs: bool,
    as_json: bool,
    store_opt: str | None,
) -> None:
    """List what of finished lanes may be deleted, then delete it (asks first).

    Listed: the folders of done lanes (their branches are in your repository; what
    stays is what git leaves out, such as build outputs), the saves of finished items,
    partial copies and finished lanes' agent folders (copies of your CLI folder).
    Never listed: a lane still open, held or halted, a save a take-over still needs,
    or a done lane whose work is not in your repository (its branch, or work tether
    could not commit: said on stderr, with what to do). With --refs, also the saved
    refs of saves finished items went on from (never a done lane's view of what it
    left uncommitted: nothing else holds it); --older-than goes by their commits' age.

    \b
    Examples:
      tether lanes prune                       # list, sizes, then ask
      tether lanes prune --older-than 7d --yes
      tether lanes prune --json                # list only, as JSON
      tether lanes prune --refs --older-than 30d
    """
    from ..runs import open_store, store_url
    from ..runs._prune import (
        old_refs,
        parse_age,
        prunable,
        remove,
        remove_refs,
        unbrought,
    )

    age = parse_age(older_than) if older_than is not None else 0.0
    store = open_store(store_url(store_opt))
    try:
        found = prunable(store, older_than=age)
        kept = unbrought(store)
        refs = old_refs(store, older_than=age) if with_refs else []
    finally:
        store.close()
    for k in kept:
        # Never deleted: its committed work exists nowhere else.
        click.echo(f"kept: {k.item}: {k.path}: {k.why}", err=True)
    total = sum(p.size for p in found)
    if as_json:
        rows = [
            {
                "path": str(p.path),
                "kind": p.kind,
                "item": p.item,
                "bytes": p.size,
                "age_seconds": round(p.age),
            }
            for p in found
        ]
        rows += [
            {
                "path": r.ref,
                "kind": "saved-ref",
                "item": r.item,
                "bytes": 0,
                "age_seconds": round(r.age),
            }
            for r in refs
        ]
        if yes:
            remove(found)
            remove_refs(refs)
        echo_json(rows)
        return
    if not found and not refs:
        click.echo("nothing to prune")
        return
    for p in found:
        what = f"{p.kind} {p.item}".rstrip()
        click.echo(f"{_human(p.size):>9}  {_age(p.age):>4}  {what}  {p.path}")
    for r in refs:
        click.echo(
            f"{'':>9}  {_age(r.age):>4}  saved-ref {r.item}  {r.ref} in {r.repo}"
        )
    click.echo(
        f"{len(found)} folder(s), {_human(total)}"
        + (f"; {len(refs)} saved ref(s)" if with_refs else "")
    )
    if not yes:
        if not sys.stdin.isatty():
            click.echo("nothing deleted: rerun with --yes to delete these")
            return
        if not click.confirm("delete them?", default=False):
            click.echo("nothing deleted")
            return
    freed = remove(found)
    click.echo(f"deleted {len(found)} folder(s), {_human(freed)} freed")
    if refs:
        click.echo(f"deleted {remove_refs(refs)} saved ref(s)")
