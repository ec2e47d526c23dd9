"""Evidence archives: the artifacts folder plus `manifest.json` as one archive.

The archive is a deterministic ``tar.gz`` (sorted entries, fixed times and owners), so
the same artifacts always give the same sha256. Only regular files are bundled; a
symlink or special file found in the artifacts is listed in the manifest as skipped,
never followed.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from hangar.errors import EvidenceStoreError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(artifacts: Path, read: dict[str, bytes]) -> dict[str, str]:
    """Write `manifest.json` (sha256 of every regular file) into `artifacts`; the bytes of
    the files it read whole (up to `_KEEP_BYTES` in all) and the manifest's are left in
    `read`, so the archive need not read them again."""
    files: dict[str, str] = {}
    skipped: list[str] = []
    kept = 0
    for path in sorted(artifacts.rglob("*")):
        rel = path.relative_to(artifacts).as_posix()
        if rel == MANIFEST:
            continue
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            skipped.append(rel)
        elif path.is_file():
            size = path.stat().st_size
            if kept + size <= _KEEP_BYTES:
                read[rel] = data = path.read_bytes()
                files[rel] = hashlib.sha256(data).hexdigest()
                kept += size
            else:
                files[rel] = sha256_file(path)
    read[MANIFEST] = _manifest(files, skipped)
    (artifacts / MANIFEST).write_bytes(read[MANIFEST])
    return files


def _manifest(files: dict[str, str], skipped: list[str]) -> bytes:
    manifest = {"version": MANIFEST_VERSION, "files": files, "skipped": skipped}
    return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()


#: Bytes of a bundle's files held in memory at most, each read once for both its hash and
#: the archive (the rest are read twice, one at a time, as before).
_KEEP_BYTES = 8 << 20


class _Hashing(io.RawIOBase):
    """A file object that hashes what is written through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.sha = raw, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        return self.raw.write(data)


def build_archive(artifacts: Path, out: Path) -> str:
    """Write the manifest and the archive `out`; returns the archive's sha256 (each file
    is read once, and the archive hashed as it is written)."""
    read: dict[str, bytes] = {}
    files = write_manifest(artifacts, read)

    def contents() -> Iterator[tuple[str, bytes]]:
        for rel in [MANIFEST, *sorted(files)]:
            data = read.pop(rel, None)
            yield rel, (artifacts / rel).read_bytes() if data is None else data

    with out.open("wb") as raw:
        return _archive(raw, contents())


def archive_bytes(files: dict[str, bytes]) -> tuple[bytes, str]:
    """The bundle of evidence files held in memory (relative path: bytes), and its sha256:
    the same archive `build_archive` makes of the same files in a folder."""
    hashes = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    manifest = _manifest(dict(sorted(hashes.items())), [])
    out = io.BytesIO()
    sha = _archive(out, iter([(MANIFEST, manifest), *sorted(files.items())]))
    return out.getvalue(), sha


def _archive(raw: IO[bytes], contents: Iterator[tuple[str, bytes]]) -> str:
    """Write the deterministic archive of `contents` (in order) to `raw`; its sha256.

    The bytes are those `tarfile` writes (PAX format, mode 0644, owner 0, time 0) for the
    same members, gzipped at level 6 without a name or time; each member's header is
    `tarfile`'s own for its name, with the size put in (`_header`), 15 times cheaper than
    `TarFile.addfile` for the small files of a prompt trial's evidence."""
    hashing = _Hashing(raw)
    written = 0
    # No file name in the gzip header: the archive depends on its contents alone. Level 6
    # (gzip's own default) takes half the time of 9 for 1% more bytes on a prompt's evidence.
    with gzip.GzipFile(filename="", fileobj=hashing, mode="wb", mtime=0, compresslevel=6) as gz:
        for rel, data in contents:
            pad = -len(data) % tarfile.BLOCKSIZE
            member = b"".join((_header(rel, len(data)), data, tarfile.NUL * pad))
            gz.write(member)
            written += len(member)
        # Two empty blocks end the archive, zeros fill its last record (as `TarFile.close`).
        end = 2 * tarfile.BLOCKSIZE
        gz.write(tarfile.NUL * (end + -(written + end) % tarfile.RECORDSIZE))
    return hashing.sha.hexdigest()


