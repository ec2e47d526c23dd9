"""Tar archives in and out of sandboxes.

Every backend moves folders as tar streams (docker's archive API, the helper's tar on
Kubernetes). What comes *out* of a sandbox, a registry or a store was written by someone
hangar does not trust, so `extract_untrusted` never lets an archive write outside its
target, whatever links, hard links, devices, long names or sizes it holds. It does not
rely on a filter's idea of where a path leads (the ``data`` filter of CPython's tarfile
resolves paths with a non-strict realpath, which a chain of links as long as PATH_MAX
steps around: CVE-2025-4517). Instead every write is made by file descriptor:

- each folder on the way is opened with ``O_NOFOLLOW`` relative to the one before it, so a
  link the archive made (or any link) is never gone through;
- each file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` after whatever had its name
  is unlinked, so nothing is written through an earlier entry;
- a hard link may only name a regular file already extracted, reached the same way;
- devices, pipes and sockets are refused; set-uid, set-gid, sticky and group/other write
  bits are dropped; ownership is never taken from the archive;
- a symbolic link is created as text (never followed while extracting), and once every
  entry is out each one is resolved inside the target as the kernel would resolve it;
  one that leads outside (absolute, through ``..``, through other links, or a loop) is
  removed and refused;
- the regular files' sizes add up to at most `limit`, entries number at most
  `MAX_ENTRIES`, and a name is at most `MAX_NAME` bytes.

The archive's headers are read with CPython 3.12's tarfile on every interpreter
(``backports.tarfile`` before 3.12), so parsing is the same whatever the patch level.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hangar.errors import SandboxError, SandboxFileTooLarge

if TYPE_CHECKING or sys.version_info >= (3, 12):  # the same API: type-check against it
    import tarfile
else:
    from backports import tarfile

#: The most entries an untrusted archive may hold.
MAX_ENTRIES = 1 << 20
#: The longest name (after `strip`) an entry may have, in bytes: Linux's PATH_MAX.
MAX_NAME = 4096
#: Links followed, at most, to resolve one symbolic link (the kernel's own limit).
MAX_HOPS = 40

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


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

    Raises `SandboxError` for an entry that cannot be extracted safely (see the module),
    unless `skipped` is given: then such an entry is left out and named there
    ("name: reason"), which is what an agent's own workspace coming back needs (what the
    agent put there is its outcome, never the farm's failure). Raises
    `SandboxFileTooLarge` when the regular files add up to more than `limit` bytes or
    the entries to more than `MAX_ENTRIES`.
    """
    target.mkdir(parents=True, exist_ok=True)
    try:
        root = os.open(target, _DIR)
    except OSError as exc:
        raise SandboxError(f"cannot extract into {target}: {exc.strerror}") from None
    try:
        _Extraction(root, strip, limit, skipped).run(fileobj)
    finally:
        os.close(root)


class _Refused(Exception):
    """An entry that cannot be extracted safely; the message says why."""


