"""mini-swe-agent fixes the example's bug in a sandbox with no network, talking the
OpenAI Chat Completions API (through litellm) to the model relay and on to the scripted
server; its image is built offline from PyPI (pip on the host, for the image's Python)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import docker
import pytest

from hangar.agents import parse_agent
from hangar.models.pricing import Price
from hangar.results import Verdict
from tests.models.cli_agents import check_session, cli_image, fix_through_relay, in_bundle

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@pytest.fixture(scope="module")
def mini_image(docker_client: docker.DockerClient) -> str:
    return cli_image("mini-swe-agent")


def test_the_bundle_runs_mini_swe_agent(mini_image: str) -> None:
    from hangar.sandbox.bundles import ensure_bundle

    version = in_bundle("mini-swe-agent", "python3 -c 'import sys; print(sys.path)'", mini_image)
    run = in_bundle("mini-swe-agent", "MSWEA_SILENT_STARTUP=1 mini --help", mini_image)
    # the launcher keeps its packages and its Python to itself: the agent's commands see
    # the image's python3, without the bundle's packages
    assert version.returncode == 0 and "/opt/hangar/agent" not in version.stdout
    assert run.returncode == 0 and "--task" in run.stdout, run.stderr
    manifest = json.loads((ensure_bundle("mini-swe-agent").folder / "manifest.json").read_text())
    found = manifest["wheels"]
    assert any(w.startswith("mini_swe_agent-2.4.6-") for w in found)
    assert all(len(sha) == 64 for sha in found.values())
    assert manifest["pins"] == ["mini-swe-agent==2.4.6"]
    assert any(deb.startswith("python3.11-minimal_") for deb in manifest["debian"])


def test_its_options_are_checked_and_in_its_settings() -> None:
    agent = parse_agent("mini", {"preset": "mini-swe-agent", "step_limit": 40}, "test")
    assert "-c agent.step_limit=40" in agent.command  # type: ignore[union-attr]
    settings = agent.settings()
    assert settings["step_limit"] == "40" and settings["cli"] == ["mini-swe-agent==2.4.6"]
    other = parse_agent("mini", {"preset": "mini-swe-agent", "step_limit": 41}, "test")
    assert other.digest() != agent.digest()
    with pytest.raises(Exception, match="step_limit must be a number of steps"):
        parse_agent("mini", {"preset": "mini-swe-agent", "step_limit": "all"}, "test")


def test_mini_swe_agent_fixes_the_bug_through_the_relay(
    mini_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = {"id": "scripted-mini", "provider": "openai", "path": "/v1",
             "price": Price(input=0.4, output=1.2)}  # fmt: skip
    result, requests = fix_through_relay(
        mini_image, "mini-swe-agent", model, "bash", tmp_path, monkeypatch, finish=SUBMIT
    )
    calls = [r for r in requests if r["path"] == "/v1/chat/completions"]
    assert result.verdict is Verdict.PASS, (result.reason, [r["path"] for r in requests])
    assert len(calls) == 3 and all(r["model"] == "scripted-mini" for r in calls)
    assert result.usage.input_tokens == 4500 and result.usage.cost_usd > 0
    assert result.agent_settings["cli"] == ["mini-swe-agent==2.4.6"]
    agent = check_session(result, "mini")
    assert [e["text"] for e in agent if e["type"] == "turn_end"] == ["Submitted"]
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        names = tar.getnames()
        bundle = tar.extractfile("agent/bundle.json")
        assert bundle is not None
        record = json.loads(bundle.read())
    assert any(n.endswith("trajectory.traj.json") for n in names), names
    # the bundle's manifest is the trial's evidence: its pins, wheels and Debian packages
    assert record["pins"] == ["mini-swe-agent==2.4.6"] and record["wheels"]
    assert result.agent_settings["bundle"] == record["name"] + "@" + record["digest"][:16]
