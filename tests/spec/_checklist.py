"""The stop folder's checklist of bad inputs, row by row, for `docs/rules.md`.

Each row names a bad input or an attack on the recorded stop (spec 02) and what tether
does about it; `tests/stop/` builds them for real. Rows are cited as `row D9`.
"""

from __future__ import annotations

ROWS: dict[str, tuple[str, str]] = {
    # A: the shared folder and its parents
    "A1": (
        "The shared folder's path is a symlink, even to a good directory.",
        "Holds: the folder must be a real directory at the path setup recorded.",
    ),
    "A2": (
        "A parent of the folder is a symlink.",
        "Holds: the walk opens each component without following links.",
    ),
    "A3": (
        "The folder is owned by an account other than root or the person.",
        "Holds.",
    ),
    "A4": ("A parent of the folder is owned by such an account.", "Holds."),
    "A5": (
        "The folder is group-writable without the sticky bit.",
        "Holds: others could rename or remove the person's uid directory.",
    ),
    "A6": ("The folder is world-writable without the sticky bit.", "Holds."),
    "A7": (
        "The folder is root's, mode 1777, as `/tmp` is.",
        "Accepted: the sticky bit keeps others from removing the person's entries.",
    ),
    "A8": (
        "A world-writable sticky parent belongs to another account.",
        "Holds: the owner of a sticky directory may remove anything in it.",
    ),
    "A9": (
        "A regular file, FIFO or socket sits at the folder's name.",
        "Holds: it is not a directory.",
    ),
    "A10": (
        "The folder is missing at the start, or removed during a run.",
        "Holds: a folder that is gone gives no clear look.",
    ),
    "A11": (
        "The folder is replaced during a run by a new directory that passes every "
        "check.",
        "Holds: the run pinned the folder's identity at its start, and a new one is the "
        "setting changed.",
    ),
    "A12": (
        "The walk is refused permission on the way (a parent made 0700).",
        "Holds: what cannot be seen is not clear.",
    ),
    "A13": (
        "The folder is on a file system whose owners are made up at mount time (vfat, "
        "exfat, ntfs, fuse with `uid=`).",
        "Holds, unless setup opted in and the board says what that costs.",
    ),
    "A14": (
        "The folder is on a network file system (NFS, SMB, sshfs, 9p).",
        "Holds unless setup opted in: a cached lookup could read a new stop as absent.",
    ),
    "A15": (
        "An owner shows as an overflow id (65534, or `(uid_t)-2`).",
        "Holds: the real owner is unknown, neither the person nor a stranger.",
    ),
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
    # B: the uid directory
    "B1": (
        "The person's uid directory is missing when the run starts.",
        'Holds ("not armed: run tether setup"); setup creates it.',
    ),
    "B2": (
        "The uid directory is removed or replaced during a run.",
        "Holds: its identity was pinned at the start, as the folder's (row A11).",
    ),
    "B3": (
        "The uid directory belongs to another account: a squat made before the "
        "person's first use.",
        "Holds, saying it is squatted and that root must remove it.",
    ),
    "B4": ("The uid directory is a symlink.", "Holds: it is opened without following."),
    "B5": (
        "A file, FIFO or socket sits at the uid directory's name.",
        "Holds: it is not a directory.",
    ),
    "B6": (
        "The uid directory is group- or world-writable without the sticky bit.",
        "Holds: others could remove the person's stop, a lift nobody made.",
    ),
    "B7": (
        "The uid directory is writable by others with the sticky bit.",
        "Holds: no one but the person may write there, sticky or not.",
    ),
    "B8": (
        "Decoy names beside the uid directory (`01000`, `1000 `, `1000.bak`, full-width "
        "digits).",
        "Never honoured: the reader opens exactly the person's uid, and parses no "
        "names.",
    ),
    "B9": (
        "The uid directory is mode 0711: it can be searched but not listed.",
        "Read as usual on Linux, where the walk's descriptors are `O_PATH` ones; setup "
        "makes it 0755.",
    ),
    "B10": (
        "The uid directory is 0700, so the reading account cannot search it.",
        "Holds; setup makes it 0755.",
    ),
    # C: the stop entry inside a trusted uid directory
    "C1": (
        "No stop, after every directory above it passed.",
        "`CLEAR`: the only way to a reading that counts as no stop.",
    ),
    "C2": (
        "A regular file owned by the person, within the size bound.",
        "`STOPPED`, reporting the uid, mtime, ctime and link count.",
    ),
    "C3": (
        "A regular file at the stop's name owned by someone else (root included).",
        "Not honoured: the reading is `CLEAR` and lists it as not honoured.",
    ),
    "C4": (
        "A symlink at the stop's name, to a good stop, a device or nowhere.",
        "Holds and reports it: the stop is opened without following links.",
    ),
    "C5": (
        "A FIFO at the stop's name.",
        "The reading never blocks on it (it is judged without being read); it holds.",
    ),
    "C6": (
        "A socket at the stop's name.",
        "Holds and reports it, identified from its type without opening it.",
    ),
    "C7": (
        "A character or block device at the stop's name.",
        "Holds and reports it; the device is never opened, so no driver runs.",
    ),
    "C8": (
        "A directory at the stop's name.",
        "Holds and reports it: only a regular file is a stop.",
    ),
    "C9": (
        "The person's file at the stop's name is larger than the bound (4 KiB).",
        "Holds: a malformed stop in the person's own directory.",
    ),
    "C10": ("An empty file of the person's.", "`STOPPED`: no byte is read anyway."),
    "C11": (
        "The person's stop has more than one link.",
        "`STOPPED`, reporting the link count: a link made elsewhere must not weaken it.",
    ),
    "C12": (
        "A hard link at the stop's name to another account's file.",
        "Not honoured: it is judged by the owner the descriptor shows.",
    ),
    "C13": (
        "The person's stop has mode 0666 or 0600.",
        "`STOPPED`; the report carries mtime and ctime, since others could touch "
        "mtime.",
    ),
    "C14": (
        "The person's stop has mode 0000.",
        "`STOPPED` on Linux, where it is opened with `O_PATH` and needs no read right.",
    ),
    "C15": (
        "The stop is swapped between a look and the open (for a link, a FIFO, another's "
        "file, a directory).",
        "Judged by what the one descriptor shows, never by the earlier look.",
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
    "C19": (
        "The person's stop carries the sticky bit.",
        "`STOPPED`; `tether stop` sets that bit itself (mode 01644), so age cleaners "
        "such as systemd-tmpfiles pass it by.",
    ),
    # D: time, configuration, process and environment
    "D1": (
        "The stop's mtime lies in the future, or at the epoch.",
        "`STOPPED`: a stop never expires by age; mtime and ctime are both reported.",
    ),
    "D2": (
        "The configuration (folder, person, bound) changes during a run.",
        "Holds until the run restarts: the setting changed.",
    ),
    "D3": (
        "The setup record is writable by another account, owned by one, or a symlink.",
        "Refused with a clear error, as every store of tether that is not owner-only.",
    ),
    "D4": (
        "The person's name cannot be looked up, or their uid changes.",
        "The setup record keeps the person's numeric uid, so no name lookup happens "
        "at a reading.",
    ),
    "D5": (
        "Any errno other than a missing stop (EIO, ESTALE, EMFILE, ENOMEM, ...).",
        "Holds: only a missing stop's own name, every directory above it checked, is "
        "`CLEAR`.",
    ),
    "D6": (
        "An unexpected exception inside the reader.",
        "Holds: the reader never turns a failure into no stop.",
    ),
    "D7": (
        "The reading hangs (a mount that does not answer, a stopped reader).",
        "Every reading is bounded in time: one that does not finish is a `HOLD` "
        "naming what hung.",
    ),
    "D8": (
        "An age cleaner deletes the stop.",
        'Counts as lifted, and is reported as "vanished without a lift"; the board '
        "warns about folders age cleaners tend, and the stop's sticky bit keeps "
        "systemd-tmpfiles off it.",
    ),
    "D9": (
        "The reader's view is changed: it is moved into another mount namespace where "
        "something else is mounted over the folder, or runs inside the agents' "
        "sandbox.",
        "A run pins its mount namespace (and the identity of `/`'s mount where the "
        "kernel gives one) at its start; a reading from another namespace or root "
        "holds.",
    ),
    "D10": (
        "The agents' account can edit the code that reads the stop (the package, the "
        "interpreter) or its environment.",
        "Where a system binding exists, a bound account's run holds when the code it "
        "runs is writable by that account.",
    ),
    "D11": (
        "An agent of the same account removes or renames the stop directly.",
        "No reader can prevent it: only a second account binds, and the board says "
        "so plainly when agents run under the person's own account.",
    ),
    "D12": (
        "On the writer's side, the stop's name in the uid directory is already taken "
        "by something that is not the person's stop (a file of another owner, a FIFO, a "
        "link, a directory).",
        "`tether stop` replaces what it can remove, says so, and writes the stop "
        "atomically; a directory with entries is left alone and the stop fails loudly.",
    ),
    "D13": (
        "The writer runs on a full disk, over quota, or on a read-only file system.",
        "`tether stop` fails loudly (exit 1, a message) and never claims success.",
    ),
}
"""Checklist row: (the bad input, what tether does about it)."""
