"""What the tests of real agent CLIs share: their bundle, built offline (twice: the second
build must do nothing) and mounted into hangar's base image, and one trial of the example
scenario run by a preset there, through the relay, against the scripted server."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hangar.agents import parse_agent
from hangar.kinds.execution import single_trial
from hangar.kinds.execution.scenarios.scenario import load_scenario
from hangar.models import ModelSpec
from hangar.results import TrialResult
from hangar.sandbox.base import ExecResult
from hangar.sandbox.bundles import Bundle
from hangar.trials import Arm, run_trial
from tests.require import BASE_IMAGE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def bundle_or_skip(name: str) -> Bundle:
    """Preset `name`'s bundle, built here; the test skips where its CLI cannot be fetched
    (a machine without npm, for a CLI from the npm registry)."""
    from hangar.sandbox.bundles import AGENT_CLIS, ensure_bundle

    if AGENT_CLIS[name].packages and shutil.which("npm") is None:
        pytest.skip(f"npm is not installed: the {name} CLI comes from the npm registry")
    return ensure_bundle(name)


def cli_image(name: str) -> str:
    """The image a preset's trial runs in: hangar's base image, which holds no CLI; the
    preset's bundle (built here, offline after its packages' first fetch; a second build
    does nothing) is mounted into it."""
    from hangar.sandbox.bundles import ensure_bundle

    first = bundle_or_skip(name)
    started = time.monotonic()
    assert ensure_bundle(name) == first and time.monotonic() - started < 1
    return BASE_IMAGE


def in_bundle(name: str, command: str, image: str = BASE_IMAGE) -> ExecResult:
    """`command` (a shell line) in a sandbox of `image` with preset `name`'s bundle mounted
    and its commands first on PATH, as a command agent runs."""
    from hangar.agents.command import BUNDLE_BIN
    from hangar.sandbox import SandboxSpec
    from hangar.sandbox.bundles import bundle_mount
    from hangar.sandbox.docker import DockerSandbox

    spec = SandboxSpec(
        image=image, trial=f"{name}-bundle", mounts=(bundle_mount(bundle_or_skip(name)),)
    )
    with DockerSandbox(spec) as sb:
        return sb.exec(["bash", "-c", f'PATH="{BUNDLE_BIN}:$PATH"; {command}'], timeout=120)


def fix_the_example(image: str, preset: str, model: ModelSpec, tmp_path: Path) -> TrialResult:
    """One trial of the example scenario (its image replaced) by the `preset` agent."""
    shutil.copytree(EXAMPLES / "median", tmp_path / "median")
    shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
    path = tmp_path / "median" / "scenario.yaml"
    path.write_text(path.read_text().replace(f"image: {BASE_IMAGE}", f"image: {image}"))
    agent = parse_agent(preset, {"preset": preset}, "test")
    spec = single_trial(
        load_scenario(path),
        agent,
        Arm(name="control"),
        model=model,
        evidence_url=(tmp_path / "ev").as_uri(),
    )
    return run_trial(spec)


def check_session(result: TrialResult, source: str) -> list[dict[str, object]]:
    """The trial's ``session.jsonl``: the agent CLI's own session (`source`) read into
    hangar's events beside hangar's trace, with what the example's fix must show: the
    file read, two shell commands that exited 0, the model calls' tokens as metered, a
    turn that completed. Returns the agent's events."""
    import json
    import tarfile

    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        member = tar.extractfile("session.jsonl")
        assert member is not None, "no session.jsonl in the evidence"
        events = [json.loads(line) for line in member.read().decode().splitlines()]
        request = tar.extractfile("verifier/request.json")
        assert request is not None and json.loads(request.read())["session"] == "session.jsonl"
    assert {e["source"] for e in events} == {"trace", source}
    agent = [e for e in events if e["source"] == source]
    shells = [e for e in agent if e["type"] == "shell"]
    assert len(shells) == 2 and all(e.get("ok") for e in shells), shells
    assert shells[0]["command"] == "sed -n 13,20p statkit/stats.py"
    reads = [e for e in agent if e["type"] == "file_read"]
    assert [e["path"] for e in reads] == ["statkit/stats.py"] and len(reads[0]["sha256"]) == 64
    calls = [e for e in agent if e["type"] == "model_call"]
    assert sum(e["usage"]["input"] for e in calls) == result.usage.input_tokens
    assert sum(e["usage"]["output"] for e in calls) == result.usage.output_tokens
    ends = [e for e in agent if e["type"] == "turn_end"]
    assert len(ends) == 1 and not ends[0].get("partial")
    check_trajectory(result, source)
    return agent


