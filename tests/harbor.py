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


_READ_JOBS = """
import json, sys
from pathlib import Path
from harbor.models.job.config import JobConfig
from harbor.models.job.lock import JobLock
from harbor.models.job.result import JobResult
from harbor.models.trajectories import Trajectory
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.viewer.scanner import JobScanner

seen = {}
for meta in sorted(Path(sys.argv[1]).glob("*/metadata.yaml")):
    scanner = JobScanner(jobs_dir=meta.parent)
    for job in scanner.list_jobs():
        folder = meta.parent / job
        JobConfig.model_validate_json((folder / "config.json").read_text())
        JobLock.model_validate_json((folder / "lock.json").read_text())
        result = JobResult.model_validate_json((folder / "result.json").read_text())
        assert scanner.get_job_result(job) is not None and scanner.get_job_config(job) is not None
        trials = {}
        for trial in scanner.list_trials(job):
            TrialConfig.model_validate_json((folder / trial / "config.json").read_text())
            r = TrialResult.model_validate_json((folder / trial / "result.json").read_text())
            assert scanner.get_trial_result(job, trial) is not None
            path = folder / trial / "agent" / "trajectory.json"
            if path.exists():
                Trajectory.model_validate_json(path.read_text())
            rewards = r.verifier_result.rewards if r.verifier_result else None
            trials[r.task_name] = {"reward": (rewards or {}).get("reward"),
                                   "trajectory": path.exists(), "digest": r.task_checksum}
        seen[meta.parent.name] = {"trials": trials, "n": result.n_total_trials}
print(json.dumps(seen))
"""


def harbor_reads_jobs(root: Path) -> dict[str, Any]:
    """Every job folder under `root` (``<agent>__<model>/<job>/``) read with Harbor's own
    models and its viewer's scanner: per folder, each task's reward, whether its
    trajectory is there, its digest, and the job's trial count."""
    run = in_harbor(_READ_JOBS, str(root))
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(json.loads(run.stdout))
