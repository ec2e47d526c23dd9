"""Gemini CLI fixes the example's bug in a sandbox with no network, talking the Gemini API
through the model relay to the scripted server; its image is built offline from the npm
registry (its bundled script and Node.js 22)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import docker
import pytest

from hangar.models import ModelSpec
from hangar.models.pricing import Price
from hangar.results import Verdict
from hangar.sandbox import SandboxSpec
from hangar.sandbox.docker import DockerSandbox
from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer, ToolCall
from tests.models.cli_agents import check_session, cli_image, fix_the_example

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FIX = (
    "python3 -c \"import pathlib; p = pathlib.Path('statkit/stats.py'); "
    "p.write_text(p.read_text().replace('    return ordered[mid]\\n', "
    "'    if len(ordered) % 2 == 0:\\n        return (ordered[mid - 1] + ordered[mid]) / 2\\n"
    "    return ordered[mid]\\n'))\""
)


@pytest.fixture(scope="module")
def gemini_image(docker_client: docker.DockerClient) -> str:
    return cli_image("gemini")


def test_the_image_has_gemini_cli_and_node_22(gemini_image: str) -> None:
    with DockerSandbox(SandboxSpec(image=gemini_image, trial="gemini-image")) as sb:
        version = sb.exec(["gemini", "--version"])
        node = sb.exec(["node", "--version"])
    assert version.returncode == 0 and version.stdout.strip() == "0.61.0"
    assert node.returncode == 0 and node.stdout.startswith("v22.")


def test_gemini_cli_fixes_the_bug_through_the_relay(
    gemini_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = Script(
        conversations=[
            Conversation(
                match="statkit",
                model="gemini-2.5-flash",
                replies=[
                    Reply(tool_calls=[ToolCall(name="run_shell_command", arguments={
                        "command": "sed -n 13,20p statkit/stats.py"})],
                          usage={"input": 1200, "output": 40}),
                    Reply(tool_calls=[ToolCall(name="run_shell_command", arguments={
                        "command": FIX})], usage={"input": 1500, "output": 120, "cached": 1000}),
                    Reply(content="Fixed: median() averages the two middle values.",
                          usage={"input": 1800, "output": 30, "cached": 1400, "reasoning": 10}),
                ],
            )
        ]
    )  # fmt: skip
    server = ScriptedServer(script).start()
    monkeypatch.setenv("HANGAR_TEST_GEMINI_KEY", "gemini-test-key")
    try:
        model = ModelSpec(
            id="gemini-2.5-flash",
            provider="google",
            base_url=server.url,
            api_key_env="HANGAR_TEST_GEMINI_KEY",
            price=Price(input=0.3, output=2.5, cached_input=0.075),
        )
        result = fix_the_example(gemini_image, "gemini", model, tmp_path)
    finally:
        server.shutdown()
    calls = [
        r for r in server.requests if ":generateContent" in r["path"] or ":stream" in r["path"]
    ]
    assert result.verdict is Verdict.PASS, (result.reason, [r["path"] for r in server.requests])
    assert len(calls) >= 3 and all(
        r["headers"].get("x-goog-api-key") == "gemini-test-key" for r in calls
    )
    assert result.usage.input_tokens >= 4500 and result.usage.cost_usd > 0
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        names = tar.getnames()
    sessions = [n for n in names if n.startswith("agent/")]
    assert sessions, f"Gemini CLI's session files were not collected: {names}"
    assert "google_web_search" not in json.dumps([r["body"] for r in calls])
    check_session(result, "gemini")  # its chat file, read into hangar's events
