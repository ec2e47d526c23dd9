"""File helpers every part of hangar shares: YAML with line numbers, sha256 pins, digests
of files and folders, sizes, and the manifests that seal a folder.

A *pin* is ``sha256:`` followed by 64 lowercase hex characters: the exact bytes of a
file. A *manifest* (``manifest.json``) pins the files of a sealed folder; `pin_problems`
says, file by file, what no longer matches.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml

from hangar.errors import ConfigError

#: The file that seals a folder.
MANIFEST = "manifest.json"
_PIN = re.compile(r"^sha256:[0-9a-f]{64}$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


#: PyYAML's safe loader, libyaml's C one where PyYAML was built with it (a suite of a
#: thousand cases parses in a tenth of the time).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_config_text(path: Path) -> str:
    """A configuration file's text (UTF-8); `ConfigError` naming the file when it is not
    there or cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from None


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; errors name the file, line and column."""
    text = read_config_text(path)
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}{where}: malformed YAML: {problem}") from None


def read_data(path: Path) -> Any:
    """A YAML or JSON file's data (by its suffix: ``.json`` is read as JSON, anything else
    as YAML, of which JSON is a subset); errors name the file, line and column."""
    if path.suffix != ".json":
        return read_yaml(path)
    text = read_config_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: malformed JSON: {exc.msg}") from None


def file_sha256(path: Path) -> str:
    """The pin of a file's bytes (``sha256:<hex>``)."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def check_pin(value: str) -> str:
    """`value` when it is a pin, else a ValueError that shows the expected form."""
    if not _PIN.match(value):
        raise ValueError(
            f"expected 'sha256:' followed by 64 lowercase hex characters, got {value!r}"
        )
    return value


def bare(digest: str) -> str:
    """A digest without its ``sha256:`` prefix, lowercased."""
    return digest.strip().lower().removeprefix("sha256:")


def tree_digest(path: Path) -> str:
    """sha256 of a file's bytes, or of a folder's relative paths and file bytes.

    Symlinks count by their target text and are never followed; a missing path has a
    fixed marker, so a scenario that lacks a file still has a digest (and is refused
    at admission with the file named).
    """
    h = hashlib.sha256()
    if path.is_symlink():
        h.update(b"link\0" + str(path.readlink()).encode())
    elif path.is_file():
        h.update(b"file\0" + path.read_bytes())
    elif path.is_dir():
        for child in sorted(path.rglob("*")):
            rel = child.relative_to(path).as_posix().encode()
            h.update(b"entry\0" + rel + b"\0" + tree_digest(child).encode())
    else:
        h.update(b"missing\0")
    return h.hexdigest()


def parse_size(value: int | str) -> int:
    """Parse a size like ``512m``, ``2g``, ``2GiB`` or a plain number of bytes.

    Suffixes are binary (k = 1024), as docker reads them.
    """
    if isinstance(value, int):
        return value
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"not a size: {value!r} (expected e.g. 512m, 2g, 2GiB or bytes)")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * 1024 ** "_kmgt".index(unit)) if unit else int(number)


def pin_problems(
    folder: Path, pinned: dict[str, str], current: dict[str, str], *, others_ok: bool
) -> list[str]:
    """What differs between a manifest's `pinned` files and the `current` ones (relative
    path -> pin), file by file; unless `others_ok`, a file the manifest does not pin is a
    problem too (it was added after the folder was sealed)."""
    problems = [
        f"{folder / rel}: changed since the suite was sealed"
        for rel in sorted(pinned)
        if rel in current and bare(current[rel]) != bare(pinned[rel])
    ]
    problems += [
        f"{folder / rel}: missing (the suite's manifest pins it)"
        for rel in sorted(pinned)
        if rel not in current
    ]
    if not others_ok:
        problems += [
            f"{folder / rel}: added after the suite was sealed"
            for rel in sorted(current)
            if rel not in pinned
        ]
    return problems


def read_json(path: Path) -> Any:
    """A JSON file (evidence, a record), or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def text_of(folder: Path, rel: str, cap: int) -> tuple[str, int]:
    """A file under `folder` as text (undecodable bytes replaced), at most `cap` bytes of
    it, and how many bytes were cut; ("", 0) when it is not a file."""
    path = folder / rel
    if not rel or not path.is_file():
        return "", 0
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    return data[:cap].decode("utf-8", errors="replace"), max(0, path.stat().st_size - cap)
