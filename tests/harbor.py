"""Harbor's own package, for the tests that read what hangar writes in Harbor's formats
with Harbor's code (Python >= 3.12 in ``.venv-harbor``: `make harbor`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]


def harbor_python() -> Path:
    """The interpreter of ``.venv-harbor`` (skips, or fails under HANGAR_REQUIRE, without)."""
    python = ROOT / ".venv-harbor" / "bin" / "python"
    if not python.is_file():
        skip_or_fail("harbor", "no .venv-harbor with Harbor's package (`make harbor`)")
    return python


def in_harbor(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` with Harbor's package, `args` as its sys.argv[1:]."""
    return subprocess.run(
        [str(harbor_python()), "-c", code, *args], capture_output=True, text=True, timeout=300
    )


def harbor_validates(doc: dict[str, Any], tmp_path: Path) -> str:
    """Harbor's `Trajectory` model read `doc`: the validation error, or '' when valid."""
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(doc))
    check = (
        "import json, sys\n"
        "from harbor.models.trajectories import Trajectory\n"
        "t = Trajectory.model_validate(json.load(open(sys.argv[1])))\n"
        "assert t.schema_version == 'ATIF-v1.7'\n"
    )
    run = in_harbor(check, str(path))
    return run.stderr.strip().splitlines()[-1] if run.returncode else ""


def harbor_digest(folder: Path) -> str:
    """Harbor's own content digest of the task folder (its `Packager`)."""
    run = in_harbor(
        "import sys\nfrom pathlib import Path\nfrom harbor.publisher.packager import Packager\n"
        "print('sha256:' + Packager.compute_content_hash(Path(sys.argv[1]))[0])\n",
        str(folder),
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()
