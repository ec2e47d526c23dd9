"""The model relay end to end: a command agent with no network fixes the bug through it."""

# ruff: noqa: E501 - the agents' shell and Python scripts are kept verbatim, one per line

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from hangar.agents import CommandAgent
from hangar.kinds.execution import single_trial
from hangar.kinds.execution.scenarios.scenario import load_scenario
from hangar.models import ModelSpec
from hangar.models.pricing import Price
from hangar.results import TrialResult, Verdict
from hangar.testing.scripted import Script, ScriptedServer
from hangar.trials import Arm, run_trial

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SECRET = "sk-real-secret-never-in-a-sandbox-0123456789"
TOOLLOOP = "python3 - <<'HANGAR_PY'\n" + (EXAMPLES / "toolloop.py").read_text() + "\nHANGAR_PY"
PRICE = Price(input=2.0, output=8.0, cached_input=0.5)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ScriptedServer]:
    srv = ScriptedServer(Script.load(EXAMPLES / "scripted-model.yaml")).start()
    yield srv
    srv.shutdown()


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HANGAR_TEST_MODEL_KEY", SECRET)
    return SECRET


def model(server: ScriptedServer, **kw: Any) -> ModelSpec:
    return ModelSpec(
        id="scripted-fixer",
        provider="openai",
        base_url=f"{server.url}/v1",
        api_key_env="HANGAR_TEST_MODEL_KEY",
        price=PRICE,
        **kw,
    )


def run(tmp_path: Path, command: str, spec: ModelSpec, backend: str = "docker") -> TrialResult:
    if not (tmp_path / "median").exists():
        shutil.copytree(EXAMPLES / "median", tmp_path / "median")
        shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
    loaded = load_scenario(tmp_path / "median" / "scenario.yaml")
    trial = single_trial(
        loaded,
        CommandAgent(name="relay-test", command=command),
        Arm(name="control"),
        model=spec,
        backend=backend,
        evidence_url=(tmp_path / "ev").as_uri(),
    )
    return run_trial(trial)


def bundle_text(result: TrialResult, name: str) -> str:
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read().decode()


def everything(result: TrialResult) -> str:
    """The result and every file of its bundle, as text: what a secret must never be in."""
    assert result.evidence_uri is not None
    texts = [result.model_dump_json()]
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        for member in tar.getmembers():
            found = tar.extractfile(member) if member.isfile() else None
            if found is not None:
                texts.append(found.read().decode(errors="replace"))
    return "\n".join(texts)


def events(result: TrialResult, kind: str) -> list[dict[str, Any]]:
    lines = bundle_text(result, "trace.jsonl").splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def test_command_agent_fixes_the_bug_through_the_relay(
    docker_client: docker.DockerClient, server: ScriptedServer, key: str, tmp_path: Path
) -> None:
    result = run(tmp_path, TOOLLOOP, model(server))
    assert result.verdict is Verdict.PASS, result.reason
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens) == (4500, 190)
    assert (usage.cached_input_tokens, usage.reasoning_tokens) == (2400, 10)
    assert usage.cost_usd == pytest.approx(((4500 - 2400) * 2.0 + 2400 * 0.5 + 190 * 8.0) / 1e6)
    calls = events(result, "model_call")
    assert [c["status"] for c in calls] == [200, 200, 200]
    upstream = server.requests
    assert len(upstream) == 3
    assert all(r["headers"].get("Authorization") == f"Bearer {key}" for r in upstream)
    assert SECRET not in bundle_text(result, "trace.jsonl")