def _tar_header(rel: str, size: int) -> bytes:
    """`tarfile`'s own header (and PAX record, if any) for a bundled file."""
    info = tarfile.TarInfo(rel)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info.tobuf(tarfile.PAX_FORMAT)


#: `tarfile`'s header of each bundled name at size 0 (`_header` puts the size in).
_template = functools.lru_cache(maxsize=4096)(functools.partial(_tar_header, size=0))


def _header(rel: str, size: int) -> bytes:
    """`tarfile`'s header for a bundled file `rel` of `size` bytes: the template's block
    with its size and checksum fields rewritten, as `TarInfo.tobuf` fills them; a name
    that needs a PAX record, or a size past the field's 8 GiB, takes `tarfile`'s own."""
    block = bytearray(_template(rel))
    if len(block) != tarfile.BLOCKSIZE or size >= 8**11:
        return _tar_header(rel, size)
    block[124:136] = b"%011o\0" % size
    block[148:156] = b" " * 8  # the checksum is taken with its own field as spaces
    block[148:155] = b"%06o\0" % sum(block)
    return bytes(block)


class ArchiveCheck(BaseModel):
    """What `verify_archive` found."""

    ok: bool
    """Everything matched."""
    sha256: str
    """sha256 of the archive as read."""
    files: int = 0
    """Files listed in the manifest."""
    problems: list[str] = []
    """Each difference, in words."""


def verify_archive(archive: Path, expected_sha256: str | None = None) -> ArchiveCheck:
    """Recompute every hash in a bundle and say what differs."""
    digest = sha256_file(archive)
    problems: list[str] = []
    if expected_sha256 is not None and digest != expected_sha256:
        problems.append(f"archive sha256 is {digest}, the result recorded {expected_sha256}")
    try:
        contents: dict[str, bytes] = {}
        with tarfile.open(archive, mode="r:gz") as tar:
            for member in tar:
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is None:
                    problems.append(f"{member.name}: not a regular file")
                    continue
                contents[member.name] = handle.read()
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile) as exc:
        problems.append(f"the archive is damaged: {exc}")
        return ArchiveCheck(ok=False, sha256=digest, problems=problems)
    try:
        manifest = json.loads(contents.pop(MANIFEST))
        listed: dict[str, str] = manifest["files"]
    except (KeyError, ValueError, TypeError) as exc:
        problems.append(f"{MANIFEST} is missing or unreadable: {exc}")
        return ArchiveCheck(ok=False, sha256=digest, problems=problems)
    for rel, want in sorted(listed.items()):
        if rel not in contents:
            problems.append(f"{rel}: listed in the manifest but missing")
        elif (got := hashlib.sha256(contents[rel]).hexdigest()) != want:
            problems.append(f"{rel}: sha256 {got} differs from the manifest's {want}")
    problems += [
        f"{rel}: present but not in the manifest" for rel in sorted(contents.keys() - listed.keys())
    ]
    return ArchiveCheck(ok=not problems, sha256=digest, files=len(listed), problems=problems)


def read_member(uri: str, name: str, expected_sha256: str | None = None) -> str:
    """The text of the file `name` of the bundle at `uri` ('' when it has none); a bundle
    that fails its check is refused."""
    from hangar.evidence.stores import split_uri

    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "bundle.tar.gz"
        store, key = split_uri(uri)
        store.get(key, archive)
        check = verify_archive(archive, expected_sha256)
        if not check.ok:
            raise EvidenceStoreError(
                f"the bundle {uri} fails its check: {'; '.join(check.problems)}"
            )
        with tarfile.open(archive) as tar:
            try:
                member = tar.extractfile(name)
            except KeyError:
                return ""
            return "" if member is None else member.read().decode("utf-8", errors="replace")
