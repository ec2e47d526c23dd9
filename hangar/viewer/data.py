"""What the viewer reads: the results store (through SQL, paginated) and evidence archives.

- `Catalog.sweeps`: every sweep, newest first, with its verdict mix and what it ran,
  filtered by suite, model, agent, arm and time, a page at a time.
- `ReportCache`: `hangar report`'s `Report` of a sweep, the same object the CLI prints,
  kept per sweep and rebuilt in the background when the sweep's trials change (a page
  never waits for a 20,000-trial report twice; while a sweep runs it shows the last one
  built and says it is updating). A large sweep's is built in a process of its own
  (`Builder`), so that building never holds up the pages' interpreter.
- `Catalog.trials`: one page of a sweep's trials (latest attempts), filtered.
- `Evidence`: a trial's evidence archive fetched from its store (file or S3) once, its hashes
  verified (`verify_archive`: the archive's sha256 against the result's, every file against
  the manifest), and only when that check passes extracted with the untrusted-archive
  rules (`extract_untrusted`: nothing written outside, no link out, no device, a size
  cap). An archive that fails its check is never opened; the page says so.
"""

from __future__ import annotations

import functools
import multiprocessing
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from hangar.catalog import Catalog
from hangar.errors import HangarError
from hangar.evidence.archive import ArchiveCheck, verify_archive
from hangar.evidence.stores import key_in, open_store, split_uri
from hangar.results import STORED_PREFIX, SweepRecord, TrialResult
from hangar.sandbox.archive import extract_untrusted
from hangar.scores.baseline import Snapshot, snapshot
from hangar.scores.report import (
    LeftOut,
    Report,
    Section,
    build_report,
    sweep_design,
    sweep_margin,
)
from hangar.store import ResultsStore
from hangar.trials.kind import report_sections

T = TypeVar("T")

#: The most an extracted evidence archive may hold.
BUNDLE_LIMIT = 2 * 1024**3


class CachedReport(BaseModel):
    """A report and the sweep state it was built from."""

    report: Report
    state: tuple[int, str]
    stale: bool = False
    """The sweep changed since; a newer report is being built."""


#: A sweep with at least this many recorded attempts is built by the `Builder`.
APART_FROM = 5_000


