"""Tar archives in and out of sandboxes.

Every backend moves folders as tar streams (docker's archive API, tar over exec on
Kubernetes). What comes *out* of a sandbox was written by untrusted code, so it is
extracted with tarfile's ``data`` filter (no absolute paths, no ``..``, no links leaving
the target, no devices, no set-uid bits) and a size cap.

Extraction filters arrived in Python 3.11.4, and Debian 12 ships 3.11.2, so before 3.12
the filter comes from ``backports.tarfile`` (CPython 3.12's own module): extraction works
the same on every interpreter hangar supports, whatever its patch level.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hangar.errors import SandboxError, SandboxFileTooLarge

if TYPE_CHECKING or sys.version_info >= (3, 12):  # the same API: type-check against it
    import tarfile
else:
    from backports import tarfile


def tar_directory(source: Path, fileobj: IO[bytes], *, uid: int, gid: int) -> None:
    """Write the *contents* of `source` as a tar stream owned by `uid`/`gid`.

    Symlinks are stored as links (never followed), so a link in a host folder cannot
    smuggle the file it points to into the sandbox.
    """

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        for child in sorted(source.iterdir()):
            tar.add(child, arcname=child.name, recursive=True, filter=owned)
    fileobj.flush()


def extract_untrusted(
    fileobj: IO[bytes],
    target: Path,
    *,
    strip: int,
    limit: int,
    skipped: list[str] | None = None,
) -> None:
    """Extract an untrusted tar stream into `target`, dropping `strip` leading components.

    Raises `SandboxError` for a member the ``data`` filter refuses, unless `skipped` is
    given: then such a member (a device or a pipe, a link leaving `target`) is left out
    and named there, which is what an agent's own workspace coming back needs (what the
    agent put there is its outcome, never the farm's failure). Raises
    `SandboxFileTooLarge` when the regular files add up to more than `limit` bytes.
    """
    target.mkdir(parents=True, exist_ok=True)
    total = 0

    def strip_and_check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        nonlocal total
        parts = member.name.split("/")[strip:]
        if not parts or parts == [""] or parts == ["."]:
            return None
        changes: dict[str, str] = {"name": "/".join(parts)}
        if member.islnk():  # hard-link targets are archive paths too
            changes["linkname"] = "/".join(member.linkname.split("/")[strip:])
        total += member.size if member.isreg() else 0
        if total > limit:
            raise SandboxFileTooLarge(f"the folder is larger than the cap of {limit} bytes")
        try:
            return tarfile.data_filter(member.replace(**changes, deep=False), dest)  # type: ignore[arg-type]
        except tarfile.FilterError as exc:
            if skipped is None:
                raise
            skipped.append(f"{changes['name']}: {exc}")
            return None

    try:
        with tarfile.open(fileobj=fileobj) as tar:
            tar.extractall(target, filter=strip_and_check)  # noqa: S202 (filtered)
    except tarfile.FilterError as exc:
        raise SandboxError(f"refused an unsafe entry in an untrusted archive: {exc}") from exc
    except tarfile.TarError as exc:
        raise SandboxError(f"could not read an untrusted archive: {exc}") from exc


def copy_untrusted_tree(
    source: Path, target: Path, *, limit: int, skipped: list[str] | None = None
) -> None:
    """Copy the contents of host folder `source`, written by untrusted code, into `target`.

    For a folder a sandbox wrote through a mount, once nothing in the sandbox runs any
    more: `source` itself must be a real folder (not a link), links are copied as links
    and never followed, and the copy passes the same filter as `extract_untrusted`.
    With `skipped`, what cannot be copied (an entry the filter refuses, such as an
    absolute link; one that cannot be read; a file that would take the copy past `limit`)
    is left out and named there instead of failing the copy. Sizes are read before any
    byte is: a sparse file of a terabyte is never read, and a FIFO or a device is never
    opened.
    """
    if source.is_symlink() or not source.is_dir():
        raise SandboxError(f"{source.name} is not a folder (a link or a file was put there)")

    def left_out(path: str, exc: OSError) -> None:
        if skipped is None:
            raise SandboxError(f"cannot read {path}: {exc}") from exc
        skipped.append(f"{Path(path).relative_to(source.parent)}: {exc.strerror or exc}")

    total = 0
    with tempfile.TemporaryFile() as spool:
        with tarfile.open(fileobj=spool, mode="w") as tar:
            tar.add(source, arcname=source.name, recursive=False)
            for folder, dirs, files in os.walk(source, onerror=lambda e: left_out(e.filename, e)):
                for name in sorted(dirs) + sorted(files):
                    path = Path(folder) / name
                    try:
                        size = (
                            path.lstat().st_size if path.is_file() and not path.is_symlink() else 0
                        )
                        if total + size > limit:
                            message = f"larger than the cap of {limit} bytes in all"
                            if skipped is None:
                                raise SandboxFileTooLarge(f"the folder is {message}")
                            skipped.append(f"{path.relative_to(source.parent)}: {message}")
                            continue
                        total += size
                        tar.add(path, arcname=str(path.relative_to(source.parent)), recursive=False)
                    except OSError as exc:
                        left_out(str(path), exc)
        spool.seek(0)
        extract_untrusted(spool, target, strip=1, limit=limit, skipped=skipped)
