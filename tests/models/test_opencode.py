"""OpenCode fixes the example's bug in a sandbox with no network, talking the OpenAI Chat
Completions API through the model relay to the scripted server; its image is built
offline from the npm registry (its own linux-x64 binary)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import docker
import pytest

from hangar.models.pricing import Price
from hangar.results import Verdict
from tests.models.cli_agents import cli_image, fix_through_relay, in_bundle

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def opencode_image(docker_client: docker.DockerClient) -> str:
    return cli_image("opencode")


def test_the_bundle_runs_opencode(opencode_image: str) -> None:
    version = in_bundle("opencode", "opencode --version", opencode_image)
    assert version.returncode == 0 and version.stdout.strip() == "1.18.33"


def test_opencode_fixes_the_bug_through_the_relay(
    opencode_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = {"id": "scripted-opencode", "provider": "openai", "path": "/v1",
             "price": Price(input=0.4, output=1.2)}  # fmt: skip
    result, requests = fix_through_relay(
        opencode_image, "opencode", model, "bash", tmp_path, monkeypatch
    )
    calls = [r for r in requests if r["path"] == "/v1/chat/completions"]
    assert result.verdict is Verdict.PASS, (result.reason, [r["path"] for r in requests])
    assert len(calls) >= 3 and all(r["model"] == "scripted-opencode" for r in calls)
    assert result.usage.input_tokens >= 4500 and result.usage.cost_usd > 0
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        names = [n for n in tar.getnames() if n.startswith("agent/")]
    assert names, "OpenCode's data folder was not collected into the evidence"