LOOK = r"""
env | grep -c HANGAR_TEST_MODEL_KEY || true
grep -rsl '{head}''{tail}' /proc/[0-9]*/environ /proc/[0-9]*/cmdline /home /tmp /workspace 2>/dev/null | head
curl -s 2>/dev/null; python3 -c "
import os, json, urllib.request, urllib.error
def ask(model, token):
    r = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions',
        data=json.dumps({{'model': model, 'messages': [{{'role': 'user', 'content': 'statkit'}}]}}).encode(),
        headers={{'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token}})
    try:
        return urllib.request.urlopen(r, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code
print('other-model', ask('gpt-4o', os.environ['OPENAI_API_KEY']))
print('wrong-token', ask(os.environ['HANGAR_MODEL'], 'sk-guess'))
print('token-is', 'hangar' if os.environ['OPENAI_API_KEY'].startswith('hangar-') else 'other')
"
"""


def test_no_real_key_in_the_sandbox_and_refusals_are_logged(
    docker_client: docker.DockerClient, server: ScriptedServer, key: str, tmp_path: Path
) -> None:
    # The secret is split with shell quotes so the command line does not contain it.
    result = run(tmp_path, LOOK.format(head=key[:10], tail=key[10:]), model(server))
    out = "".join(e["text"] for e in events(result, "stdout"))
    assert out.splitlines()[0] == "0", out  # no variable of that name in the sandbox
    assert key not in out
    assert "other-model 403" in out and "wrong-token 401" in out and "token-is hangar" in out
    refused = events(result, "model_refused")
    assert {r.get("requested") for r in refused} >= {"gpt-4o"}
    assert any("wrong trial token" in r["reason"] for r in refused)
    assert server.requests == []  # nothing refused ever reached the provider
    assert key not in bundle_text(result, "trace.jsonl")


def _script(tmp_path: Path, replies: list[dict[str, Any]]) -> ScriptedServer:
    path = tmp_path / "script.yaml"
    path.write_text(json.dumps({"conversations": [{"match": "statkit", "replies": replies}]}))
    return ScriptedServer(Script.load(path)).start()


@pytest.mark.parametrize(
    ("replies", "extra", "words"),
    [
        ([{"status": 429}], {}, "HTTP 429"),
        ([{"status": 500}], {}, "HTTP 500"),
        ([{"delay_s": 5, "content": "late"}], {"timeout_s": 1.5}, "timed out"),
    ],
    ids=["429", "500", "slow"],
)
def test_a_failing_upstream_is_an_infra_error_and_the_next_one_is_fine(
    docker_client: docker.DockerClient,
    server: ScriptedServer,
    key: str,
    tmp_path: Path,
    replies: list[dict[str, Any]],
    extra: dict[str, Any],
    words: str,
) -> None:
    bad = _script(tmp_path, replies)
    try:
        result = run(tmp_path, TOOLLOOP, model(bad, **extra))
    finally:
        bad.shutdown()
    # The provider failed the agent: never a counted fail (the sweep retries it).
    assert result.verdict is Verdict.INFRA_ERROR, result.reason
    assert result.reason.startswith("provider failure: model 'scripted-fixer' failed upstream")
    assert words in result.reason and "incomplete run" in result.reason, result.reason
    assert result.provider_error is not None and result.provider_error.kind == "unavailable"
    assert run(tmp_path, TOOLLOOP, model(server)).verdict is Verdict.PASS


def test_a_refused_key_is_an_auth_error_naming_the_variable(
    docker_client: docker.DockerClient, key: str, tmp_path: Path
) -> None:
    bad = _script(tmp_path, [{"status": 401}])
    try:
        result = run(tmp_path, TOOLLOOP, model(bad))
    finally:
        bad.shutdown()
    assert result.verdict is Verdict.INFRA_ERROR, result.reason
    error = result.provider_error
    assert error is not None and error.kind == "auth" and error.status == 401
    assert error.key_env == "HANGAR_TEST_MODEL_KEY" and "HANGAR_TEST_MODEL_KEY" in result.reason
    assert SECRET not in result.model_dump_json()


