"""Execution tasks shipped to the workers through the scheduler's object store.

A worker on another machine cannot read the driver's task folder. The driver packs each
task once per sweep (`ExecutionTask.package`: a scenario file and every file it
references, or an image task's folder) and each local repository once
(`pack_repository`: a bundle file as it is, a directory as a git bundle of all its
refs, however many scenarios share it), and puts them into the object store; every trial
task gets their references wrapped in a list (`Shipment`), so Ray does not resolve them
for each task (that cost a plain task's worth of CPU per trial: `benchmarks/scale.py`);
the worker fetches one only when its node's cache lacks it, so each moves to a node
once, and unpacks it once per node (`unpack`, under the node's cache, keyed by the
task's digest and the bundle's sha256). Relative paths keep their meaning because the
archive keeps the files' layout relative to their common folder. A repository given by
URL is not shipped: workers fetch it themselves.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hangar.errors import ConfigError
from hangar.kinds.execution.task import execution_task
from hangar.sandbox.archive import extract_untrusted
from hangar.trials.kind import Fetch, Put
from hangar.trials.spec import Task, TrialSpec

_COMPLETE = ".hangar-complete"


def pack_repository(path: Path) -> tuple[str, bytes]:
    """(sha256, bytes) of the local repository at `path` as one git bundle: a bundle file
    as it is, a directory as a bundle of all its refs."""
    if path.is_file():
        data = path.read_bytes()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            bundle = Path(tmp) / "repo.bundle"
            proc = subprocess.run(
                ["git", "-C", str(path), "bundle", "create", str(bundle), "--all"],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise ConfigError(
                    f"cannot bundle repository {path} to ship it to the workers: "
                    f"{proc.stderr.strip()}"
                )
            data = bundle.read_bytes()
    return hashlib.sha256(data).hexdigest(), data


Data = bytes | Callable[[], bytes]
"""Bytes, or a function that fetches them (called only when the node lacks them)."""


class Shipper:
    """Driver side: each scenario's package put once (by digest), each local repository
    once (by path), however many trials share them."""

    def __init__(self, put: Put) -> None:
        self._put = put
        self._packages: dict[str, Any] = {}
        self._repositories: dict[Path, tuple[str, Any]] = {}

    def __call__(self, task: Task) -> tuple[Any, str | None, Any]:
        """(package, repository sha256, repository bundle) of a task's trial."""
        mine = execution_task(task)
        digest = mine.digest
        if digest not in self._packages:
            self._packages[digest] = self._put(mine.package())
        repo = mine.repository_to_ship()
        if repo is None or not repo.exists():
            return self._packages[digest], None, None
        if repo not in self._repositories:
            sha, data = pack_repository(repo)
            self._repositories[repo] = (sha, self._put(data))
        key, bundle = self._repositories[repo]
        return self._packages[digest], key, bundle


def localise(spec: TrialSpec, shipped: Any, fetch: Fetch, cache: Path) -> TrialSpec:
    """Worker side: `spec` with its scenario unpacked from what the driver shipped."""
    if shipped is None:
        return spec
    package, key, repository = shipped
    task = execution_task(spec.task)
    folder = unpack(task.digest, fetch(package), cache)
    bundle = store_bundle(key, fetch(repository), cache) if key and repository is not None else None
    return spec.model_copy(update={"task": task.unpacked(folder, bundle)})


def pack_folder(folder: Path) -> bytes:
    """A tar.gz of `folder` (an image task's folder), the folder itself its top entry."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return buf.getvalue()


def unpack(digest: str, package: Data, cache: Path) -> Path:
    """The package unpacked once per node, under ``cache/scenarios/<digest>``."""
    target = cache / "scenarios" / digest
    if not (target / _COMPLETE).exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".unpacking-"))
        extract_untrusted(io.BytesIO(_bytes(package)), staging, strip=0, limit=1 << 40)
        (staging / _COMPLETE).touch()
        try:
            staging.rename(target)
        except OSError:  # another worker of this node got there first
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _bytes(data: Data) -> bytes:
    return data() if callable(data) else data


def store_bundle(key: str, data: Data, cache: Path) -> Path:
    """The shipped repository bundle of sha256 `key`, written once per node under
    ``cache/repositories`` (fetched only when the node lacks it)."""
    bundle = cache / "repositories" / f"{key}.bundle"
    if not bundle.exists():
        bundle.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=bundle.parent, delete=False) as part:
            part.write(_bytes(data))
        Path(part.name).replace(bundle)  # whole or not at all
    return bundle
