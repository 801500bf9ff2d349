"""What the stop guard protects: every stop directory this account honours, its setup
record and the system binding. Above both the account's setup and the binding, which
it reads."""

from __future__ import annotations

import os
from pathlib import Path

from ._setup import load_setup, own_store, setup_path
from ._system import binding_path, load_binding

__all__ = ("protected_paths",)


def protected_paths(*, system_dir: Path | None = None) -> list[Path]:
    """Every stop directory this account honours, its setup record and the binding.

    The system binding's folder and uid directory come first for a bound account
    (and the binding's own file for every account), then what its own setup names.
    Never raises: with an unreadable record or binding the rest is still listed, so a
    guard built on this list fails towards protecting more.

    Args:
        system_dir: where the system binding is read (default `/etc/tether`).
    """
    where = system_dir
    found: list[Path] = [setup_path()]
    try:
        found.append(binding_path(where))
        binding = load_binding(where)
        bound = None if binding is None else binding.for_account(os.geteuid())
        if bound is not None:
            found += [bound.folder, bound.folder / str(bound.person_uid)]
    except Exception:  # a guard must get a list whatever happens
        pass
    uid = os.geteuid()
    try:
        store = own_store()
        found += [store, store / str(uid)]
    except Exception:  # a guard must get a list whatever happens
        pass
    try:
        record = load_setup()
    except Exception:  # see above
        return found
    extra = [record.store_dir, record.uid_dir]
    return found + [path for path in extra if path not in found]
