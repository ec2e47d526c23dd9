"""Running one trial of a private copy of the example scenario against real docker, and
reading its evidence archive: the fixtures and helpers of the trial tests."""

from __future__ import annotations

import json
import shutil
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from hangar.agents import CommandAgent, load_agents
from hangar.evidence.archive import verify_archive
from hangar.kinds.execution import single_trial
from hangar.kinds.execution.scenarios.scenario import load_scenario
from hangar.results import TrialResult
from hangar.sandbox.config import BackendConfig
from hangar.trials import Arm, TrialSpec, run_trial

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
AGENTS = load_agents(EXAMPLES / "agents.yaml")
GOLD = AGENTS["gold"].command
LATER_COMMIT = "1db31c2ac01c1850acb563dc5e73d3b720e4f3d6"


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    """A private copy of the example scenario and its repository."""
    shutil.copytree(EXAMPLES / "median", tmp_path / "median")
    shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
    return tmp_path / "median"


Runner = Callable[..., TrialResult]


@pytest.fixture
def run(
    docker_client: docker.DockerClient, scenario_dir: Path, cache_root: Path, tmp_path: Path
) -> Runner:
    """Run one trial of the scenario copy with an agent command; checks teardown."""

    def go(
        command: str,
        *,
        arm: str = "control",
        backend: str | BackendConfig = "docker",
        edit: Callable[[Path], None] | None = None,
        wait: bool = True,
    ) -> TrialResult:
        if edit is not None:
            edit(scenario_dir)
        loaded = load_scenario(scenario_dir / "scenario.yaml")
        spec: TrialSpec = single_trial(
            loaded,
            CommandAgent(name="test", command=command),
            Arm.parse(arm),
            backend=backend,
            evidence_url=(tmp_path / "evidence").as_uri(),
        ).model_copy(update={"work_root": tmp_path / "trials", "cache_root": cache_root})
        result = run_trial(spec, wait_teardown=wait)
        deadline = time.monotonic() + (0 if wait else 60)  # without: in the background
        while True:
            left = docker_client.containers.list(
                all=True, ignore_removed=True, filters={"label": f"hangar.trial={spec.trial_key}"}
            )
            folders = list((tmp_path / "trials").iterdir())
            if not (left or folders) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not left, "a container was left behind"
        assert not folders, "a trial folder was left behind"
        return result

    return go


def bundle(result: TrialResult, name: str) -> str:
    """A file of the result's evidence archive, after checking the bundle's integrity."""
    assert result.evidence_uri is not None
    local = Path(result.evidence_uri.removeprefix("file://"))
    assert verify_archive(local, result.evidence_sha256).ok
    with tarfile.open(local) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read().decode()


def trace_events(result: TrialResult) -> list[dict[str, Any]]:
    return [json.loads(line) for line in bundle(result, "trace.jsonl").splitlines()]


def agent_output(result: TrialResult) -> str:
    return "".join(e.get("text", "") for e in trace_events(result) if e["kind"] == "stdout")
