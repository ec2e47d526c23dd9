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
- ``bedrock`` (Amazon Bedrock): the agent speaks Anthropic's Messages API. The call goes
  to ``/model/{id}/invoke`` (``invoke-with-response-stream`` when streamed), the body
  without ``model`` and ``stream`` and with Bedrock's ``anthropic_version``, signed with
  SigV4 from the node's AWS credentials (boto3's chain: the environment, a profile, an
  instance role; refreshed by boto3). A streamed answer comes back in AWS's event-stream
  framing; `EventStreamToSse` turns it into the SSE the agent's SDK reads.
- ``vertex`` (Google Vertex AI): a Claude model is called by Anthropic's Messages API at
  ``.../publishers/anthropic/models/{id}:rawPredict`` (``streamRawPredict``; SSE as
  Anthropic's), the body with Vertex's ``anthropic_version`` for its model field; a
  Gemini model by Gemini's API at ``.../publishers/google/models/{id}:generateContent``
  (and the other verbs). Each call carries an OAuth token from the node's Google
  credentials (a service account file or application default credentials, through
  google-auth), refreshed on the host before it expires.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol
from urllib.parse import parse_qsl, quote, urlencode

from hangar.models import ModelSpec

#: Azure's paths that name the deployment in the URL (the deployments API).
_AZURE_DEPLOYMENT_PATHS = ("/chat/completions", "/completions", "/embeddings")


class Reframe(Protocol):
    """A provider's successful answer, turned into the API its caller speaks as it
    arrives: `feed` each piece, `close` at the end; what they return goes to the caller."""

    content_type: str
    """The answer's content type, as the caller gets it."""

    def feed(self, data: bytes) -> bytes: ...

    def close(self) -> bytes: ...


class Upstream(NamedTuple):
    """One call as the provider wants it."""

    url: str
    headers: dict[str, str]
    """Authentication (added to the caller's other headers; a signature covers these)."""
    content: bytes
    """The body as sent (a signature covers these bytes)."""
    reframe: Callable[[], Reframe] | None = None
    """What turns a successful answer into the caller's API (None: it is that already)."""


def upstream(
    model: ModelSpec, key: str, api_path: str, query: str, body: dict[str, Any] | None
) -> Upstream:
    """The call to `api_path` (the API's own path) with `query` and `body`, for `model`'s
    provider (see the module docstring)."""
    if model.provider == "azure":
        return _azure(model, key, api_path, query, body)
    if model.provider == "bedrock":
        return _bedrock(model, api_path, body)
    if model.provider == "vertex":
        return _vertex(model, api_path, query, body)
    url = f"{model.endpoint}{api_path}" + (f"?{query}" if query else "")
    return Upstream(url, auth_headers(model, key), _json(body))


#: How many times a call a cloud throttled is sent again, at most.
THROTTLE_RETRIES = 6


def throttle_wait(
    model: ModelSpec, status: int, headers: Mapping[str, str], retries: int
) -> float | None:
    """How long to wait before sending again a call the provider throttled, after
    `retries` such waits, by the provider's own back-off (None: not throttled, or no
    retry left). Only the clouds' dialects: a first-party API's 429 goes back to the
    agent, whose SDK waits as that API says.

    - Azure OpenAI: its ``retry-after-ms`` / ``retry-after``, else 1, 2, 4... s;
    - Amazon Bedrock (``ThrottlingException``; a 503 ``ServiceUnavailableException``):
      botocore's standard mode, a random wait up to 1, 2, 4... s, at most 20 s;
    - Vertex AI (429 ``RESOURCE_EXHAUSTED``): Google's, a random wait up to 2, 4... s,
      at most 60 s.
    """
    if model.provider not in ("azure", "bedrock", "vertex") or retries >= THROTTLE_RETRIES:
        return None
    kind = headers.get("x-amzn-errortype", "")
    unavailable = model.provider == "bedrock" and status == 503 and "ServiceUnavailable" in kind
    if status != 429 and not unavailable:
        return None
    if model.provider == "azure":
        told = _seconds(headers.get("retry-after-ms"), 1000) or _seconds(headers.get("retry-after"))
        return min(told or 2.0**retries, 60.0)
    if model.provider == "bedrock":
        return random.random() * min(20.0, 2.0**retries)  # noqa: S311 (a back-off's jitter)
    return random.uniform(0.0, min(60.0, 2.0 ** (retries + 1)))  # noqa: S311


def _seconds(value: str | None, per_second: float = 1.0) -> float | None:
    try:
        return max(0.0, float(value) / per_second) if value else None
    except ValueError:  # an HTTP date: Azure sends seconds
        return None


def _json(body: dict[str, Any] | None) -> bytes:
    return json.dumps(body).encode() if body is not None else b""


def auth_headers(model: ModelSpec, key: str) -> dict[str, str]:
    """How `model`'s provider takes its key (Azure without one: an Entra ID token)."""
    if model.provider == "anthropic":
        return {"x-api-key": key}
    if model.provider == "google":
        return {"x-goog-api-key": key}
    if model.provider == "azure":
        return {"api-key": key} if key else {"Authorization": f"Bearer {azure_token(model)}"}
    return {"Authorization": f"Bearer {key}"}


#: The scope of an Entra ID token for Azure OpenAI (Azure AI services).
AZURE_SCOPE = "https://cognitiveservices.azure.com/.default"
_AZURE_LOCK = threading.Lock()
_azure_tokens: dict[str, Any] = {}  # scope: the token, until five minutes before it expires


def azure_token(model: ModelSpec) -> str:
    """An Entra ID token from the node's Azure credentials (azure-identity's default
    chain: a service principal's variables, workload identity, a managed identity, the
    Azure CLI's login), fetched again five minutes before it expires; a clear error naming
    the fix when there are none."""
    from hangar.errors import ConfigError

    with _AZURE_LOCK:
        held = _azure_tokens.get(AZURE_SCOPE)
        if held is not None and held.expires_on - time.time() > 300:
            return str(held.token)
        fix = (
            "a service principal (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET), a "
            "managed identity or `az login`"
        )
        try:
            from azure.core.exceptions import ClientAuthenticationError
            from azure.identity import DefaultAzureCredential
        except ImportError as exc:
            raise ConfigError(
                f"model {model.id!r} (Azure OpenAI) has no key in {model.key_env}, and an Entra "
                "ID token needs azure-identity: `pip install 'hangar[clouds]'`"
            ) from exc
        # the chain logs each credential it tried at WARNING: the error below says it
        logging.getLogger("azure.identity").setLevel(logging.ERROR)
        try:
            chain = DefaultAzureCredential(exclude_interactive_browser_credential=True)
            held = chain.get_token(AZURE_SCOPE)
        except ClientAuthenticationError as exc:
            raise ConfigError(
                f"model {model.id!r} (Azure OpenAI) needs its key in {model.key_env} or Azure "
                f"credentials for an Entra ID token on this node: {fix} "
                f"({str(exc).splitlines()[0][:300]})"
            ) from exc
        _azure_tokens[AZURE_SCOPE] = held
        return str(held.token)


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
    return Upstream(url, auth_headers(model, key), _json(body))


#: What Bedrock wants for Anthropic's models in place of the model field.
BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"


def _bedrock(model: ModelSpec, api_path: str, body: dict[str, Any] | None) -> Upstream:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    if body is None or api_path not in ("/v1/messages", "/chat/completions"):
        raise ValueError(f"Bedrock serves only its models' calls here, not {api_path}")
    stream = bool(body.get("stream"))
    reframe: Callable[[], Reframe] | None = None
    if model.family == "anthropic":
        sent = {k: v for k, v in body.items() if k not in ("model", "stream")}
        sent.setdefault("anthropic_version", BEDROCK_ANTHROPIC_VERSION)
        verb = "invoke-with-response-stream" if stream else "invoke"
        reframe = EventStreamToSse if stream else None
    else:  # every other model, by the Converse API
        from hangar.models import converse

        sent = converse.request(body)
        verb = "converse-stream" if stream else "converse"
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if stream:
            reframe = functools.partial(converse.ConverseStreamToChat, model.id, usage)
        else:
            reframe = functools.partial(converse.ConverseToChat, model.id)
    url = f"{model.endpoint}/model/{quote(model.id, safe='')}/{verb}"
    content = json.dumps(sent).encode()
    accept = "application/vnd.amazon.eventstream" if stream else "application/json"
    request = AWSRequest(
        method="POST", url=url, data=content,
        headers={"content-type": "application/json", "accept": accept},
    )  # fmt: skip
    SigV4Auth(aws_credentials(model), "bedrock", model.aws_region).add_auth(request)
    return Upstream(url, dict(request.headers.items()), content, reframe)


def aws_credentials(model: ModelSpec) -> Any:
    """The node's AWS credentials as of now (boto3's chain; refreshed by boto3 when they
    expire); a clear error naming the fix when there are none or no region."""
    from hangar.errors import ConfigError

    if not model.aws_region:
        raise ConfigError(
            f"model {model.id!r} (Amazon Bedrock) needs a region: `region:` in the sweep, or "
            "AWS_REGION in the environment of every node"
        )
    credentials = _aws_session().get_credentials()
    if credentials is None:
        raise ConfigError(
            f"model {model.id!r} (Amazon Bedrock) needs AWS credentials on this node: "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an instance role, in "
            "the environment of `hangar cluster start` / `hangar cluster join`"
        )
    return credentials.get_frozen_credentials()


@functools.cache
def _aws_session() -> Any:
    import boto3

    return boto3.Session()


class EventStreamToSse:
    """AWS event-stream frames (Bedrock's streamed answer) in, the SSE of Anthropic's
    Messages API out: each ``chunk`` event's ``bytes`` is one Anthropic event; an
    exception event becomes Anthropic's ``error`` event."""

    content_type = "text/event-stream"

    def __init__(self) -> None:
        from botocore.eventstream import EventStreamBuffer

        self._buffer = EventStreamBuffer()

    def feed(self, data: bytes) -> bytes:
        """The SSE for the frames `data` completes."""
        import base64

        self._buffer.add_data(data)
        out = bytearray()
        for message in self._buffer:
            headers = message.headers
            payload = json.loads(message.payload or b"{}")
            if headers.get(":message-type") == "event" and "bytes" in payload:
                event = json.loads(base64.b64decode(payload["bytes"]))
            else:
                kind = headers.get(":exception-type") or headers.get(":error-code") or "error"
                text = payload.get("message") or headers.get(":error-message") or kind
                event = {"type": "error", "error": {"type": str(kind), "message": str(text)}}
            name = event.get("type", "message")
            out += f"event: {name}\ndata: {json.dumps(event)}\n\n".encode()
        return bytes(out)

    def close(self) -> bytes:
        return b""


#: What Vertex AI wants for Anthropic's models in place of the model field.
VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"
_GEMINI_CALL = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:]+):(?P<verb>\w+)$")
_CLOUD_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def _vertex(model: ModelSpec, api_path: str, query: str, body: dict[str, Any] | None) -> Upstream:
    where = f"projects/{model.vertex_project}/locations/{model.vertex_location}/publishers"
    base = f"{model.endpoint}/v1/{where}"
    headers = {"Authorization": f"Bearer {google_token(model)}"}
    if model.family == "anthropic":
        if api_path != "/v1/messages" or body is None:
            raise ValueError(f"Vertex AI serves Claude only at POST /v1/messages, not {api_path}")
        sent = {k: v for k, v in body.items() if k != "model"}
        sent.setdefault("anthropic_version", VERTEX_ANTHROPIC_VERSION)
        verb = "streamRawPredict" if body.get("stream") else "rawPredict"
        return Upstream(f"{base}/anthropic/models/{model.id}:{verb}", headers, _json(sent))
    found = _GEMINI_CALL.match(api_path)
    if found is None:
        raise ValueError(f"Vertex AI serves Gemini's model calls, not {api_path}")
    url = f"{base}/google/models/{found['model']}:{found['verb']}" + (f"?{query}" if query else "")
    return Upstream(url, headers, _json(body))


