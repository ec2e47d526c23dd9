"""Harbor's registry datasets, pulled into the cache and pinned by a lock.

A registry is Harbor's ``registry.json``: a list of datasets, each a name, a version and
its tasks, every task a git URL, a commit and the task folder's path in that repository
(a task with no URL is a folder beside the registry file). It is read from a folder
holding ``registry.json``, the file itself, or a git repository (its default branch).

``hangar dataset pull NAME@VERSION`` fetches each task at its commit (through the node's
repository mirrors), copies its folder into ``<cache>/datasets/NAME@VERSION/``, computes
its content digest as Harbor does (`harbor_digest`) and writes ``lock.json`` there: the
registry, each task's URL, commit, path and digest, and hangar's version. A sweep names
the dataset as ``registry:NAME@VERSION`` in ``scenarios:``; it runs only what the lock
pins (every task's digest is checked again when the sweep loads: a folder changed since
the pull is refused until it is pulled again) and records the lock with its results.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from hangar._version import __version__
from hangar.errors import ConfigError, WorkspaceError
from hangar.kinds.execution.harbor import is_task_dir
from hangar.kinds.execution.harbor_digest import content_digest
from hangar.paths import cache_dir
from hangar.sandbox.archive import extract_untrusted
from hangar.sandbox.workspace import MirrorCache
from hangar.validation import validation_message

REGISTRY_FILE = "registry.json"
LOCK_FILE = "lock.json"
#: ``registry:`` references in a sweep's ``scenarios:``.
SCHEME = "registry"
_REF = re.compile(r"^(?P<name>[A-Za-z0-9][\w.\-/]*)@(?P<version>[\w.\-+]+)$")


class RegistryTask(BaseModel):
    """One task of a registry dataset, as Harbor's ``registry.json`` gives it."""

    name: str
    git_url: str | None = None
    git_commit_id: str | None = None
    path: str


class Dataset(BaseModel):
    """One dataset version of a registry."""

    name: str
    version: str
    description: str = ""
    tasks: list[RegistryTask]
    metrics: list[dict[str, Any]] = Field(default_factory=list)


class LockedTask(BaseModel):
    """A task as the pull found it."""

    name: str
    git_url: str | None
    git_commit_id: str | None
    path: str
    digest: str
    """Harbor's content digest of the task folder (``sha256:...``)."""


class DatasetLock(BaseModel):
    """What a pull fetched: the dataset's tasks pinned by commit and digest."""

    schema_version: int = 1
    dataset: str
    version: str
    registry: str
    hangar_version: str = __version__
    pulled_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    tasks: list[LockedTask]

    @property
    def ref(self) -> str:
        return f"{self.dataset}@{self.version}"


def parse_ref(ref: str) -> tuple[str, str]:
    """(name, version) of ``NAME@VERSION``; errors say the form."""
    match = _REF.match(ref.strip())
    if match is None:
        raise ConfigError(
            f"{ref!r} is not a dataset reference: give NAME@VERSION (terminal-bench@2.0)"
        )
    return match["name"], match["version"]


def dataset_folder(name: str, version: str, cache: Path | None = None) -> Path:
    """Where a pulled dataset lives."""
    return (cache or cache_dir()) / "datasets" / f"{name.replace('/', '__')}@{version}"


def _registry_file(source: str, mirrors: MirrorCache) -> tuple[Path, Path | None]:
    """(the registry file, a temporary folder to remove afterwards) of `source`."""
    local = Path(source).expanduser()
    if local.is_file():
        return local, None
    if local.is_dir() and (local / REGISTRY_FILE).is_file():
        return local / REGISTRY_FILE, None
    if local.is_dir() and not (local / ".git").exists():
        raise ConfigError(f"{source}: no {REGISTRY_FILE} in this folder")
    temp = Path(tempfile.mkdtemp(prefix="hangar-registry-"))
    try:
        commit = mirrors.resolve(source, None)
        with (temp / "r.tar").open("wb") as out:
            mirrors.archive(source, commit, REGISTRY_FILE, out)
        with (temp / "r.tar").open("rb") as handle:
            extract_untrusted(handle, temp / "files", strip=0, limit=1 << 30)
    except WorkspaceError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        raise ConfigError(f"registry {source}: {exc}") from None
    return temp / "files" / REGISTRY_FILE, temp


def read_registry(source: str, mirrors: MirrorCache | None = None) -> list[Dataset]:
    """The datasets of the registry at `source` (a folder, a file or a git repository)."""
    mirrors = mirrors or MirrorCache(cache_dir() / "mirrors")
    path, temp = _registry_file(source, mirrors)
    try:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{source}: {REGISTRY_FILE} is not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise ConfigError(f"{source}: {REGISTRY_FILE} must be a list of datasets")
        datasets = []
        for i, row in enumerate(data):
            try:
                datasets.append(Dataset.model_validate(row))
            except ValidationError as exc:
                where = f"{source} ({REGISTRY_FILE}, dataset {i + 1})"
                raise ConfigError(validation_message(where, "registry dataset", exc)) from None
        return datasets
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


