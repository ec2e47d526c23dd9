"""Where evidence bundles are kept: a small interface (`put`, `get`, `exists`).

`file://DIR` is the default store; `s3://bucket/prefix` is in `hangar.verifiers.s3`. Keys
look like ``<sweep>/<trial key>/<attempt>/bundle.tar.gz``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from hangar.errors import ConfigError, EvidenceStoreError


def bundle_key(sweep: str, trial_key: str, attempt: int) -> str:
    """The store key of one attempt's bundle."""
    return f"{sweep}/{trial_key}/{attempt}/bundle.tar.gz"


def check_key(key: str) -> str:
    p = PurePosixPath(key)
    if p.is_absolute() or ".." in p.parts or not key:
        raise EvidenceStoreError(f"bad store key {key!r}")
    return key


class EvidenceStore(ABC):
    """Keeps bundles under keys."""

    @abstractmethod
    def put(self, key: str, source: Path) -> str:
        """Store the file `source` under `key`; returns its URI."""

    @abstractmethod
    def get(self, key: str, dest: Path) -> None:
        """Copy what is under `key` to the file `dest`."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether something is stored under `key`."""

    @abstractmethod
    def uri(self, key: str) -> str:
        """The URI of `key` in this store."""


class FileEvidenceStore(EvidenceStore):
    """A folder on a file system (``file:///abs/dir``)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put(self, key: str, source: Path) -> str:
        """Copy atomically: a reader never sees half a bundle."""
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".partial-")
        os.close(fd)
        try:
            shutil.copyfile(source, tmp)
            Path(tmp).replace(dest)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return self.uri(key)

    def get(self, key: str, dest: Path) -> None:
        """Copy the stored file to `dest`."""
        path = self._path(key)
        if not path.is_file():
            raise EvidenceStoreError(f"nothing stored at {self.uri(key)}")
        shutil.copyfile(path, dest)

    def exists(self, key: str) -> bool:
        """Whether the key's file exists."""
        return self._path(key).is_file()

    def uri(self, key: str) -> str:
        """``file://`` URI of the key."""
        return (self.root / key).as_uri()


def open_store(url: str) -> EvidenceStore:
    """The store behind `url`: ``file:///dir``, a plain path, or ``s3://bucket/prefix``."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        raw = unquote(parsed.netloc + parsed.path) if parsed.scheme else url
        return FileEvidenceStore(Path(raw))
    if parsed.scheme == "s3":
        from hangar.verifiers.s3 import S3EvidenceStore

        return S3EvidenceStore.from_url(url)
    raise ConfigError(f"unsupported evidence store {url!r}: use file://DIR or s3://bucket/prefix")


def split_uri(uri: str, endpoint: str | None = None) -> tuple[EvidenceStore, str]:
    """The store and key of a bundle URI (``.../<sweep>/<key>/<attempt>/bundle.tar.gz``)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = Path(unquote(parsed.netloc + parsed.path) if parsed.scheme else uri).resolve()
        return FileEvidenceStore(path.parent), path.name
    if parsed.scheme == "s3":
        from hangar.verifiers.s3 import S3EvidenceStore

        head, _, name = parsed.path.rpartition("/")
        return S3EvidenceStore(parsed.netloc, head, endpoint), name
    raise ConfigError(f"unsupported evidence URI {uri!r}")
