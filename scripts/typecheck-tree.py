"""Build `.typecheck/hangar/`, a tree that mirrors the installed package.

Neither mypy nor import-linter knows setuptools' package-dir mapping (`hangar.sandbox`
lives in `sandbox/`), so `make check` points both at this tree instead: real folders
for the packages, links to the source files. The mapping is read from pyproject.toml, so
it is written down once.
"""

import shutil
import tomllib
from pathlib import Path

root = Path(__file__).resolve().parent.parent
mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
tree = root / ".typecheck"
shutil.rmtree(tree, ignore_errors=True)
for package, folder in sorted(mapping.items()):
    source_root = root / folder
    dest_root = tree.joinpath(*package.split("."))
    for source in sorted(source_root.rglob("*")):
        rel = source.relative_to(source_root)
        # only files of packages (a folder with __init__.py all the way up)
        if any(
            not (source_root / Path(*rel.parts[:i]) / "__init__.py").exists()
            for i in range(len(rel.parts))
        ):
            continue
        if source.is_dir() or not (source.suffix in (".py", ".pyi") or source.name == "py.typed"):
            continue
        dest = dest_root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            dest.symlink_to(source)