def find(datasets: list[Dataset], name: str, version: str, source: str) -> Dataset:
    """The dataset `name` at `version`; errors list what the registry has."""
    for d in datasets:
        if d.name == name and d.version == version:
            return d
    versions = sorted(d.version for d in datasets if d.name == name)
    if versions:
        have = ", ".join(versions)
        raise ConfigError(f"{source} has no version {version} of {name}: it has {have}")
    names = sorted({d.name for d in datasets})
    raise ConfigError(f"{source} has no dataset {name} (it has {', '.join(names) or 'none'})")


def _fetch(
    task: RegistryTask, base: Path, mirrors: MirrorCache, into: Path
) -> tuple[str | None, Path]:
    """Copy the task's folder into `into`; (the commit it was taken at, the folder)."""
    into.mkdir(parents=True)
    if task.git_url is None:  # a folder beside the registry file
        source = (base / task.path).resolve()
        if not is_task_dir(source):
            raise ConfigError(f"task {task.name}: {source} is not a task folder (no task.toml)")
        shutil.copytree(source, into / "task", symlinks=True)
        return None, into / "task"
    try:
        commit = mirrors.resolve(task.git_url, task.git_commit_id)
        with (into / "task.tar").open("wb") as out:
            mirrors.archive(task.git_url, commit, task.path.strip("/"), out)
    except WorkspaceError as exc:
        raise ConfigError(f"task {task.name}: {exc}") from None
    with (into / "task.tar").open("rb") as handle:
        extract_untrusted(handle, into / "tree", strip=0, limit=1 << 34)
    folder = into / "tree" / task.path.strip("/")
    if not is_task_dir(folder):
        raise ConfigError(f"task {task.name}: {task.git_url} has no task.toml in {task.path}")
    return commit, folder


def pull(ref: str, source: str, cache: Path | None = None) -> tuple[DatasetLock, list[str]]:
    """Fetch dataset `ref` (NAME@VERSION) of the registry at `source` into the cache and
    write its lock. Returns the lock and, for a dataset pulled before, the tasks whose
    digest changed since (a changed task is a new version of it: its trials are new)."""
    name, version = parse_ref(ref)
    mirrors = MirrorCache((cache or cache_dir()) / "mirrors")
    dataset = find(read_registry(source, mirrors), name, version, source)
    local = Path(source).expanduser()
    base = local.parent if local.is_file() else local
    target = dataset_folder(name, version, cache)
    before = read_lock(target)
    staging = Path(tempfile.mkdtemp(prefix="pull-", dir=_ensure(target.parent)))
    try:
        locked = []
        for i, task in enumerate(dataset.tasks):
            commit, folder = _fetch(task, base, mirrors, staging / "fetch" / str(i))
            dest = staging / "tasks" / task.name
            if dest.exists():
                raise ConfigError(f"{source}: {ref} names the task {task.name} twice")
            shutil.move(folder, dest)
            locked.append(
                LockedTask(
                    name=task.name,
                    git_url=task.git_url,
                    git_commit_id=commit,
                    path=task.path,
                    digest=content_digest(dest),
                )
            )
        lock = DatasetLock(dataset=name, version=version, registry=source, tasks=locked)
        shutil.rmtree(staging / "fetch")
        (staging / LOCK_FILE).write_text(lock.model_dump_json(indent=1) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    old = {t.name: t.digest for t in before.tasks} if before else {}
    changed = [t.name for t in lock.tasks if t.name in old and old[t.name] != t.digest]
    return lock, changed


def _ensure(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def read_lock(folder: Path) -> DatasetLock | None:
    """The lock of a pulled dataset folder (None: never pulled)."""
    path = folder / LOCK_FILE
    if not path.is_file():
        return None
    try:
        return DatasetLock.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise ConfigError(validation_message(str(path), "dataset lock", exc)) from None


def locate(ref: str, cache: Path | None = None) -> tuple[Path, DatasetLock]:
    """The tasks folder of the pulled dataset `ref` and its lock, every task checked
    against the lock's digest (refused, with the command that mends it, when one is
    missing or changed)."""
    name, version = parse_ref(ref)
    folder = dataset_folder(name, version, cache)
    lock = read_lock(folder)
    pull_it = f"`hangar dataset pull {ref} --registry REGISTRY`"
    if lock is None:
        raise ConfigError(f"{SCHEME}:{ref} is not pulled on this machine: {pull_it} fetches it")
    for task in lock.tasks:
        path = folder / "tasks" / task.name
        if not is_task_dir(path):
            raise ConfigError(f"{SCHEME}:{ref}: task {task.name} is missing from {path}: {pull_it}")
        if (found := content_digest(path)) != task.digest:
            raise ConfigError(
                f"{SCHEME}:{ref}: task {task.name} changed since it was pulled (digest "
                f"{found[:19]}, the lock says {task.digest[:19]}): a changed task is a new "
                f"version; {pull_it} again to run what the registry pins"
            )
    return folder / "tasks", lock