class _Extraction:
    """One archive into one opened folder (`root`), by file descriptor only."""

    def __init__(self, root: int, strip: int, limit: int, skipped: list[str] | None) -> None:
        self.root, self.strip, self.limit, self.skipped = root, strip, limit, skipped
        self.total = 0
        self.links: list[tuple[str, ...]] = []

    def run(self, fileobj: IO[bytes]) -> None:
        try:
            with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
                for count, member in enumerate(iter(tar.next, None)):
                    if count >= MAX_ENTRIES:
                        raise SandboxFileTooLarge(f"the archive has over {MAX_ENTRIES} entries")
                    self.entry(tar, member)
                    # a stream of a million headers keeps none of them (getmembers()
                    # would read them all: the list itself is cleared)
                    tar.members.clear()  # type: ignore[attr-defined]
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise SandboxError(f"could not read an untrusted archive: {exc}") from exc
        finally:  # refused or not, no link out stays behind
            refused = [self.settle(parts) for parts in self.links]
        for name, reason in filter(None, refused):
            self.refuse(name, reason)

    def entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        try:
            parts = _inside(member.name.split("/")[self.strip :], [])
        except _Refused as exc:
            return self.refuse(member.name, str(exc))
        if not parts:
            return None
        name = "/".join(parts)
        try:
            if len(name.encode()) > MAX_NAME:
                raise _Refused(f"a name longer than {MAX_NAME} bytes")
            self.place(tar, member, parts)
        except _Refused as exc:
            self.refuse(name, str(exc))
        except OSError as exc:  # a name too long for the file system, and the like
            self.refuse(name, exc.strerror or str(exc))

    def place(self, tar: tarfile.TarFile, member: tarfile.TarInfo, parts: list[str]) -> None:
        if member.isreg():
            self.total += member.size
            if self.total > self.limit:
                message = f"the folder is larger than the cap of {self.limit} bytes"
                raise SandboxFileTooLarge(message)
        parent = _open_folder(self.root, parts[:-1], create=True)
        try:
            leaf = parts[-1]
            if member.isdir():
                _make_folder(parent, leaf)
            elif member.isreg():
                _write_file(parent, leaf, tar, member)
            elif member.issym():
                _make_link(parent, leaf, member.linkname, parts[:-1])
                self.links.append(tuple(parts))
            elif member.islnk():
                self.hard_link(parent, leaf, member.linkname)
            else:
                raise _Refused("a device, a pipe or another special file")
        finally:
            os.close(parent)

    def hard_link(self, parent: int, leaf: str, linkname: str) -> None:
        """A hard link, to a regular file this archive already put inside the target."""
        source = _inside(linkname.split("/")[self.strip :], [])
        if not source:
            raise _Refused(f"a hard link to {linkname!r}, which is not a file in the archive")
        folder = _open_folder(self.root, source[:-1], create=False)
        try:
            found = os.stat(source[-1], dir_fd=folder, follow_symlinks=False)
            if not stat.S_ISREG(found.st_mode):
                raise _Refused(f"a hard link to {linkname!r}, which is not a regular file")
            _clear(parent, leaf)
            os.link(source[-1], leaf, src_dir_fd=folder, dst_dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            raise _Refused(f"a hard link to {linkname!r}, which is not in the archive") from None
        finally:
            os.close(folder)

    def settle(self, parts: tuple[str, ...]) -> tuple[str, str] | None:
        """Remove the symbolic link at `parts` if it leads outside the target; (its name,
        why) when it did."""
        try:
            folder = _open_folder(self.root, list(parts[:-1]), create=False)
        except (OSError, _Refused):
            return None  # its folder was replaced: the link is gone with it
        try:
            _resolve(self.root, list(parts[:-1]), os.readlink(parts[-1], dir_fd=folder))
        except OSError:
            return None  # a later entry took its name
        except _Refused as exc:
            os.unlink(parts[-1], dir_fd=folder)
            return "/".join(parts), str(exc)
        finally:
            os.close(folder)
        return None

    def refuse(self, name: str, reason: str) -> None:
        if self.skipped is None:
            raise SandboxError(f"refused an unsafe entry in an untrusted archive: {name}: {reason}")
        self.skipped.append(f"{name}: {reason}")


def _inside(parts: list[str], base: list[str]) -> list[str]:
    """`parts` after `base`, with ``.`` and ``..`` applied as text; refused if it climbs
    out. Empty components (a leading ``/`` too) are dropped: absolute names land inside."""
    out = list(base)
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                raise _Refused("its path leads outside the target folder")
            out.pop()
        else:
            out.append(part)
    return out


def _open_folder(root: int, parts: list[str], *, create: bool) -> int:
    """A descriptor of folder `parts` under `root`, never going through a link."""
    fd = os.dup(root)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                inner = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    message = f"its path goes through {part!r}, which is not a folder"
                    raise _Refused(message) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear(parent: int, leaf: str) -> None:
    """Unlink whatever has the name `leaf` (never a folder: refused)."""
    try:
        found = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(found.st_mode):
        raise _Refused("a folder of that name is already there")
    os.unlink(leaf, dir_fd=parent)


def _make_folder(parent: int, leaf: str) -> None:
    try:
        os.mkdir(leaf, 0o755, dir_fd=parent)
    except FileExistsError:
        if not stat.S_ISDIR(os.stat(leaf, dir_fd=parent, follow_symlinks=False).st_mode):
            raise _Refused("something other than a folder has that name") from None


def _write_file(parent: int, leaf: str, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
    """A new file (never one already there, never through a link), its mode made safe."""
    _clear(parent, leaf)
    mode = member.mode & 0o755 | 0o600
    if not mode & 0o100:
        mode &= ~0o111
    fd = os.open(leaf, _NEW, 0o600, dir_fd=parent)
    with os.fdopen(fd, "wb") as out:
        source = tar.extractfile(member)
        if source is not None:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        os.fchmod(out.fileno(), mode)
        os.utime(out.fileno(), (member.mtime, member.mtime))


def _make_link(parent: int, leaf: str, text: str, where: list[str]) -> None:
    """A symbolic link, as text; what is plainly outside is refused at once."""
    if text.startswith("/"):
        raise _Refused(f"a link to the absolute path {text!r}")
    _inside(text.split("/"), where)
    _clear(parent, leaf)
    os.symlink(text, leaf, dir_fd=parent)


def _resolve(root: int, where: list[str], text: str) -> list[str]:
    """Where link `text` in folder `where` leads, resolved inside `root` as the kernel
    resolves it (links on the way followed, ``..`` after a link from where the link led);
    refused when it leaves `root`, is absolute or takes more than `MAX_HOPS` links."""
    path, pending, hops = list(where), deque(text.split("/")), 0
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not path:
                raise _Refused(f"a link ({text!r}) that leads outside the target folder")
            path.pop()
            continue
        path.append(part)
        found = _link_text(root, path)
        if found is None:
            continue
        hops += 1
        if hops > MAX_HOPS or found.startswith("/"):
            raise _Refused(f"a link ({text!r}) that leads outside the target folder or loops")
        path.pop()
        pending.extendleft(reversed(found.split("/")))
    return path


def _link_text(root: int, path: list[str]) -> str | None:
    """The text of the link at `path` under `root` (None: not a link, or not there)."""
    try:
        folder = _open_folder(root, path[:-1], create=False)
    except (OSError, _Refused):
        return None  # not there, or not a folder: nothing beyond it resolves
    try:
        return os.readlink(path[-1], dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)


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
