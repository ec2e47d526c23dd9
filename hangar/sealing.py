"""Sealed suites: a folder of scenarios whose every file is pinned by sha256.

`seal` writes ``manifest.json`` (refusing a suite that is already sealed); `verify`
lists every file that changed, went missing or was added since. A sweep refuses a
scenario in a sealed suite that no longer matches its manifest, naming the files.
"""

from __future__ import annotations

import json
from pathlib import Path

from hangar.errors import ConfigError
from hangar.files import MANIFEST, file_sha256, pin_problems


def _files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): file_sha256(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.relative_to(folder).as_posix() != MANIFEST
    }


def seal(folder: Path) -> int:
    """Write the manifest of `folder`; returns how many files it pins."""
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder")
    manifest = folder / MANIFEST
    if manifest.exists():
        raise ConfigError(
            f"{folder} is already sealed ({manifest}); a sealed suite is never edited: copy "
            "it to a new folder and seal that as the next version"
        )
    files = _files(folder)
    manifest.write_text(json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True) + "\n")
    return len(files)


def verify(folder: Path) -> list[str]:
    """Every difference between `folder` and its manifest (empty when it matches)."""
    try:
        pinned: dict[str, str] = json.loads((folder / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError) as exc:
        return [f"{folder / MANIFEST}: unreadable manifest ({exc})"]
    return pin_problems(folder, pinned, _files(folder), others_ok=False)


def sealed_suite_of(path: Path, stop: Path) -> Path | None:
    """The sealed suite folder holding `path` (searched up to `stop`), or None."""
    for folder in [path.parent, *path.parent.parents]:
        if (folder / MANIFEST).is_file():
            return folder
        if folder == stop or folder == folder.parent:
            return None
    return None
