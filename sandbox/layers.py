"""What a container changed in its image's file system, read from its overlay layer.

``docker diff`` asks the engine, which compares the container's layer with the image's
layers by walking them: half a second for a small image, most of an image task's
hand-over. Where the engine keeps containers in overlay2 on this machine (a node's own
engine; hangar's worker runs as root beside it), the container's upper folder holds
exactly what it changed: each entry there was added (nothing below has its path) or
changed (something below does), and a whiteout (a character device 0:0) is a deletion.
`overlay_changes` reads that folder by the names alone: nothing in it is opened or
followed, and an image's link on the way to a path below is not followed either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hangar.sandbox.base import Change
from hangar.sandbox.observe import canonical

#: The most entries read from a layer; past it the reading says it is not whole.
LAYER_ENTRIES = 2_000_000


def _below(lowers: list[bytes], parts: list[bytes]) -> bool:
    """Whether any lower layer has the path `parts` (no link followed on the way)."""
    for lower in lowers:
        path = lower
        for i, part in enumerate(parts):
            path = path + b"/" + part
            try:
                st = os.lstat(path)
            except OSError:
                break
            if i == len(parts) - 1:
                return not (stat.S_ISCHR(st.st_mode) and st.st_rdev == 0)  # not a whiteout
            if not stat.S_ISDIR(st.st_mode):
                break
    return False


def overlay_changes(upper: Path, lowers: list[Path]) -> tuple[list[Change], bool] | None:
    """The changes in the upper folder `upper` over `lowers` (top first), as ``docker
    diff`` lists them, and whether the reading is whole (at most `LAYER_ENTRIES`); None
    when the folder cannot be read here."""
    base = os.fsencode(upper)
    below = [os.fsencode(p) for p in lowers]
    if not upper.is_dir():
        return None
    found: list[Change] = []
    folders: list[list[bytes]] = [[]]
    while folders:
        parts = folders.pop()
        try:
            entries = list(os.scandir(b"/".join([base, *parts])))
        except PermissionError:
            return None
        except OSError:
            continue
        for entry in entries:
            path = [*parts, entry.name]
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            shown = canonical(b"/" + b"/".join(path))
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                found.append(Change(kind="D", path=shown))
                continue
            found.append(Change(kind="C" if _below(below, path) else "A", path=shown))
            if stat.S_ISDIR(st.st_mode):
                folders.append(path)
                if _opaque(entry.path):  # it hides what was below: each of those is deleted
                    found += _hidden(below, path, {e.name for e in os.scandir(entry.path)})
            if len(found) >= LAYER_ENTRIES:
                return found, False
    return found, True


def _opaque(folder: bytes) -> bool:
    """Whether an upper folder hides the lower folders of its path (made again after
    its removal)."""
    try:
        return os.getxattr(folder, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def _hidden(lowers: list[bytes], parts: list[bytes], kept: set[bytes]) -> list[Change]:
    """The entries of the lower folders at `parts` that an opaque folder hides (deleted),
    less those it has again (`kept`)."""
    names: set[bytes] = set()
    for lower in lowers:
        folder = lower
        try:
            for part in parts:  # real folders all the way: no link of the image followed
                folder += b"/" + part
                if not stat.S_ISDIR(os.lstat(folder).st_mode):
                    raise NotADirectoryError(folder)
            names |= {e.name for e in os.scandir(folder)}
        except OSError:
            continue
    return [
        Change(kind="D", path=canonical(b"/" + b"/".join([*parts, name])))
        for name in sorted(names - kept)
    ]