class Builder:
    """One process, spawned for the first large sweep, that builds what pages show of
    large sweeps: reading and summing 100,000 results takes seconds of an interpreter,
    and every page would wait for them if it were the pages' own."""

    def __init__(self) -> None:
        self._pool: Any = None
        self._lock = threading.Lock()

    def run(self, build: Callable[[str], T], sweep_id: str) -> T:
        """`build(sweep_id)` in the builder's process (a picklable `build`)."""
        with self._lock:
            if self._pool is None:
                self._pool = multiprocessing.get_context("spawn").Pool(1)
            pool = self._pool
        found: T = pool.apply(build, (sweep_id,))
        return found

    def close(self) -> None:
        """End the process (a build under way ends with it)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()
            pool.join()


class PerSweep(Generic[T]):
    """Something built from a sweep's trials (a report, a snapshot), kept per sweep with
    the sweep's state it was built from and built again, in the background, when the
    sweep changes: a page never waits for a 100,000-trial sweep's to be built again.
    `build` runs in a thread of the viewer; for a sweep of `APART_FROM` attempts or more,
    `apart` (the same, picklable) runs in the `builder`'s process instead."""

    def __init__(
        self,
        catalog: Catalog,
        build: Callable[[str], T],
        apart: Callable[[str], T] | None = None,
        builder: Builder | None = None,
    ) -> None:
        self.catalog = catalog
        self._build_one = build
        self._apart = apart if builder is not None else None
        self._builder = builder
        self._cache: dict[str, tuple[T, tuple[int, str]]] = {}
        self._building: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def _built_apart(self, state: tuple[int, str]) -> bool:
        """Whether a sweep in `state` is built in the builder's process (a large one)."""
        return self._apart is not None and self._builder is not None and state[0] >= APART_FROM

    def _build(self, sweep_id: str) -> None:
        try:
            state = self.catalog.state(sweep_id)
            if self._built_apart(state):
                assert self._apart is not None and self._builder is not None
                built = self._builder.run(self._apart, sweep_id)
            else:
                built = self._build_one(sweep_id)
            with self._lock:
                self._cache[sweep_id] = (built, state)
        finally:
            with self._lock:
                done = self._building.pop(sweep_id, None)
            if done is not None:
                done.set()

    def _start(self, sweep_id: str) -> threading.Event:
        with self._lock:
            event = self._building.get(sweep_id)
            if event is None:
                event = self._building[sweep_id] = threading.Event()
                threading.Thread(target=self._build, args=(sweep_id,), daemon=True).start()
            return event

    def get(self, sweep_id: str, *, wait: float | None = None) -> tuple[T, bool] | None:
        """(the value, whether the sweep changed since it was built): the cached one when
        current; the last one while a new one is built; else built now, waited for at most
        `wait` seconds (None: until built), None when not built by then."""
        state = self.catalog.state(sweep_id)
        with self._lock:
            cached = self._cache.get(sweep_id)
        if cached is not None and cached[1] == state:
            return cached[0], False
        event = self._start(sweep_id)
        if cached is not None:
            return cached[0], True
        if not event.wait(wait):
            return None
        with self._lock:
            found = self._cache.get(sweep_id)
        return None if found is None else (found[0], False)

    def patience(self, sweep_id: str, wait: float) -> float:
        """How long a page waits for the sweep's first value: `wait`, or not at all for a
        large sweep (its build takes seconds: the page says so and refreshes instead)."""
        return 0.0 if self._built_apart(self.catalog.state(sweep_id)) else wait

    def warm(self, sweep_ids: list[str]) -> None:
        """Build these sweeps' values in the background, where not current."""
        for sweep_id in sweep_ids:
            with self._lock:
                cached = self._cache.get(sweep_id)
            if cached is None or cached[1] != self.catalog.state(sweep_id):
                self._start(sweep_id)


class ReportCache(PerSweep[Report]):
    """`hangar report`'s report per sweep (`PerSweep`)."""

    def __init__(
        self, catalog: Catalog, margin: float | None = None, builder: Builder | None = None
    ) -> None:
        url = catalog.store.url
        apart = None if _in_memory(url) else functools.partial(report_of, url, margin)
        super().__init__(catalog, self._report, apart, builder)
        self.margin = margin
        """The margin (a fraction of a metric's range) of every sweep's sentences; None:
        each sweep's own, as recorded with it (`hangar report`'s, too)."""

    def _report(self, sweep_id: str) -> Report:
        return report_of(self.catalog.store, self.margin, sweep_id)

    def report(self, sweep_id: str, *, wait: float | None = None) -> CachedReport | None:
        """The sweep's report (None while its first is built, after `wait` seconds)."""
        found = self.get(sweep_id, wait=wait)
        if found is None:
            return None
        return CachedReport(report=found[0], state=self.catalog.state(sweep_id), stale=found[1])


def snapshots(catalog: Catalog, builder: Builder | None = None) -> PerSweep[Snapshot]:
    """Each sweep's snapshot (what the comparison page compares), kept per sweep."""
    url = catalog.store.url
    apart = None if _in_memory(url) else functools.partial(snapshot_of, url)
    return PerSweep(catalog, functools.partial(snapshot_of, catalog.store), apart, builder)


def _in_memory(url: str) -> bool:
    """Whether the store lives in this process only (no other process can open it)."""
    return url in ("sqlite://", "sqlite:///:memory:")


@functools.lru_cache(maxsize=4)
def _opened(url: str) -> ResultsStore:
    return ResultsStore(url, create=False)