def check_trajectory(result: TrialResult, source: str) -> None:
    """The trial's ATIF trajectory: the agent's own session's steps (its two shell
    commands as calls with their results), hangar's meter as its totals, and valid for
    Harbor's own models."""
    import tempfile

    from hangar.sandbox.archive import extract_untrusted
    from hangar.trajectories import trial_trajectory
    from tests.harbor import harbor_validates

    assert result.evidence_uri is not None
    with tempfile.TemporaryDirectory() as tmp:
        # hangar's own extraction: Debian's Python 3.11.2 has no `filter=` on tarfile
        with open(result.evidence_uri.removeprefix("file://"), "rb") as bundle:
            extract_untrusted(bundle, Path(tmp), strip=0, limit=1 << 30)
        doc = trial_trajectory(result, Path(tmp))
        assert "steps from the agent's own session" in doc["notes"], source
        calls = [c for s in doc["steps"] for c in s.get("tool_calls", [])]
        commands = [str(c["arguments"]) + str(c.get("extra", "")) for c in calls]
        assert any("sed -n 13,20p statkit/stats.py" in c for c in commands), commands
        results = [r for s in doc["steps"] for r in s.get("observation", {}).get("results", [])]
        assert results and all(r["source_call_id"] for r in results)
        assert doc["final_metrics"]["total_prompt_tokens"] == result.usage.input_tokens
        assert harbor_validates(doc, Path(tmp)) == ""


def route_the_example(image: str, preset: str, model: ModelSpec, tmp_path: Path) -> TrialResult:
    """One trial of the routing example's bug-report case (expects tdd, forbids
    release-notes), its image replaced, by the `preset` agent."""
    from hangar.kinds.routing import routing_trial
    from hangar.kinds.routing.suite import load_routing_suite

    shutil.copytree(EXAMPLES / "routing", tmp_path / "routing")
    shutil.copytree(EXAMPLES / "decision" / "skills", tmp_path / "decision" / "skills")
    path = tmp_path / "routing" / "suite.yaml"
    path.write_text(path.read_text().replace(f"image: {BASE_IMAGE}", f"image: {image}"))
    (case,) = [c for c in load_routing_suite(path) if c.id == "route:failing-bug-report"]
    agent = parse_agent(preset, {"preset": preset}, "test")
    spec = routing_trial(case, agent, model=model, evidence_url=(tmp_path / "ev").as_uri())
    return run_trial(spec)


#: The description of the skill the routing case expects (how an agent routes to it).
TDD_DESCRIPTION = "Test-driven changes to existing code."


def with_the_handbook_server(preset: str) -> object:
    """The `preset` agent with the knowledge example's retrieval MCP server (pinned)."""
    import yaml

    knowledge = EXAMPLES / "knowledge"
    servers = yaml.safe_load((knowledge / "agents.yaml").read_text())["retrieval"]["mcp"]
    return parse_agent(preset, {"preset": preset, "mcp": servers}, "test", knowledge)


def ask_with_the_server(image: str, preset: str, model: ModelSpec, tmp_path: Path) -> TrialResult:
    """The routing example's bug-report prompt, asked of the `preset` agent with the
    handbook MCP server, in `image`."""
    from hangar.kinds.routing import routing_trial
    from hangar.kinds.routing.suite import load_routing_suite

    shutil.copytree(EXAMPLES / "routing", tmp_path / "routing")
    shutil.copytree(EXAMPLES / "decision" / "skills", tmp_path / "decision" / "skills")
    path = tmp_path / "routing" / "suite.yaml"
    path.write_text(path.read_text().replace(f"image: {BASE_IMAGE}", f"image: {image}"))
    (case,) = [c for c in load_routing_suite(path) if c.id == "route:failing-bug-report"]
    agent = with_the_handbook_server(preset)
    spec = routing_trial(case, agent, model=model, evidence_url=(tmp_path / "ev").as_uri())  # type: ignore[arg-type]
    return run_trial(spec)


