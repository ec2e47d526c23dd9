"""Installed packages extend hangar through entry points (`hangar.plugins`): a sandbox
backend, an agent preset, a task source and a kind, found without a line of hangar
changed; hangar's own names cannot be taken over. The backend is also held to the
sandbox conformance battery (`hangar.sandbox.conformance`, which `tests/sandbox` runs on
the backend ``extras-local``)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.plugin_package import installed, write_package

TINY = Path(__file__).resolve().parent / "fixtures" / "tiny" / "scenario.yaml"
HANGAR = str(Path(sys.executable).parent / "hangar")


def test_each_registry_finds_the_package_and_keeps_its_own_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from hangar.agents.presets import expand_preset, presets
    from hangar.kinds.execution.sources import source_of
    from hangar.sandbox import sandbox_class
    from hangar.sandbox.config import backend_settings
    from hangar.sandbox.docker import DockerSandbox
    from hangar.trials.kind import kind_of, registry

    with caplog.at_level(logging.WARNING), installed(tmp_path / "site"):
        assert sandbox_class("extras-local").__name__ == "ExtrasSandbox"
        assert sandbox_class("docker") is DockerSandbox  # the impostor is ignored...
        assert "ignoring entry point docker = hangar_extras:IMPOSTOR" in caplog.text  # ...said
        assert backend_settings("extras-local").kind == "extras-local"
        assert "echoer" in presets() and "codex" in presets()
        assert "echo" in expand_preset({"preset": "echoer"}, "agents.yaml")["command"]
        listed = tmp_path / "a.tasklist"
        assert source_of(listed, None).name == "task list"  # type: ignore[union-attr]
        assert "extras" in registry() and kind_of("extras").title == "extras cases"
    with pytest.raises(Exception, match="unknown sandbox backend 'extras-local'"):
        sandbox_class("extras-local")  # uninstalled: gone
    with pytest.raises(Exception, match="unknown sandbox backend 'extras-local'"):
        backend_settings("extras-local")


@pytest.mark.ray
@pytest.mark.slow
def test_hangar_run_uses_the_packages_backend_preset_and_task_source(tmp_path: Path) -> None:
    site = write_package(tmp_path / "site")
    (tmp_path / "tasks.tasklist").write_text(str(TINY) + "\n")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "id": "extras",
                "scenarios": ["tasks.tasklist"],
                "agents": {"echo": {"preset": "echoer"}},
                "backend": "extras-local",
                "store": f"sqlite:///{tmp_path}/r.db",
                "evidence": (tmp_path / "ev").as_uri(),
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    listed = subprocess.run(
        [HANGAR, "agents", "list", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    rows = {r["name"]: r for r in json.loads(listed.stdout)["agents"]}
    assert rows["echoer"]["needs"] == "what its command runs (an installed package's preset)"
    run = subprocess.run(
        [HANGAR, "run", str(sweep), "--json", "--address", "embedded"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = json.loads(run.stdout)
    assert outcome["verdicts"] == {"pass": 1}
    from hangar.store import ResultsStore

    (result,) = ResultsStore(f"sqlite:///{tmp_path}/r.db").results("extras")
    assert result.scenario_id == "tiny" and result.agent_settings.get("preset") == "echoer"
    from hangar.evidence.archive import read_member

    assert result.evidence_uri is not None
    trial = json.loads(read_member(result.evidence_uri, "trial.json", result.evidence_sha256))
    assert trial["backend"] == "extras-local"  # the package's class ran it
    assert "echoer read" in read_member(result.evidence_uri, "trace.jsonl", result.evidence_sha256)