TRESPASS = r"""python3 - <<'PY'
import json, os, urllib.request, urllib.error
base, token, model = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], os.environ["HANGAR_MODEL"]
def ask(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    r = urllib.request.Request(base + path, data=data, method=method, headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(r, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code
hello = [{"role": "user", "content": "statkit"}]
print("files", ask("GET", "/files"))
print("file-content", ask("GET", "/files/file-abc/content"))
print("web-search", ask("POST", "/responses", {"model": model, "input": hello, "tools": [{"type": "web_search"}]}))
print("store", ask("POST", "/responses", {"model": model, "input": hello, "store": True}))
print("models", ask("GET", "/models"))
PY"""


def test_a_sandboxed_agent_cannot_buy_more_than_its_model_calls(
    docker_client: docker.DockerClient, server: ScriptedServer, key: str, tmp_path: Path
) -> None:
    result = run(tmp_path, TRESPASS, model(server))
    out = "".join(e["text"] for e in events(result, "stdout"))
    assert "files 403" in out and "file-content 403" in out and "web-search 403" in out
    assert "store 200" in out and "models 200" in out
    # Only the honest call reached the provider, with store forced off.
    assert [(r["method"], r["path"]) for r in server.requests] == [("POST", "/v1/responses")]
    assert server.requests[0]["body"]["store"] is False
    refused = events(result, "model_refused")
    assert [e["path"] for e in refused] == [
        "/v1/files",
        "/v1/files/file-abc/content",
        "/v1/responses",
    ]


def test_a_dropped_stream_is_a_clear_failure(
    docker_client: docker.DockerClient, key: str, tmp_path: Path
) -> None:
    bad = _script(tmp_path, [{"drop": True, "content": "x" * 400}])
    command = (
        "python3 -c \"import os, json, urllib.request as u; r = u.Request(os.environ['OPENAI_BASE_URL']"
        " + '/chat/completions', data=json.dumps({'model': os.environ['HANGAR_MODEL'], 'stream': True,"
        " 'messages': [{'role': 'user', 'content': 'statkit'}]}).encode(), headers={'Authorization':"
        " 'Bearer ' + os.environ['OPENAI_API_KEY'], 'Content-Type': 'application/json'});"
        " body = u.urlopen(r).read(); print('DONE' if b'[DONE]' in body else 'CUT')\""
    )
    try:
        result = run(tmp_path, command, model(bad))
    finally:
        bad.shutdown()
    out = "".join(e["text"] for e in events(result, "stdout"))
    assert "CUT" in out and result.verdict is Verdict.FAIL


def test_the_forwarder_needs_nothing_of_the_image(
    docker_client: docker.DockerClient, server: ScriptedServer, key: str, tmp_path: Path
) -> None:
    """On docker the relay's forwarder is hangar's static helper: an image without python3
    still gets its relay; only the agent, a Python script here, then cannot run."""
    tag = "hangar-test/nopython:1"
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "Dockerfile").write_text(
        "FROM hangar/base:bookworm\nUSER root\nRUN rm -f /usr/bin/python3*\nUSER agent\n"
    )
    from hangar.sandbox.images import build_dockerfile_image

    build_dockerfile_image(tmp_path / "img", tag)
    try:
        shutil.copytree(EXAMPLES / "median", tmp_path / "median")
        shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
        path = tmp_path / "median" / "scenario.yaml"
        path.write_text(path.read_text().replace("image: hangar/base:bookworm", f"image: {tag}"))
        result = run(tmp_path, TOOLLOOP, model(server))
    finally:
        docker_client.images.remove(tag, force=True)
    assert result.verdict is Verdict.FAIL, result.reason
    assert "has no python3" not in result.reason and "exited with code 127" in result.reason


def test_missing_key_is_blocked_setup(
    docker_client: docker.DockerClient,
    server: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HANGAR_TEST_MODEL_KEY", raising=False)
    result = run(tmp_path, TOOLLOOP, model(server))
    assert result.verdict is Verdict.BLOCKED_SETUP and "HANGAR_TEST_MODEL_KEY" in result.reason