_GOOGLE_LOCK = threading.Lock()


def google_token(model: ModelSpec) -> str:
    """An OAuth access token from the node's Google credentials, refreshed when it has
    expired; a clear error naming the fix when there are none, or no project."""
    from hangar.errors import ConfigError

    if not model.vertex_project:
        raise ConfigError(
            f"model {model.id!r} (Vertex AI) needs a Google Cloud project: `project:` in the "
            "sweep, or GOOGLE_CLOUD_PROJECT in the environment of every node"
        )
    import google.auth.exceptions
    from google.auth.transport.requests import Request

    with _GOOGLE_LOCK:
        try:
            credentials = _google_credentials()
            if not credentials.valid:
                credentials.refresh(Request())
        except google.auth.exceptions.GoogleAuthError as exc:
            raise ConfigError(
                f"model {model.id!r} (Vertex AI) needs Google credentials on this node ({exc}): "
                "GOOGLE_APPLICATION_CREDENTIALS naming a service account file, or application "
                "default credentials, in the environment of `hangar cluster start` / "
                "`hangar cluster join`"
            ) from exc
        return str(credentials.token)


@functools.cache
def _google_credentials() -> Any:
    import google.auth

    credentials, _ = google.auth.default(scopes=[_CLOUD_SCOPE])
    return credentials
