"""Run import-linter's contracts (pyproject.toml) on the tree `typecheck-tree.py` builds.

The editable install imports `hangar` through setuptools' finder, which knows the
package-dir mapping but offers no folder to walk; import-linter walks folders. So the
finder is left out, and the linter runs in `.typecheck/` (it puts its working folder
first on the import path), where the mapping is laid out as folders.
"""

import os
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
os.chdir(root / ".typecheck")
sys.path.insert(0, str(root / ".typecheck"))

from importlinter.cli import lint_imports_command  # noqa: E402

sys.exit(lint_imports_command([str(root / "pyproject.toml"), *sys.argv[1:]]))
