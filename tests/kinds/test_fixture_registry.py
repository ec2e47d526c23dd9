"""Fixture registries in the skill-evals format: `hangar run --fixtures FILE` binds each
case id's scenario definition to a local repository, revision, task text and host scripts
pinned by absolute path and digest; unknown and duplicate case ids fail admission; a
missing fixture is blocked_setup with no model call."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hangar.errors import AdmissionError
from hangar.files import file_sha256
from hangar.scheduler.sweep import load_sweep
from hangar.store import ResultsStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HANGAR = str(Path(sys.executable).parent / "hangar")
REVISION = "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"


def setup(tmp_path: Path) -> tuple[Path, Path, list[dict[str, Any]]]:
    """A sweep of two definitions (the example's, without what a fixture binds, and one
    that has no fixture) and a registry elsewhere with absolute paths."""
    suite = tmp_path / "suite"
    shutil.copytree(EXAMPLES / "median", suite / "median")
    private = tmp_path / "private"  # the operator's, outside the suite
    shutil.copytree(EXAMPLES / "repos", private / "repos")
    for script in ("prepare.py", "verify.py"):
        shutil.move(suite / "median" / script, private / script)
    definition = yaml.safe_load((suite / "median" / "scenario.yaml").read_text())
    for bound in ("repository", "revision", "context", "prepare"):
        del definition[bound]
    del definition["verifier"]["host"]
    (suite / "median" / "scenario.yaml").write_text(yaml.safe_dump(definition))
    unbound = {**definition, "id": "tdd:unbound-case"}
    (suite / "unbound.yaml").write_text(yaml.safe_dump(unbound))
    entries = [
        {
            "caseId": "statkit-median-even",
            "repository": str(private / "repos" / "statkit.bundle"),
            "revision": REVISION,
            "context": "Fix median() in statkit/stats.py for even-length lists.",
            "prepare": {
                "file": str(private / "prepare.py"),
                "sha256": file_sha256(private / "prepare.py"),
            },
            "verifier": {
                "file": str(private / "verify.py"),
                "sha256": file_sha256(private / "verify.py"),
            },
        }
    ]
    sweep = tmp_path / "sweep.yaml"
    shutil.copy2(EXAMPLES / "agents.yaml", tmp_path / "agents.yaml")
    sweep.write_text(
        yaml.safe_dump(
            {
                "id": "fixtures",
                "scenarios": ["suite/median/scenario.yaml", "suite/unbound.yaml"],
                "agents_file": "agents.yaml",
                "models": ["none"],
                "arms": {"control": []},
                "store": f"sqlite:///{tmp_path}/r.db",
                "evidence": (tmp_path / "ev").as_uri(),
            }
        )
    )
    return sweep, private / "fixtures.json", entries


def hangar(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HANGAR, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def write(path: Path, entries: Any) -> Path:
    path.write_text(json.dumps(entries, indent=2))
    return path


def test_a_registry_binds_the_case_ids_scenario(tmp_path: Path) -> None:
    sweep, registry, entries = setup(tmp_path)
    loaded = load_sweep(sweep, {"fixtures": str(write(registry, entries))})
    (task,) = loaded.of_kind("execution")
    s = task.scenario  # type: ignore[attr-defined]
    assert s.repository == entries[0]["repository"] and s.revision == REVISION
    assert s.context.startswith("Fix median()")
    assert s.verifier.host.file == entries[0]["verifier"]["file"]
    assert s.verifier.checklist  # the definition's own, kept
    # The case without a fixture: its trials are blocked_setup rows, with the reason.
    (missing,) = loaded.unloadable
    assert missing.scenario_id == "tdd:unbound-case"
    assert "no fixture for case id 'tdd:unbound-case'" in missing.error
    blocked = list(loaded.blocked_results())
    assert len(blocked) == 2 and {r.verdict.value for r in blocked} == {"blocked_setup"}
    # Another revision is another scenario version; the sweep's `fixtures:` is the same.
    data = yaml.safe_load(sweep.read_text())
    data["fixtures"] = "private/fixtures.json"
    sweep.write_text(yaml.safe_dump(data))
    assert load_sweep(sweep).of_kind("execution")[0].digest == task.digest
    entries[0]["revision"] = "0" * 40
    write(registry, entries)
    assert load_sweep(sweep).of_kind("execution")[0].digest != task.digest
    # Without a registry, a definition is blocked_setup, saying where its fixture goes.
    del data["fixtures"]
    sweep.write_text(yaml.safe_dump(data))
    errors = [u.error for u in load_sweep(sweep).unloadable]
    assert len(errors) == 2 and all("--fixtures FILE" in e for e in errors)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda e: [*e, dict(e[0])], "entry 1: duplicate case id 'statkit-median-even'"),
        (lambda e: [*e, {**e[0], "caseId": "no-such-case"}], "unknown case id(s) 'no-such-case'"),
        (
            lambda e: [{**e[0], "revision": "1a6dc25"}],
            "the exact commit as 40 lowercase hex characters",
        ),
        (
            lambda e: [{**e[0], "verifier": {**e[0]["verifier"], "sha256": "abc"}}],
            "verifier.sha256",
        ),
        (lambda e: [{**e[0], "repo": "x"}], "repo"),
        (lambda e: {"fixtures": e}, "a fixture registry is a JSON list"),
    ],
)
def test_admission_refuses_the_whole_run(tmp_path: Path, change: Any, said: str) -> None:
    sweep, registry, entries = setup(tmp_path)
    write(registry, change(entries))
    with pytest.raises(AdmissionError, match=None) as exc:
        load_sweep(sweep, {"fixtures": str(registry)})
    assert said in str(exc.value) and str(registry) in str(exc.value)
    # Through the CLI: exit 2 with the reason, before anything is recorded.
    proc = hangar("run", str(sweep), "--fixtures", str(registry), "--yes")
    assert proc.returncode == 2 and said in " ".join(proc.stderr.split()), proc.stderr
    db = tmp_path / "r.db"
    assert not db.exists() or not ResultsStore(f"sqlite:///{db}").sweep_ids()


def test_malformed_registry_json_names_line_and_column(tmp_path: Path) -> None:
    sweep, registry, _ = setup(tmp_path)
    registry.write_text('[{"caseId": "x",}]')
    proc = hangar("sweep", "check", str(sweep), "--no-deep", HANGAR_FIXTURES=str(registry))
    assert proc.returncode == 2 and "fixtures.json:1:17: malformed JSON" in proc.stderr


@pytest.mark.ray
@pytest.mark.slow
def test_hangar_run_with_fixtures_runs_the_bound_case_and_blocks_the_unbound(
    docker_client: object, tmp_path: Path
) -> None:
    sweep, registry, entries = setup(tmp_path)
    write(registry, entries)
    proc = subprocess.run(
        [HANGAR, "run", str(sweep), "--fixtures", str(registry), "--json", "--yes"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    outcome = json.loads(proc.stdout)
    # gold passes the bound case and noop fails it; the unbound case is blocked, saying why.
    verdicts = {"pass": 1, "fail": 1, "blocked_setup": 2}
    assert outcome["verdicts"] == verdicts, proc.stderr[-3000:]
    assert proc.returncode == 3
    assert "no fixture for case id 'tdd:unbound-case'" in proc.stderr
    rows = list(ResultsStore(f"sqlite:///{tmp_path}/r.db").results("fixtures"))
    by = {(r.scenario_id, r.agent): r for r in rows}
    assert by[("statkit-median-even", "gold")].verdict.value == "pass"
    assert by[("statkit-median-even", "gold")].checks  # judged by the pinned host verifier
    blocked = [r for r in rows if r.verdict.value == "blocked_setup"]
    assert {r.scenario_id for r in blocked} == {"tdd:unbound-case"}
    assert all(r.usage.cost_usd == 0 and r.evidence_uri is None for r in blocked)
