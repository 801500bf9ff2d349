"""What the stop guard protects.

Every stop directory this account honours, its setup record and the system binding.
Above both the account's setup and the binding, which it reads.

The per-call hook (`tether guard --claude-hook`, spec 05: at most 3x a bare
interpreter's start) lists these on every agent tool call, so `protected_texts` works
in text (`_locations`) and reads the system binding with the whole stop reader (`_system`:
the mount plan, the folder rule, a bounded worker) only where a binding may exist:
where the mount table says the system dir is on a local filesystem and an `lstat` of
the binding file finds nothing, that reader could only answer "no binding" or "cannot
be checked", and either adds no path here. Anywhere else (a binding file, another
error, a mount that is not local or a table that cannot be read) the whole reader runs,
with every check of spec 02, as before.
"""

from __future__ import annotations

import os
import posixpath

from ._locations import (
    BINDING_NAME,
    STOP_NAME,
    joined,
    own_store_text,
    read_setup_fields,
    setup_text,
    system_dir_text,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("Listing", "listing", "protected_paths", "protected_texts", "stop_may_stand")


def protected_paths(*, system_dir: Path | None = None) -> list[Path]:
    """Every stop directory this account honours, its setup record and the binding.

    The system binding's folder and uid directory come first for a bound account
    (and the binding's own file for every account), then what its own setup names.
    Never raises: with an unreadable record or binding the rest is still listed, so a
    guard built on this list fails towards protecting more.

    Args:
        system_dir: where the system binding is read (default `/etc/tether`).
    """
    from pathlib import Path

    return [Path(text) for text in protected_texts(system_dir=system_dir)]


def protected_texts(*, system_dir: Path | None = None) -> list[str]:
    """`protected_paths()` as text (each `str()` of that path), without pathlib."""
    return listing(system_dir)[0]


def stop_may_stand(
    *, system_dir: Path | None = None, found: Listing | None = None
) -> bool:
    """False only where no place this account honours can hold a stop now.

    That is: the whole list was made (no record or binding failed to read), and in
    every uid directory it names, on a local file system (the mount table says so,
    as for the binding), an `lstat` of the stop file finds nothing. A stop is STOPPED
    only when that file is there, so the reader (spec 02, every check) would answer
    CLEAR or HOLD. Anything else, a file there or any error, answers True: read the
    stop with the whole reader. The per-call hook of a run's agent asks this first
    (spec 05's bound on the hook), with the `listing()` its guard uses (`found`).
    """
    from ._mounts import plan

    try:
        _, uid_dirs, whole = found if found is not None else listing(system_dir)
        if not whole:
            return True
        for uid_dir in uid_dirs:
            mounts = plan(posixpath.dirname(uid_dir) or ".", uid_dir)
            if mounts is None or not mounts.local:
                return True
            try:
                os.stat(joined(uid_dir, STOP_NAME), follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                continue
            return True
    except Exception:  # whatever is not known: read the whole way
        return True
    return False


Listing = tuple[list[str], list[str], bool]
"""The protected texts, the uid directories among them, and whether the list is whole
(every record and binding was read)."""


def listing(system_dir: Path | None = None) -> Listing:
    """The protected texts, their uid directories and whether the list is whole.

    The list is whole when every record and binding was read. Read once per hook event.
    """
    found: list[str] = [setup_text()]
    uid_dirs: list[str] = []
    whole = True
    try:
        real = system_dir_text(system_dir)
        found.append(joined(real, BINDING_NAME))
        if _may_be_bound(real):
            from ._system import load_binding

            binding = load_binding(system_dir)
            bound = None if binding is None else binding.for_account(os.geteuid())
            if bound is not None:
                bound_folder = str(bound.folder)
                bound_dir = joined(bound_folder, str(bound.person_uid))
                found += [bound_folder, bound_dir]
                uid_dirs.append(bound_dir)
    except Exception:  # a guard must get a list whatever happens
        whole = False
    uid = os.geteuid()
    try:
        store = own_store_text()
        found += [store, joined(store, str(uid))]
        uid_dirs.append(joined(store, str(uid)))
    except Exception:  # a guard must get a list whatever happens
        whole = False
    try:
        fields = read_setup_fields()
    except Exception:  # see above
        return found, uid_dirs, False
    folder, person = (None, uid) if fields is None else fields[:2]
    store_dir = folder if folder is not None else own_store_text()
    extra = [store_dir, joined(store_dir, str(person))]
    uid_dirs.append(extra[1])
    return found + [path for path in extra if path not in found], uid_dirs, whole


def _may_be_bound(real: str) -> bool:
    """False only where the binding reader would find no binding in `real`.

    `real` is the system dir, its parent resolved: see the module docstring.
    """
    from ._mounts import plan

    mounts = plan(posixpath.dirname(real) or ".", real)
    if mounts is None or not mounts.local:
        return True
    try:
        os.stat(joined(real, BINDING_NAME), follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True
