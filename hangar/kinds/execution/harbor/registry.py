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
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, ValidationError

from hangar._version import __version__
from hangar.errors import ConfigError, SandboxError, WorkspaceError
from hangar.kinds.execution.harbor.digest import content_digest
from hangar.kinds.execution.harbor.tasks import is_task_dir
from hangar.paths import cache_dir
from hangar.sandbox.archive import copy_untrusted_tree, extract_untrusted
from hangar.sandbox.workspace import MirrorCache
from hangar.validation import check_name, validation_message

REGISTRY_FILE = "registry.json"
LOCK_FILE = "lock.json"
#: ``registry:`` references in a sweep's ``scenarios:``.
SCHEME = "registry"
_REF = re.compile(r"^(?P<name>[A-Za-z0-9][\w.\-/]*)@(?P<version>[\w.\-+]+)$")


def _dataset_name(value: str) -> str:
    """A dataset's name: names joined by '/' (``org/bench``), none of them '.' or '..'."""
    if len(value) > 200 or not all(_NAME.match(p) for p in value.split("/")):
        raise ValueError(
            f"expected names (letters, digits, '_', '.', '-') joined by '/', got {value!r}"
        )
    return value


def _version(value: str) -> str:
    if len(value) > 100 or not _VERSION.match(value):
        raise ValueError(f"expected letters, digits, '_', '.', '-', '+', got {value!r}")
    return value


def _task_path(value: str) -> str:
    """A folder inside the repository (or beside the registry): relative, no '..'."""
    parts = value.strip("/").split("/")
    if value.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in value:
        raise ValueError(f"expected a relative path with no '.' or '..' part, got {value!r}")
    return value


def _git_url(value: str) -> str:
    """A repository by a transport git fetches with (never an option, never ext::)."""
    if not _GIT_URL.match(value) or any(c in value for c in "\n\0"):
        raise ValueError(
            "expected an https://, http://, ssh://, git:// or file:// URL, user@host:path "
            "or an absolute path, "
            f"got {value!r}"
        )
    return value


def _commit(value: str) -> str:
    """A commit id, or a branch or tag git resolves (never an option: no leading '-')."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}", value) or ".." in value:
        raise ValueError(f"expected a commit id, a branch or a tag, got {value!r}")
    return value


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_GIT_URL = re.compile(
    r"^((https?|ssh|git|file)://\S+|[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+:[^\s-]\S*|/\S*)$"
)


class RegistryTask(BaseModel):
    """One task of a registry dataset, as Harbor's ``registry.json`` gives it. Every field
    names a place hangar writes to or fetches from, so each is checked like an id: the
    name is one folder name, the path stays inside its repository, the URL is a git
    transport (never an option or ``ext::``), the commit an id."""

    name: Annotated[str, AfterValidator(check_name), Field(max_length=128)]
    git_url: Annotated[str, AfterValidator(_git_url)] | None = None
    git_commit_id: Annotated[str, AfterValidator(_commit)] | None = None
    path: Annotated[str, AfterValidator(_task_path)]


class Dataset(BaseModel):
    """One dataset version of a registry."""

    name: Annotated[str, AfterValidator(_dataset_name)]
    version: Annotated[str, AfterValidator(_version)]
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
    if match is None or any(p in (".", "..") for p in match["name"].split("/")):
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
                named = f" {row['name']!r}" if isinstance(row, dict) and "name" in row else ""
                where = f"{source} ({REGISTRY_FILE}, dataset {i + 1}{named})"
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
    if task.git_url is None:  # a folder beside the registry file, never through a link out
        source = (base / task.path).resolve()
        if not source.is_relative_to(base.resolve()):
            raise ConfigError(f"task {task.name}: its path {task.path} leads outside {base}")
        if not is_task_dir(source):
            raise ConfigError(f"task {task.name}: {source} is not a task folder (no task.toml)")
        try:
            copy_untrusted_tree(source, into / "task", limit=1 << 34)
        except SandboxError as exc:
            raise ConfigError(f"task {task.name}: {exc}") from None
        return None, into / "task"
    try:
        commit = mirrors.resolve(task.git_url, task.git_commit_id)
        with (into / "task.tar").open("wb") as out:
            mirrors.archive(task.git_url, commit, task.path.strip("/"), out)
    except WorkspaceError as exc:
        raise ConfigError(f"task {task.name}: {exc}") from None
    try:
        with (into / "task.tar").open("rb") as handle:
            extract_untrusted(handle, into / "tree", strip=0, limit=1 << 34)
    except SandboxError as exc:
        raise ConfigError(f"task {task.name}: {task.git_url}: {exc}") from None
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
