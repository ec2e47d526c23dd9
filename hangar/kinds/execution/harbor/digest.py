"""A Harbor task folder's content digest, computed as Harbor computes it.

Harbor pins a task by the sha256 of its publishable files (a job's ``lock.json``, the
registry's packages, the leaderboard's checks): ``task.toml``, ``instruction.md``,
``README.md`` and ``trajectory.json`` when present, and every file under
``environment/``, ``tests/``, ``solution/`` and ``steps/`` (a symlinked folder is not
entered), less what the task's ``.gitignore`` ignores (without one: caches, editor
swap files) and what a ``.harborignore`` in the tests' or solution's folders excludes.
The digest hashes, in path order, one line per file: ``<path>\\0<sha256 of its
bytes>\\n``. The tests check it against Harbor's own ``Packager``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pathspec

SINGLE_FILES = ("task.toml", "instruction.md", "README.md", "trajectory.json")
FOLDERS = ("environment", "tests", "solution", "steps")
DEFAULT_IGNORES = ("__pycache__/", "*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")
HARBORIGNORE = ".harborignore"
# where a .harborignore counts: the tests' and the solution's folders, a step's too
_IGNORE_SCOPES = pathspec.GitIgnoreSpec.from_lines(
    ("/tests/", "/solution/", "/steps/*/tests/", "/steps/*/solution/")
)


def _in_scope(relative: str) -> bool:
    return _IGNORE_SCOPES.match_file(relative)


class _Walk:
    """The files of one task folder, with the .harborignore rules of the folders above."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: list[Path] = []

    def rules(self, folder: Path) -> pathspec.GitIgnoreSpec | None:
        relative = folder.relative_to(self.root).as_posix() + "/"
        if not _in_scope(relative):
            return None
        ignore = folder / HARBORIGNORE
        return pathspec.GitIgnoreSpec.from_lines(
            ignore.read_text().splitlines() if ignore.is_file() else []
        )

    def excluded(self, path: Path, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> bool:
        if path.name == HARBORIGNORE and _in_scope(path.relative_to(self.root).as_posix()):
            return True
        suffix = "/" if path.is_dir() and not path.is_symlink() else ""
        if not _in_scope(path.relative_to(self.root).as_posix() + suffix):
            return False
        verdict = False
        for folder, spec in specs:
            match = spec.check_file(path.relative_to(folder).as_posix() + suffix)
            if match.include is not None:
                verdict = match.include
        return verdict

    def visit(self, folder: Path, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> None:
        own = self.rules(folder)
        specs = [*specs, (folder, own)] if own is not None else specs
        for path in sorted(folder.iterdir()):
            if self.excluded(path, specs):
                continue
            if path.is_dir() and not path.is_symlink():
                self.visit(path, specs)
            elif path.is_file():
                self.files.append(path)


def task_files(root: Path) -> list[Path]:
    """The files of the task folder `root` that its digest covers, in digest order."""
    root = root.resolve()
    walk = _Walk(root)
    walk.files = [root / name for name in SINGLE_FILES if (root / name).is_file()]
    for name in FOLDERS:
        if (root / name).is_dir() and not (root / name).is_symlink():
            walk.visit(root / name, [])
    gitignore = root / ".gitignore"
    ignores = gitignore.read_text().splitlines() if gitignore.is_file() else DEFAULT_IGNORES
    spec = pathspec.PathSpec.from_lines("gitignore", ignores)
    kept = [f for f in walk.files if not spec.match_file(f.relative_to(root).as_posix())]
    return sorted(kept, key=lambda f: f.relative_to(root).as_posix())


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def content_digest(root: Path) -> str:
    """Harbor's content digest of the task folder `root`: ``sha256:<64 hex>``."""
    root = root.resolve()
    outer = hashlib.sha256()
    for f in task_files(root):
        outer.update(f"{f.relative_to(root).as_posix()}\0{file_sha256(f)}\n".encode())
    return f"sha256:{outer.hexdigest()}"
