"""Build `.typecheck/hangar/`, a tree of symlinks that mirrors the installed package.

mypy knows nothing of setuptools' package-dir mapping (`hangar.sandbox` lives in
`sandbox/`), so `make check` points mypy at this tree instead. The mapping is read
from pyproject.toml, so it is written down once.
"""

import shutil
import tomllib
from pathlib import Path

root = Path(__file__).resolve().parent.parent
mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
tree = root / ".typecheck"
shutil.rmtree(tree, ignore_errors=True)
for package, folder in sorted(mapping.items()):
    dest = tree.joinpath(*package.split("."))
    dest.mkdir(parents=True, exist_ok=True)
    for source in (root / folder).iterdir():
        nested = source.is_dir() and (source / "__init__.py").exists()
        if nested or source.suffix in (".py", ".pyi") or source.name == "py.typed":
            (dest / source.name).symlink_to(source)
