"""Runs of one sweep file over time: `hangar run` resumes the latest, `--new` starts
another, an id with {date} or {week} starts one each day or week, and `hangar report
--runs` puts them side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from hangar.errors import ConfigError
from hangar.scheduler.sweep import expand_id, load_sweep, new_run_id

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny" / "scenario.yaml"
HANGAR = str(Path(sys.executable).parent / "hangar")


def write_sweep(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "sweep.yaml"
    config = {
        "id": "weekly",
        "scenarios": [str(TINY)],
        "agents": {"ok": {"command": "true"}},
        "backend": "local",
        "store": f"sqlite:///{tmp_path}/r.db",
        "evidence": (tmp_path / "ev").as_uri(),
        **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_ids_with_date_and_week_are_filled_in(tmp_path: Path) -> None:
    thursday = datetime(2026, 12, 3, 17, 12, 7, tzinfo=UTC)
    assert expand_id("cmp-{week}", thursday) == "cmp-2026-W49"
    assert expand_id("cmp-{date}", thursday) == "cmp-2026-12-03"
    assert expand_id("cmp-{week}", datetime(2027, 1, 1, tzinfo=UTC)) == "cmp-2026-W53"
    assert new_run_id("cmp", thursday) == "cmp.20261203-171207"
    sweep = load_sweep(write_sweep(tmp_path, id="cmp-{week}"))
    assert sweep.family == "cmp-{week}" and sweep.id.startswith("cmp-20")
    with pytest.raises(ConfigError, match=r"unknown placeholder \{month\}.*\{date\} or \{week\}"):
        load_sweep(write_sweep(tmp_path, id="cmp-{month}"))


def hangar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HANGAR, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.ray
@pytest.mark.slow
def test_run_resumes_the_latest_run_and_new_starts_another(tmp_path: Path) -> None:
    path = str(write_sweep(tmp_path))
    first = hangar("run", path, "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout)["done"] == 1
    again = hangar("run", path, "--json")  # resume: nothing runs twice
    outcome = json.loads(again.stdout)
    assert (outcome["sweep"], outcome["done"], outcome["skipped"]) == ("weekly", 0, 1)
    new = hangar("run", path, "--new", "--json")
    outcome = json.loads(new.stdout)
    run_id = outcome["sweep"]
    assert run_id.startswith("weekly.20") and outcome["done"] == 1, new.stderr[-2000:]
    assert f"new run {run_id}" in new.stderr
    resumed = hangar("run", path, "--json")  # the latest run is the one resumed
    outcome = json.loads(resumed.stdout)
    assert (outcome["sweep"], outcome["done"], outcome["skipped"]) == (run_id, 0, 1)
    assert f"resuming run {run_id}" in resumed.stderr and "`--new` starts another" in resumed.stderr
    # Reports read the latest run; --runs puts the file's runs side by side.
    status = hangar("status", path, "--json")
    assert json.loads(status.stdout)["sweep"] == run_id, status.stdout
    runs = hangar("report", path, "--runs", "--json")
    assert runs.returncode == 0, runs.stderr
    table = json.loads(runs.stdout)
    assert table["family"] == "weekly"
    assert [r["sweep"] for r in table["runs"]] == ["weekly", run_id]
    assert all(r["groups"] == {"ok · none · control": [1, 1]} for r in table["runs"])
    text = hangar("report", path, "--runs")
    assert "2 run(s) of weekly" in text.stdout and "100% (1/1)" in text.stdout
