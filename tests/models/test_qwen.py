"""Qwen Code fixes the example's bug in a sandbox with no network, talking the OpenAI Chat
Completions API through the model relay to the scripted server; its image is built
offline from the npm registry (its bundled script and Node.js 22)."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from hangar.models.pricing import Price
from hangar.results import Verdict
from tests.models.cli_agents import check_session, cli_image, fix_through_relay, in_bundle

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def qwen_image(docker_client: docker.DockerClient) -> str:
    return cli_image("qwen")


def test_the_bundle_runs_qwen_code(qwen_image: str) -> None:
    version = in_bundle("qwen", "qwen --version", qwen_image)
    assert version.returncode == 0 and version.stdout.strip() == "0.24.4"


def test_qwen_code_fixes_the_bug_through_the_relay(
    qwen_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = {"id": "scripted-qwen", "provider": "openai", "path": "/v1",
             "price": Price(input=0.4, output=1.2)}  # fmt: skip
    result, requests = fix_through_relay(
        qwen_image, "qwen", model, "run_shell_command", tmp_path, monkeypatch
    )
    calls = [r for r in requests if r["path"] == "/v1/chat/completions"]
    assert result.verdict is Verdict.PASS, (result.reason, [r["path"] for r in requests])
    assert len(calls) >= 3 and all(r["model"] == "scripted-qwen" for r in calls)
    assert result.usage.input_tokens >= 4500 and result.usage.cost_usd > 0
    check_session(result, "qwen")  # its chat file, read into hangar's events
