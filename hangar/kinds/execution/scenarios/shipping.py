"""A git scenario shipped to the workers (`hangar.kinds.execution.shipping`): its file
and every file it references, packed with their layout, and its local repository."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from hangar.kinds.execution.scenarios.scenario import LoadedScenario, referenced_files
from hangar.kinds.execution.shipping import Data, store_bundle, unpack

#: Holds the scenario file's path inside the package.
WHERE = ".hangar-scenario"


def local_repository(loaded: LoadedScenario) -> Path | None:
    """The repository of `loaded` when it is a local path (a bundle or a directory)."""
    url = loaded.repository_url()
    if url.startswith("git@") or ("://" in url and not url.startswith("file://")):
        return None
    return Path(url.removeprefix("file://")).resolve()


def pack_scenario(loaded: LoadedScenario) -> bytes:
    """A tar.gz of the scenario file and every file it references (not its repository,
    which `pack_repository` ships once for all the scenarios that share it).

    Referenced files that do not exist are left out (the worker's admission names them).
    """
    paths = [loaded.path] + [loaded.local(rel) for _, rel in referenced_files(loaded.scenario)]
    present = [p for p in paths if p.exists()]
    root = Path(os.path.commonpath([str(p.parent) for p in present]))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in dict.fromkeys(present):
            tar.add(path, arcname=path.relative_to(root).as_posix())
        where = loaded.path.relative_to(root).as_posix().encode()
        info = tarfile.TarInfo(WHERE)
        info.size = len(where)
        tar.addfile(info, io.BytesIO(where))
    return buf.getvalue()


def unpack_scenario(
    loaded: LoadedScenario,
    package: Data,
    cache: Path,
    repository: tuple[str, Data] | None = None,
) -> LoadedScenario:
    """`loaded` as read from its `package`, unpacked once per node under
    ``cache/scenarios``; with `repository` ((sha256, bundle) from `pack_repository`),
    the repository is the bundle, written once per node under ``cache/repositories``."""
    bundle = store_bundle(*repository, cache) if repository is not None else None
    return loaded.unpacked(unpack(loaded.digest, package, cache), bundle)
