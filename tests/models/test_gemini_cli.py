"""Gemini CLI fixes the example's bug in a sandbox with no network, talking the Gemini API
through the model relay to the scripted server; its image is built offline from the npm
registry (its bundled script and Node.js 22)."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from hangar.models.pricing import Price
from hangar.results import Verdict
from tests.models.cli_agents import check_session, cli_image, fix_through_relay, in_bundle

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def gemini_image(docker_client: docker.DockerClient) -> str:
    return cli_image("gemini")


def test_the_bundle_runs_gemini_cli_and_node_22(gemini_image: str) -> None:
    version = in_bundle("gemini", "gemini --version", gemini_image)
    node = in_bundle("gemini", "/opt/hangar/agent/node/bin/node --version", gemini_image)
    assert version.returncode == 0 and version.stdout.strip() == "0.61.0"
    assert node.returncode == 0 and node.stdout.startswith("v22.")


def test_gemini_cli_fixes_the_bug_through_the_relay(
    gemini_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = {"id": "gemini-2.5-flash", "provider": "google",
             "price": Price(input=0.3, output=2.5, cached_input=0.075)}  # fmt: skip
    result, requests = fix_through_relay(
        gemini_image, "gemini", model, "run_shell_command", tmp_path, monkeypatch
    )
    calls = [
        r for r in requests if ":generateContent" in str(r["path"]) or ":stream" in str(r["path"])
    ]
    assert result.verdict is Verdict.PASS, (result.reason, [r["path"] for r in requests])
    keys = {r["headers"].get("x-goog-api-key") for r in calls}
    assert len(calls) >= 3 and keys == {"cli-test-key"}  # the real key, from the host
    assert result.usage.input_tokens >= 4500 and result.usage.cost_usd > 0
    assert "google_web_search" not in json.dumps([r["body"] for r in calls])
    check_session(result, "gemini")  # its chat file, read into hangar's events