#: The example's fix, as one shell command (what the scripted model asks a CLI to run).
FIX = (
    "python3 -c \"import pathlib; p = pathlib.Path('statkit/stats.py'); "
    "p.write_text(p.read_text().replace('    return ordered[mid]\\n', "
    "'    if len(ordered) % 2 == 0:\\n        return (ordered[mid - 1] + ordered[mid]) / 2\\n"
    "    return ordered[mid]\\n'))\""
)


def scripted_trial(
    match: str,
    replies: list[Any],
    model: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
    run: Callable[[ModelSpec], TrialResult],
) -> tuple[TrialResult, list[dict[str, Any]]]:
    """`run` with a model (`model`: ModelSpec fields but ``base_url``, a ``path`` after
    the scripted server's address) that answers prompts holding `match` with `replies`:
    (the result, the requests the scripted server saw). The key is ``cli-test-key``."""
    from hangar.testing.scripted import Conversation, Script, ScriptedServer

    spec = dict(model)
    conversation = Conversation(match=match, model=str(spec["id"]), replies=replies)
    server = ScriptedServer(Script(conversations=[conversation])).start()
    monkeypatch.setenv("HANGAR_TEST_CLI_KEY", "cli-test-key")
    try:
        spec["base_url"] = server.url + str(spec.pop("path", ""))
        spec["api_key_env"] = "HANGAR_TEST_CLI_KEY"
        result = run(ModelSpec.model_validate(spec))
    finally:
        server.shutdown()
    return result, server.requests


def fix_through_relay(
    image: str,
    preset: str,
    model: dict[str, object],
    shell: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    finish: str | None = None,
    arguments: Callable[[str], dict[str, Any]] | None = None,
) -> tuple[TrialResult, list[dict[str, Any]]]:
    """The example's fix by the `preset` CLI in `image`, its model scripted to read the
    file, fix it with its shell tool `shell` (its arguments from the command line:
    `arguments`, default ``{"command": ...}``), and answer (`scripted_trial`); with
    `finish`, the answer also runs that command (an agent that ends its turn by one)."""
    from hangar.testing.scripted import Reply, ScriptedUsage, ToolCall

    def run(command: str) -> list[ToolCall]:
        args = arguments(command) if arguments else {"command": command}
        return [ToolCall(name=shell, arguments=args)]

    replies = [
        Reply(tool_calls=run("sed -n 13,20p statkit/stats.py"),
              usage=ScriptedUsage(input=1200, output=40)),
        Reply(tool_calls=run(FIX), usage=ScriptedUsage(input=1500, output=120, cached=1000)),
        Reply(content="Fixed: median() averages the two middle values.",
              tool_calls=run(finish) if finish else [],
              usage=ScriptedUsage(input=1800, output=30, cached=1400, reasoning=10)),
    ]  # fmt: skip
    return scripted_trial(
        "statkit", replies, model, monkeypatch,
        lambda spec: fix_the_example(image, preset, spec, tmp_path),
    )  # fmt: skip


def check_the_server_answered(result: TrialResult, requests: list[dict[str, Any]]) -> None:
    """What a CLI sent back after calling the handbook server's search is the server's
    answer; the trial records the server's pins, wheels and tools."""
    import json
    import tarfile

    from hangar.results import Verdict

    assert result.verdict is not Verdict.BLOCKED_SETUP, result.reason
    assert len(requests) >= 2
    # any request after the first (a CLI may make others beside the turn)
    told = json.dumps([r["body"] for r in requests[1:]])
    assert "docs/adr/0001-postgresql.md" in told and "We store the ledger in PostgreSQL" in told
    assert result.agent_settings["mcp"]["handbook"]["requirements"] == ["mcp==2.3.0"]
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        names = tar.getnames()
    assert "mcp.json" in names and "mcp-tools.json" in names
