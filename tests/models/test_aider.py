"""Aider fixes the example's bug in a sandbox with no network, talking the OpenAI Chat
Completions API (through litellm) to the model relay and on to the scripted server, which
answers with an edit in Aider's own search/replace format; its image is built offline
from PyPI (pip on the host, for the image's Python)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import docker
import pytest

from hangar.agents import parse_agent
from hangar.models.pricing import Price
from hangar.results import Verdict
from tests.models.cli_agents import cli_image, fix_the_example, in_bundle, scripted_trial

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: The fix as Aider's ``diff`` edit format says it.
EDIT = """I'll make median() average the two middle values.

statkit/stats.py
```python
<<<<<<< SEARCH
    mid = len(ordered) // 2
    return ordered[mid]
=======
    mid = len(ordered) // 2
    if len(ordered) % 2 == 0:
        return (ordered[mid - 1] + ordered[mid]) / 2
    return ordered[mid]
>>>>>>> REPLACE
```
"""


@pytest.fixture(scope="module")
def aider_image(docker_client: docker.DockerClient) -> str:
    return cli_image("aider")


def test_the_bundle_runs_aider(aider_image: str) -> None:
    version = in_bundle("aider", "aider --version", aider_image)
    assert version.returncode == 0 and version.stdout.strip() == "aider 0.86.2", version.stderr


def test_its_options_are_checked_and_in_its_settings() -> None:
    agent = parse_agent("aider", {"preset": "aider", "edit_format": "whole"}, "test")
    command = agent.command  # type: ignore[union-attr]
    assert "--edit-format whole" in command and "--edit-format diff" not in command
    assert agent.settings()["cli"] == ["aider-chat==0.86.2"]
    with pytest.raises(Exception, match="map_tokens must be a number of tokens"):
        parse_agent("aider", {"preset": "aider", "map_tokens": "-1"}, "test")


def test_aider_fixes_the_bug_through_the_relay(
    aider_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hangar.testing.scripted import Reply, ScriptedUsage

    model = {"id": "scripted-aider", "provider": "openai", "path": "/v1",
             "price": Price(input=0.4, output=1.2)}  # fmt: skip
    replies = [Reply(content=EDIT, usage=ScriptedUsage(input=2100, output=90, cached=0))]
    result, requests = scripted_trial(
        "statkit", replies, model, monkeypatch,
        lambda spec: fix_the_example(aider_image, "aider", spec, tmp_path),
    )  # fmt: skip
    calls = [r for r in requests if r["path"] == "/v1/chat/completions"]
    assert result.verdict is Verdict.PASS, (result.reason, [r["path"] for r in requests])
    assert len(calls) == 1 and calls[0]["model"] == "scripted-aider"
    assert result.usage.input_tokens == 2100 and result.usage.cost_usd > 0
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        names = tar.getnames()
        history = tar.extractfile("agent/home_agent_.aider/chat.history.md")
        assert history is not None
        said = history.read().decode()
    assert "Applied edit to statkit/stats.py" in said, said[-2000:]
    assert "agent/home_agent_.aider/llm.history" in names, names
