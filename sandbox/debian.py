"""Debian packages unpacked into a folder of the node's cache: the runtime of a bundle.

An agent's bundle (`hangar.sandbox.bundles`) brings the C library, the C++ runtime and,
for a Python CLI, the interpreter its programs run on, so they run in any image of the
architecture (whatever its C library, or its Python). Those files come from Debian's
packages: `runtime_root` resolves the dependency closure of a few packages in one Debian
release with apt on an apt list of hangar's own (never the system's sources, whose
release may be another), downloads them once (``apt-get download``) and unpacks them
(``dpkg-deb -x``, no maintainer script runs) into ``<cache>/runtimes/<release>-<digest>``.
The packages' names and versions and the sha256 of each file downloaded are kept beside
it (``packages.json``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from hangar.errors import ImageBuildError
from hangar.paths import cache_dir

#: Bumped when the layout of a runtime folder changes.
FORMAT = 1
_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def mirror() -> str:
    """Where Debian's packages come from: ``$HANGAR_DEBIAN_MIRROR``, else this machine's
    own mirror, else deb.debian.org."""
    from hangar.sandbox.images import debian_mirror

    return debian_mirror("bookworm")


class _Apt:
    """apt run on an apt list and state of its own under `folder` (never the system's)."""

    def __init__(self, folder: Path, release: str) -> None:
        self.folder = folder
        (folder / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (folder / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        signed = f" [signed-by={_KEYRING}]" if Path(_KEYRING).is_file() else ""
        (folder / "sources.list").write_text(f"deb{signed} {mirror()} {release} main\n")
        (folder / "status").touch()
        self.options = [
            f"-oDir::Etc::SourceList={folder / 'sources.list'}",
            "-oDir::Etc::SourceParts=/dev/null",
            "-oDir::Etc::Preferences=/dev/null",
            "-oDir::Etc::PreferencesParts=/dev/null",
            f"-oDir::State={folder}",
            f"-oDir::State::Lists={folder / 'lists'}",
            f"-oDir::State::status={folder / 'status'}",
            f"-oDir::Cache={folder}",
            f"-oDir::Cache::Archives={folder / 'archives'}",
            "-oAPT::Architecture=amd64",
            "-oDebug::NoLocking=1",
        ]

    def run(self, tool: str, *args: str, cwd: Path | None = None) -> str:
        proc = subprocess.run(
            [tool, *self.options, *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=cwd,
            timeout=1800,
        )
        if proc.returncode != 0:
            tail = " ".join(proc.stderr.strip().splitlines()[-3:])
            raise ImageBuildError(f"{tool} {args[0]} failed: {tail or proc.returncode}")
        return proc.stdout

    def closure(self, packages: tuple[str, ...]) -> list[str]:
        """`packages` and everything they depend on (not recommends), real packages only."""
        out = self.run(
            "apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
            "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages,
        )  # fmt: skip
        names = {line.strip() for line in out.splitlines() if not line.startswith(" ")}
        return sorted(n for n in names if n and not n.startswith("<"))


def runtime_root(release: str, packages: tuple[str, ...]) -> Path:
    """The folder with `packages` of Debian `release` and their dependencies unpacked
    (fetched once per node; see the module docstring). Raises `ImageBuildError` with what
    to do where apt cannot fetch them."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise ImageBuildError(
            "an agent bundle's runtime comes from Debian's packages, and this machine has no "
            "apt-get and dpkg-deb: build the bundle on a Debian machine and share it through "
            "the sweep's registry"
        )
    key = json.dumps({"release": release, "packages": sorted(packages), "format": FORMAT})
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    target = cache_dir() / "runtimes" / f"{release}-{digest}"
    if (target / "packages.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        apt = _Apt(Path(work) / "apt", release)
        apt.run("apt-get", "update")
        names = apt.closure(packages)
        debs = Path(work) / "debs"
        debs.mkdir()
        apt.run("apt-get", "download", *names, cwd=debs)
        root = Path(work) / "root"
        found = {}
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=600)
            found[deb.name] = hashlib.sha256(deb.read_bytes()).hexdigest()
        (root / "packages.json").write_text(json.dumps(found, indent=1, sort_keys=True))
        try:
            root.replace(target)  # whole or not at all, also with two builders
        except OSError:
            if not (target / "packages.json").is_file():
                raise
    return target
