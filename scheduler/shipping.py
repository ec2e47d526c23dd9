"""Scenarios shipped to the workers through Ray's object store.

A worker on another machine cannot read the driver's scenario folder. The driver packs
each scenario once per sweep (`pack_scenario`: the scenario file, every file it
references, and a repository given as a local path, a directory as a git bundle of all
its refs) and puts the archive into the object store; every trial task gets it as an
argument, so Ray moves it to each node once, and the worker unpacks it once per node
(`unpack_scenario`, under the node's cache, keyed by the scenario's digest). Relative
paths keep their meaning because the archive keeps the files' layout relative to their
common folder. A repository given by URL is not shipped: workers fetch it themselves.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from hangar.errors import ConfigError
from hangar.scenario import LoadedScenario, referenced_files

#: Name of the bundle that stands in for a repository given as a local directory.
REPOSITORY_BUNDLE = ".hangar-repository.bundle"
#: Holds the scenario file's path inside the package.
_WHERE = ".hangar-scenario"
_COMPLETE = ".hangar-complete"


def _local_repository(loaded: LoadedScenario) -> Path | None:
    url = loaded.repository_url()
    if "://" in url and not url.startswith("file://"):
        return None
    if url.startswith("git@"):
        return None
    return Path(url.removeprefix("file://"))


def pack_scenario(loaded: LoadedScenario) -> bytes:
    """A tar.gz of everything a worker needs to run `loaded` without the driver's files.

    Referenced files that do not exist are left out (the worker's admission names them).
    """
    paths = [loaded.path] + [loaded.local(rel) for _, rel in referenced_files(loaded.scenario)]
    repository = _local_repository(loaded)
    if repository is not None and repository.is_file():
        paths.append(repository.resolve())
    present = [p for p in paths if p.exists()]
    root = Path(os.path.commonpath([str(p.parent) for p in present]))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in dict.fromkeys(present):
            tar.add(path, arcname=path.relative_to(root).as_posix())
        where = loaded.path.relative_to(root).as_posix().encode()
        info = tarfile.TarInfo(_WHERE)
        info.size = len(where)
        tar.addfile(info, io.BytesIO(where))
        if repository is not None and repository.is_dir():
            with tempfile.TemporaryDirectory() as tmp:
                bundle = Path(tmp) / "repo.bundle"
                proc = subprocess.run(
                    ["git", "-C", str(repository), "bundle", "create", str(bundle), "--all"],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if proc.returncode != 0:
                    raise ConfigError(
                        f"{loaded.path}: cannot bundle repository {repository} to ship it "
                        f"to the workers: {proc.stderr.strip()}"
                    )
                tar.add(bundle, arcname=REPOSITORY_BUNDLE)
    return buf.getvalue()


def unpack_scenario(loaded: LoadedScenario, package: bytes, cache: Path) -> LoadedScenario:
    """`loaded` as read from its `package`, unpacked once under ``cache/scenarios``."""
    target = cache / "scenarios" / loaded.digest
    if not (target / _COMPLETE).exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".unpacking-"))
        with tarfile.open(fileobj=io.BytesIO(package)) as tar:
            tar.extractall(staging, filter="data")
        (staging / _COMPLETE).touch()
        try:
            staging.rename(target)
        except OSError:  # another worker of this node got there first
            shutil.rmtree(staging, ignore_errors=True)
    scenario_file = target / (target / _WHERE).read_text()
    scenario = loaded.scenario
    if (target / REPOSITORY_BUNDLE).exists():
        bundle = str(target / REPOSITORY_BUNDLE)
        scenario = scenario.model_copy(update={"repository": bundle})
    return loaded.model_copy(update={"path": scenario_file, "scenario": scenario})
