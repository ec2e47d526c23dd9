"""Where evidence archives are kept: a small interface (`put`, `get`, `exists`).

`file://DIR` is the default store; `s3://bucket/prefix` is in `hangar.evidence.s3`. Keys
look like ``<sweep>/<trial key>/<attempt>/<run>/bundle.tar.gz`` (``<run>``: the
execution that wrote it; bundles of older versions have none). The bundles of trials run
in pools (no sandbox) are kept in the results store instead (`StoredArchives`, URIs
``store:///<key>``), and read through it.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from hangar.errors import ConfigError, EvidenceStoreError
from hangar.results import STORED_PREFIX

if TYPE_CHECKING:
    from hangar.store import ResultsStore


def archive_key(sweep: str, trial_key: str, attempt: int, run: str = "") -> str:
    """The store key of one attempt's bundle; `run` names the execution that wrote it (a
    node and a random token), so that an attempt run twice (a node that froze, thawed and
    finished after its trial was run elsewhere) never writes over the other's bundle."""
    if run:
        return f"{sweep}/{trial_key}/{attempt}/{run}/bundle.tar.gz"
    return f"{sweep}/{trial_key}/{attempt}/bundle.tar.gz"


def run_name(node: str) -> str:
    """A new execution's name in bundle keys: the node (cleaned) and a random token."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", node)[:40].strip("-.") or "node"
    return f"{cleaned}-{secrets.token_hex(4)}"


def key_in(uri: str, sweep: str) -> str:
    """The store key a bundle URI names (from its sweep's folder on)."""
    marker = f"/{sweep}/"
    if marker not in uri:
        raise EvidenceStoreError(f"{uri} is not a bundle of sweep {sweep!r}")
    return uri[uri.rindex(marker) + 1 :].split("?", 1)[0]


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

    def put_bytes(self, key: str, data: bytes) -> str:
        """Store `data` under `key`; returns its URI (through a file, unless the store
        has a shorter way)."""
        with tempfile.TemporaryDirectory(prefix="hangar-put-") as tmp:
            source = Path(tmp) / "bundle"
            source.write_bytes(data)
            return self.put(key, source)

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

    def put_bytes(self, key: str, data: bytes) -> str:
        """Write atomically, as `put` copies."""
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
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


class StoredArchives(EvidenceStore):
    """The bundles a results store keeps (``store:///<key>``): read only, written by the
    driver with the results (`hangar.store.ResultsStore.record`)."""

    def __init__(self, results: ResultsStore) -> None:
        self.results = results

    def put(self, key: str, source: Path) -> str:
        """Refused: these bundles are written with their results."""
        raise EvidenceStoreError("bundles in the results store are written with their results")

    def get(self, key: str, dest: Path) -> None:
        """Write the stored archive to `dest`."""
        data = self.results.bundle(check_key(key))
        if data is None:
            where = self.results.safe_url
            raise EvidenceStoreError(f"nothing stored at {self.uri(key)} in {where}")
        dest.write_bytes(data)

    def exists(self, key: str) -> bool:
        """Whether the store keeps a bundle under `key`."""
        return self.results.bundle(key) is not None

    def uri(self, key: str) -> str:
        """``store:///`` URI of the key."""
        return STORED_PREFIX + key


def open_store(url: str) -> EvidenceStore:
    """The store behind `url`: ``file:///dir``, a plain path, or ``s3://bucket/prefix``."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        raw = unquote(parsed.netloc + parsed.path) if parsed.scheme else url
        return FileEvidenceStore(Path(raw))
    if parsed.scheme == "s3":
        from hangar.evidence.s3 import S3EvidenceStore

        return S3EvidenceStore.from_url(url)
    raise ConfigError(f"unsupported evidence store {url!r}: use file://DIR or s3://bucket/prefix")


def split_uri(
    uri: str, endpoint: str | None = None, results: ResultsStore | None = None
) -> tuple[EvidenceStore, str]:
    """The store and key of a bundle URI (``.../<sweep>/<key>/<attempt>/bundle.tar.gz``);
    a bundle kept in a results store is read from `results`."""
    if uri.startswith(STORED_PREFIX):
        if results is None:
            raise EvidenceStoreError(
                f"{uri} is kept in the sweep's results store: read it with the sweep's "
                "store (--store, or the sweep file)"
            )
        return StoredArchives(results), uri.removeprefix(STORED_PREFIX)
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = Path(unquote(parsed.netloc + parsed.path) if parsed.scheme else uri).resolve()
        return FileEvidenceStore(path.parent), path.name
    if parsed.scheme == "s3":
        from hangar.evidence.s3 import S3EvidenceStore

        head, _, name = parsed.path.rpartition("/")
        return S3EvidenceStore(parsed.netloc, head, endpoint), name
    raise ConfigError(f"unsupported evidence URI {uri!r}")
