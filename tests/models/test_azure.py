"""Azure OpenAI through the relay and from the host: the agent speaks OpenAI's API, the
relay calls the deployment at Azure's paths with the key in ``api-key``."""

from __future__ import annotations

import json
from typing import Any

import docker
import pytest

from hangar.models import ModelSpec, check_keys
from hangar.models.complete import complete
from hangar.models.dialects import upstream
from hangar.results import Verdict
from hangar.testing.scripted import ScriptedServer
from tests.models.test_relay import (
    PRICE,
    SECRET,
    TOOLLOOP,
    TRESPASS,
    events,
    everything,
    key,
    run,
    server,
)

__all__ = ["key", "server"]  # the fixtures, shared with the relay's tests


def azure(server: ScriptedServer, **kw: Any) -> ModelSpec:
    return ModelSpec(
        id="scripted-fixer",
        provider="azure",
        base_url=server.url,
        api_key_env="HANGAR_TEST_MODEL_KEY",
        price=PRICE,
        **kw,
    )


def test_azure_paths_for_each_api() -> None:
    model = ModelSpec(id="gpt-4o", provider="azure", base_url="https://r.openai.azure.com",
                      deployment="prod-4o", api_version="2024-10-21")  # fmt: skip
    chat = upstream(model, "k", "/chat/completions", "", {"model": "gpt-4o", "messages": []})
    assert chat.url == (
        "https://r.openai.azure.com/openai/deployments/prod-4o/chat/completions"
        "?api-version=2024-10-21"
    )
    assert chat.headers == {"api-key": "k"}
    assert json.loads(chat.content) == {"model": "prod-4o", "messages": []}
    responses = upstream(model, "k", "/responses", "api-version=evil", {"model": "gpt-4o"})
    assert responses.url == "https://r.openai.azure.com/openai/responses?api-version=2024-10-21"
    v1 = upstream(model.model_copy(update={"api_version": None}), "k", "/responses", "", None)
    assert v1.url == "https://r.openai.azure.com/openai/v1/responses"


def test_an_azure_model_needs_its_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    from hangar.errors import ConfigError

    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "k")
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    with pytest.raises(ConfigError, match="AZURE_OPENAI_ENDPOINT"):
        check_keys([ModelSpec(id="gpt-4o", provider="azure")])
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://r.openai.azure.com/")
    check_keys([ModelSpec(id="gpt-4o", provider="azure")])


@pytest.mark.docker
def test_a_command_agent_reaches_an_azure_deployment_through_the_relay(
    docker_client: docker.DockerClient, server: ScriptedServer, key: str, tmp_path: Any
) -> None:
    result = run(tmp_path, TOOLLOOP, azure(server, api_version="2024-10-21"))
    assert result.verdict is Verdict.PASS, result.reason
    assert (result.usage.input_tokens, result.usage.output_tokens) == (4500, 190)
    assert result.usage.cost_usd > 0
    calls = server.requests
    assert [c["path"] for c in calls] == ["/openai/deployments/scripted-fixer/chat/completions"] * 3
    assert all(c["query"] == "api-version=2024-10-21" for c in calls)
    assert all(c["headers"].get("api-key") == key for c in calls)
    assert not [c for c in calls if "Authorization" in c["headers"]]
    assert SECRET not in everything(result)  # the result and every file of the bundle


@pytest.mark.docker
def test_the_relays_refusals_hold_for_azure(
    docker_client: docker.DockerClient, server: ScriptedServer, key: str, tmp_path: Any
) -> None:
    result = run(tmp_path, TRESPASS, azure(server, deployment="scripted-fixer"))
    out = "".join(e["text"] for e in events(result, "stdout"))
    assert "files 403" in out and "file-content 403" in out and "web-search 403" in out
    assert "store 200" in out and "models 200" in out
    # Only the honest call reached Azure (its v1 API), with store forced off.
    assert [(r["method"], r["path"]) for r in server.requests] == [("POST", "/openai/v1/responses")]
    assert server.requests[0]["body"]["store"] is False
    assert server.requests[0]["headers"].get("api-key") == key


def test_a_prompt_call_from_the_host_goes_to_the_deployment(
    server: ScriptedServer, key: str
) -> None:
    """`complete` (prompt trials, judges, chat agents' loop) speaks Azure's dialect too."""
    done = complete(azure(server, api_version="2024-10-21"), "Answer.", "statkit median")
    assert done.error == "", done.error
    assert done.usage.input_tokens > 0
    (call,) = server.requests
    assert call["path"] == "/openai/deployments/scripted-fixer/chat/completions"
    assert call["query"] == "api-version=2024-10-21"
    assert call["headers"].get("api-key") == key and "Authorization" not in call["headers"]


def test_a_deployment_that_does_not_exist_stops_the_model_before_any_trial(
    key: str, tmp_path: Any
) -> None:
    """The sweep's model check (one token, before any trial) meets Azure's 404 for a
    deployment the resource lacks: the model is stopped, with the provider's words."""
    from hangar.models.exists import check_model
    from hangar.testing.scripted import Script

    script = tmp_path / "script.yaml"
    script.write_text("models: [prod-4o]\nconversations:\n  - replies: [{content: 'ok'}]\n")
    srv = ScriptedServer(Script.load(script)).start()
    try:
        there = check_model(azure(srv, deployment="prod-4o", api_version="2024-10-21"))
        missing = check_model(azure(srv, deployment="gone-4o", api_version="2024-10-21"))
    finally:
        srv.shutdown()
    assert there.ok and there.error is None, there
    assert not missing.ok and missing.error is not None and missing.error.stops_model, missing
