"""Baselines: what every kind keeps to measure later runs against.

One mechanism, two places. A baseline is a named record that is never overwritten (a
second one under a name is refused, atomically: the store's primary key, a file created
exclusively) and, when no name is given, takes the next version (``baseline-v1``,
``baseline-v2``, ...). `hangar baseline create` keeps sweep snapshots in the results
store (`StoreBaselines`); the source formats that keep theirs as files beside their data
(a rubric benchmark's ``baselines/<name>.yaml``, a knowledge gold set's
``baselines/<arm>.json``) keep them in a folder (`FolderBaselines`), in their own bytes.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from datetime import datetime
from pathlib import Path
from typing import Any

from hangar.errors import ConfigError
from hangar.store import ResultsStore

#: The name a baseline takes when none is given: the prefix and its next number.
VERSION_PREFIX = "baseline-v"


class Baselines(ABC):
    """Named, immutable, versioned records (see the module docstring)."""

    #: What they are called, for people ("baseline", "kept baseline").
    what = "baseline"
    #: What to do about a name that is taken (default: choose the next version's).
    fix = ""

    @property
    @abstractmethod
    def where(self) -> str:
        """Where they are kept, for people."""

    @abstractmethod
    def names(self) -> list[str]:
        """Every kept name (oldest first where the place knows)."""

    @abstractmethod
    def _create(self, name: str, payload: Any) -> None:
        """Keep `payload` under `name`; FileExistsError when the name is taken."""

    @abstractmethod
    def _read(self, name: str) -> Any | None:
        """The payload under `name` (None: none)."""

    def next_name(self) -> str:
        """The next version's name (``baseline-vN``)."""
        numbers = [
            int(m.group(1))
            for n in self.names()
            if (m := re.fullmatch(re.escape(VERSION_PREFIX) + r"(\d+)", n))
        ]
        return f"{VERSION_PREFIX}{max(numbers, default=0) + 1}"

    def keep(self, name: str | None, payload: Any) -> str:
        """Keep `payload` under `name` (None: the next version); an existing name is
        refused, never overwritten. Returns the name."""
        name = name or self.next_name()
        try:
            self._create(name, payload)
        except FileExistsError:
            raise ConfigError(
                f"{self.what} {name!r} exists in {self.where} and baselines are immutable "
                f"(never overwritten): {self.fix or f'choose a new name (e.g. {self.next_name()})'}"
            ) from None
        return name

    def read(self, name: str) -> Any:
        """The payload under `name`; an unknown name is told the kept ones."""
        found = self._read(name)
        if found is None:
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"no {self.what} {name!r} in {self.where} (kept: {known})")
        return found


class FolderBaselines(Baselines):
    """Baselines as files ``<folder>/<name><suffix>``, their text as the format writes it."""

    def __init__(self, folder: Path, suffix: str, what: str = "baseline", fix: str = "") -> None:
        self.folder, self.suffix, self.what, self.fix = folder, suffix, what, fix

    @property
    def where(self) -> str:
        """The folder."""
        return str(self.folder)

    def path(self, name: str) -> Path:
        """The file of `name`."""
        return self.folder / f"{name}{self.suffix}"

    def names(self) -> list[str]:
        """The files' names, sorted."""
        return sorted(p.name.removesuffix(self.suffix) for p in self.folder.glob(f"*{self.suffix}"))

    def _create(self, name: str, payload: Any) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.path(name).open("x", encoding="utf-8") as f:
            f.write(str(payload))

    def _read(self, name: str) -> str | None:
        path = self.path(name)
        return path.read_text(encoding="utf-8") if path.is_file() else None


class StoreBaselines(Baselines):
    """Baselines in the results store's ``baselines`` table (payload: a snapshot's JSON
    with its ``sweep`` and ``created_at``)."""

    def __init__(self, store: ResultsStore) -> None:
        self.store = store

    @property
    def where(self) -> str:
        """The store (its URL without a password)."""
        return self.store.safe_url

    def listed(self) -> list[tuple[str, str, datetime]]:
        """(name, sweep, created_at) of every baseline, oldest first."""
        return self.store.baselines()

    def names(self) -> list[str]:
        """Every baseline's name, oldest first."""
        return [name for name, _, _ in self.listed()]

    def _create(self, name: str, payload: Any) -> None:
        created = datetime.fromisoformat(payload["created_at"])
        self.store.keep_baseline(name, payload["sweep"], created, payload)

    def _read(self, name: str) -> Any | None:
        return self.store.baseline(name)