def report_of(store: ResultsStore | str, margin: float | None, sweep_id: str) -> Report:
    """A sweep's report as `hangar report` builds it; `margin` (a fraction of a metric's
    range): every sentence's, None: the sweep's own."""
    store = _opened(store) if isinstance(store, str) else store
    config = store.sweep_config(sweep_id) or SweepRecord()
    points = margin if margin is not None else sweep_margin(config) / 100
    roles, ended = sweep_design(config)
    rows = list(store.results(sweep_id))
    report = build_report(
        sweep_id, rows, margin=points, roles=roles, sequential=ended if margin is None else ()
    )
    report.left_out = [LeftOut.model_validate(t) for t in config.left_out]
    report.sections = [
        Section(kind=kind, title=s.title, lines=s.lines) for kind, s in report_sections(rows)
    ]
    return report


def snapshot_of(store: ResultsStore | str, sweep_id: str) -> Snapshot:
    """A sweep's snapshot, named by the sweep."""
    store = _opened(store) if isinstance(store, str) else store
    return snapshot(sweep_id, sweep_id, store.results(sweep_id))


class OpenedArchive(BaseModel):
    """A trial's evidence, fetched, verified and extracted."""

    folder: Path
    """Where its files are."""
    archive: Path
    """The archive as fetched."""
    check: ArchiveCheck
    """What the hash check found."""
    files: list[str]
    """Its files (manifest order), relative."""


def _unpacked(archive: Path, check: ArchiveCheck) -> OpenedArchive:
    """The evidence archive at `archive`, extracted beside it only when its check passed: one whose
    hashes differ from what the result recorded is never opened (its files are not the
    evidence the trial was judged on, and anyone may have written them)."""
    folder = archive.parent / "files"
    folder.mkdir()
    if not check.ok:
        return OpenedArchive(folder=folder, archive=archive, check=check, files=[])
    skipped: list[str] = []
    with archive.open("rb") as handle:
        extract_untrusted(handle, folder, strip=0, limit=BUNDLE_LIMIT, skipped=skipped)
    files = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
    )
    if skipped:
        check = check.model_copy(update={"ok": False, "problems": [*check.problems, *skipped]})
    return OpenedArchive(folder=folder, archive=archive, check=check, files=files)


class Evidence:
    """Bundles fetched once per viewer process into a private temporary folder."""

    def __init__(
        self,
        endpoint: str | None = None,
        fallback: str | None = None,
        results: ResultsStore | None = None,
    ) -> None:
        """`results`: the results store, for the bundles it keeps (a pool's trials')."""
        self.endpoint = endpoint
        self.fallback = fallback
        self.results = results
        self.root = Path(tempfile.mkdtemp(prefix="hangar-view-"))
        self._lock = threading.Lock()
        self._archives: dict[str, OpenedArchive] = {}

    def archive_of(
        self, result: TrialResult, fetch: Callable[[str, Path], None] | None = None
    ) -> OpenedArchive | None:
        """The result's evidence archive, opened (None when it has none)."""
        uri = result.evidence_uri
        if not uri:
            return None
        with self._lock:
            if uri in self._archives:
                return self._archives[uri]
            slot = self.root / f"{len(self._archives):06d}"
            slot.mkdir()
            archive = slot / "bundle.tar.gz"
            if fetch is not None:
                fetch(uri, archive)
            else:
                self._fetch(result, archive)
            found = _unpacked(archive, verify_archive(archive, result.evidence_sha256))
            self._archives[uri] = found
            return found

    def _fetch(self, result: TrialResult, archive: Path) -> None:
        """From the result's own URI; else from the evidence store given (same key)."""
        assert result.evidence_uri is not None
        try:
            store, key = split_uri(result.evidence_uri, self.endpoint, self.results)
            store.get(key, archive)
        except (HangarError, OSError):
            if self.fallback is None or result.evidence_uri.startswith(STORED_PREFIX):
                raise
            other = open_store(self.fallback)
            other.get(key_in(result.evidence_uri, result.sweep), archive)

    def close(self) -> None:
        """Remove every fetched archive."""
        shutil.rmtree(self.root, ignore_errors=True)
