"""Where a model's calls go and how they are authenticated: the provider's dialect.

The agent (through the relay) and hangar's own calls (`hangar.models.complete`) speak one
of three APIs: OpenAI's, Anthropic's, Gemini's. A provider that serves one of them at
other paths or with another credential is a dialect: `upstream` turns a call on the
API's own path (``/chat/completions``, relative to the model's endpoint) into the URL,
headers and body the provider wants. The real key is added here, on the host; the agent
never sees it, nor the real endpoint.

- ``openai``, ``anthropic``, ``google``: the endpoint plus the path; the key as each API
  takes it (``Authorization: Bearer``, ``x-api-key``, ``x-goog-api-key``).
- ``azure`` (Azure OpenAI): the agent speaks OpenAI's API. With an ``api_version`` the
  call goes to the model's deployment (``/openai/deployments/{deployment}/chat/
  completions?api-version=...``; Responses at ``/openai/responses``), else to Azure's v1
  API (``/openai/v1/...``); the body's model becomes the deployment; the key goes in
  ``api-key``.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlencode

from hangar.models import ModelSpec

#: Azure's paths that name the deployment in the URL (the deployments API).
_AZURE_DEPLOYMENT_PATHS = ("/chat/completions", "/completions", "/embeddings")


class Upstream(NamedTuple):
    """One call as the provider wants it."""

    url: str
    headers: dict[str, str]
    """Authentication (added to the caller's other headers)."""
    body: dict[str, Any] | None
    """The JSON body, rewritten where the dialect needs it (None: no body)."""


def upstream(
    model: ModelSpec, key: str, api_path: str, query: str, body: dict[str, Any] | None
) -> Upstream:
    """The call to `api_path` (the API's own path) with `query` and `body`, for `model`'s
    provider (see the module docstring)."""
    if model.provider == "azure":
        return _azure(model, key, api_path, query, body)
    url = f"{model.endpoint}{api_path}" + (f"?{query}" if query else "")
    return Upstream(url, auth_headers(model, key), body)


def auth_headers(model: ModelSpec, key: str) -> dict[str, str]:
    """How `model`'s provider takes its key."""
    if model.provider == "anthropic":
        return {"x-api-key": key}
    if model.provider == "google":
        return {"x-goog-api-key": key}
    if model.provider == "azure":
        return {"api-key": key}
    return {"Authorization": f"Bearer {key}"}


def _azure(
    model: ModelSpec, key: str, api_path: str, query: str, body: dict[str, Any] | None
) -> Upstream:
    deployment = model.deployment or model.id
    params = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "api-version"]
    if model.api_version and api_path in _AZURE_DEPLOYMENT_PATHS:
        path = f"/openai/deployments/{deployment}{api_path}"
    elif model.api_version:
        path = f"/openai{api_path}"
    else:
        path = f"/openai/v1{api_path}"
    if model.api_version:
        params.append(("api-version", model.api_version))
    if body is not None and "model" in body:
        body = {**body, "model": deployment}
    url = f"{model.endpoint}{path}" + (f"?{urlencode(params)}" if params else "")
    return Upstream(url, auth_headers(model, key), body)
