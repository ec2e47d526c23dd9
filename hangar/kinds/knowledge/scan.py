"""The canary scan: a suite's canaries looked for in traces, evidence archives, answers and
retrieval logs. One found voids the whole suite (``void.json``, shown by every report).

What is scanned: every file under the folders given (and the files given), inside
``.tar.gz`` / ``.tgz`` bundles too (each member), and the evidence archives of the sweeps
given (from the results store). A canary is ASCII, so it is matched as bytes, as written
and JSON-escaped alike.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from hangar.files import MANIFEST
from hangar.kinds.knowledge.custody import VOID, load_suite

#: Bytes read of one file or bundle member at most.
READ_CAP = 256 * 1024 * 1024


class Found(BaseModel):
    """A canary found."""

    suite: str
    """The suite folder it belongs to."""
    id: str
    """The question whose key it is."""
    canary: str
    """The canary."""
    where: str
    """The file (``bundle.tar.gz!trace.jsonl`` inside a bundle)."""


def suite_canaries(folder: Path) -> dict[str, tuple[str, str]]:
    """canary -> (suite folder, question id), from the suite's keys."""
    suite = load_suite(folder)
    return {k.canary: (str(folder.resolve()), k.id) for k in suite.keys.values() if k.canary}


def holdout_canaries(holdouts: Path) -> dict[str, tuple[str, str]]:
    """canary -> (suite folder, question id), from a holdouts folder's manifest."""
    data = json.loads((holdouts / MANIFEST).read_text())
    return {c["canary"]: (c["suite"], c["id"]) for c in data.get("canaries", [])}


def _blobs(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of a file, or of each member of a bundle."""
    if path.name.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(path) as tar:
                for member in tar:
                    handle = tar.extractfile(member) if member.isfile() else None
                    if handle is not None:
                        yield f"{path}!{member.name}", handle.read(READ_CAP)
            return
        except (tarfile.TarError, OSError):
            pass  # not a readable archive: scanned as bytes below
    with path.open("rb") as handle:
        yield str(path), handle.read(READ_CAP)


def _files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if p.is_file() and not p.is_symlink())
        elif path.is_file():
            yield path


def scan(paths: list[Path], canaries: dict[str, tuple[str, str]]) -> list[Found]:
    """Every canary found in `paths` (folders, files, bundles)."""
    needles = {c.encode(): c for c in canaries}
    found = []
    for path in _files(paths):
        for name, blob in _blobs(path):
            for needle, value in needles.items():
                if needle in blob:
                    suite, qid = canaries[value]
                    found.append(Found(suite=suite, id=qid, canary=value, where=name))
    return found


def sweep_bundles(sweeps: list[str], store_url: str | None, into: Path) -> list[Path]:
    """The evidence archives of `sweeps` (every attempt), fetched into `into`."""
    from hangar.evidence.stores import split_uri
    from hangar.store import ResultsStore

    store = ResultsStore(store_url)
    fetched = []
    for sweep in sweeps:
        for result in store.results(sweep, all_attempts=True):
            if not result.evidence_uri:
                continue
            evidence, key = split_uri(result.evidence_uri, results=store)
            dest = into / sweep / result.trial_key / str(result.attempt) / "bundle.tar.gz"
            dest.parent.mkdir(parents=True, exist_ok=True)
            evidence.get(key, dest)
            fetched.append(dest)
    return fetched


def scan_and_void(
    paths: list[Path],
    canaries: dict[str, tuple[str, str]],
    sweeps: Sequence[str] = (),
    store_url: str | None = None,
) -> list[Found]:
    """Scan, and void every suite one of whose canaries was found (``void.json``)."""
    with tempfile.TemporaryDirectory(prefix="hangar-scan-") as tmp:
        bundles = sweep_bundles(list(sweeps), store_url, Path(tmp)) if sweeps else []
        found = scan([*paths, *bundles], canaries)
    for suite in sorted({f.suite for f in found}):
        path = Path(suite) / VOID
        record = json.loads(path.read_text()) if path.is_file() else {"found": []}
        record.setdefault("voided", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        record["found"] += [
            {"id": f.id, "canary": f.canary, "where": f.where} for f in found if f.suite == suite
        ]
        path.write_text(json.dumps(record, indent=1) + "\n")
    return found
