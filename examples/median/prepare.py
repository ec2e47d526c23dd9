"""Prepare script of the statkit-median scenario (pinned in scenario.yaml).

Runs on the host on the fresh workspace, before the sandbox exists: checks the
workspace is the statkit layout it expects and records its Python files.
"""

import json
import sys
from pathlib import Path

request = json.loads(Path(sys.argv[1]).read_text())
workspace, artifacts = Path(request["workspace"]), Path(request["artifacts"])
if not (workspace / "statkit" / "stats.py").is_file():
    sys.exit("statkit/stats.py is missing: wrong repository or revision")
files = sorted(p.relative_to(workspace).as_posix() for p in workspace.rglob("*.py"))
(artifacts / "prepare" / "python-files.json").write_text(json.dumps(files, indent=1))
print(f"workspace ok: {len(files)} Python files")
