"""A real agent CLI (OpenAI Codex) fixes the example's bug in a sandbox with no network,
talking through the model relay to the scripted server."""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from hangar.agents import parse_agent
from hangar.models import ModelSpec
from hangar.models.pricing import Price
from hangar.results import Verdict
from hangar.sandbox.images import build_agent_image
from hangar.scenario import load_scenario
from hangar.testing.scripted import Script, ScriptedServer
from hangar.trials import Arm, run_trial, single_trial
from tests.require import BASE_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def codex_image(docker_client: docker.DockerClient) -> str:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the Codex CLI comes from the npm registry")
    outcome = build_agent_image("codex", BASE_IMAGE)
    again = build_agent_image("codex", BASE_IMAGE)
    assert not again.built, "a second build with the same inputs should do nothing"
    return outcome.tag


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer(Script.load(EXAMPLES / "scripted-model.yaml")).start()
    yield srv
    srv.shutdown()


def test_codex_fixes_the_bug_through_the_relay(
    codex_image: str, server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGAR_TEST_CODEX_KEY", "sk-codex-test")
    shutil.copytree(EXAMPLES / "median", tmp_path / "median")
    shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
    path = tmp_path / "median" / "scenario.yaml"
    path.write_text(path.read_text().replace(f"image: {BASE_IMAGE}", f"image: {codex_image}"))
    model = ModelSpec(
        id="scripted-codex",
        provider="openai",
        base_url=f"{server.url}/v1",
        api_key_env="HANGAR_TEST_CODEX_KEY",
        price=Price(input=1.25, output=10.0, cached_input=0.125),
    )
    agent = parse_agent("codex", {"preset": "codex"}, "test")
    result = run_trial(
        single_trial(
            load_scenario(path),
            agent,
            Arm(name="control"),
            model=model,
            evidence_url=(tmp_path / "ev").as_uri(),
        )
    )
    assert result.verdict is Verdict.PASS, result.reason
    assert [r["path"] for r in server.requests] == ["/v1/responses"] * 3
    assert all(r["stream"] for r in server.requests)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (4500, 190)
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        sessions = [n for n in tar.getnames() if n.startswith("agent/") and n.endswith(".jsonl")]
    assert sessions, "Codex's session files were not collected into the evidence"
