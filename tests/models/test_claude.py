"""Claude Code fixes the example's bug in a sandbox with no network, talking the Anthropic
Messages API through the model relay to the scripted server; its image is built offline
from the npm registry (its linux-x64 binary and Node.js 22)."""

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
from hangar.sandbox import SandboxSpec
from hangar.sandbox.docker import DockerSandbox
from hangar.sandbox.images import build_agent_image
from hangar.scenario import load_scenario
from hangar.testing.scripted import Script, ScriptedServer
from hangar.trials import Arm, run_trial, single_trial
from tests.require import BASE_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def claude_image(docker_client: docker.DockerClient) -> str:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: Claude Code comes from the npm registry")
    outcome = build_agent_image("claude", BASE_IMAGE)
    again = build_agent_image("claude", BASE_IMAGE)
    assert not again.built, "a second build with the same inputs should do nothing"
    return outcome.tag


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer(Script.load(EXAMPLES / "scripted-model.yaml")).start()
    yield srv
    srv.shutdown()


def test_the_image_has_claude_code_and_node_22(claude_image: str) -> None:
    with DockerSandbox(SandboxSpec(image=claude_image, trial="claude-image")) as sb:
        claude = sb.exec(["claude", "--version"])
        node = sb.exec(["node", "--version"])
    assert claude.returncode == 0 and "2.1.332 (Claude Code)" in claude.stdout
    assert node.returncode == 0 and node.stdout.startswith("v22.")


def test_claude_code_fixes_the_bug_through_the_relay(
    claude_image: str, server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGAR_TEST_CLAUDE_KEY", "sk-ant-claude-test")
    shutil.copytree(EXAMPLES / "median", tmp_path / "median")
    shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
    path = tmp_path / "median" / "scenario.yaml"
    path.write_text(path.read_text().replace(f"image: {BASE_IMAGE}", f"image: {claude_image}"))
    model = ModelSpec(
        id="scripted-claude",
        provider="anthropic",
        base_url=server.url,
        api_key_env="HANGAR_TEST_CLAUDE_KEY",
        price=Price(input=3.0, output=15.0, cached_input=0.3),
    )
    agent = parse_agent("claude", {"preset": "claude"}, "test")
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
    messages = [r for r in server.requests if r["path"] == "/v1/messages"]
    assert len(messages) >= 3 and all(r["model"] == "scripted-claude" for r in messages)
    assert result.usage.input_tokens >= 4500 and result.usage.output_tokens >= 190
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        names = tar.getnames()
        sessions = [n for n in names if n.startswith("agent/") and n.endswith(".jsonl")]
        assert sessions, f"Claude Code's session files were not collected: {names}"
