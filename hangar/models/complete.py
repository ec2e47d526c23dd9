"""One model call from the host, in any of the four APIs, under the relay's rules.

`sdk_client` gives the official SDK's client for a model, its HTTP going through
`RelayPolicy` (``store`` off, only the trial's model, no provider-hosted tool) with each
refusal traced; the chat agents' loop and `complete` (a prompt trial's one call, a
judge's call) both use it. `complete` asks once (the SDK retries what can be retried),
meters the call's usage and cost from the provider's own answer, traces the request and
the answer, and tells a provider's failure from the request's own (`ProviderError`).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel

from hangar.models import ModelSpec
from hangar.models.errors import classify
from hangar.models.policy import (
    PolicyTransport,
    RelayPolicy,
    policy_client,
    sdk_http,
    shared_transport,
)
from hangar.models.pricing import cost_of
from hangar.models.usage import (
    from_anthropic,
    from_gemini,
    from_openai_chat,
    from_openai_responses,
)
from hangar.results import ProviderError, Usage
from hangar.trace import TraceWriter

log = logging.getLogger(__name__)


class Completion(BaseModel):
    """What one call gave."""

    text: str = ""
    """The answer's text ('' when the call failed)."""
    usage: Usage = Usage()
    """Tokens and cost, from the provider's answer."""
    error: str = ""
    """Why the call failed ('' when it did not)."""
    provider_error: ProviderError | None = None
    """The provider's failure, when the failure was not the request's own."""
    refused: list[str] = []
    """What the relay's rules refused (the request never left the host)."""


def sdk_client(model: ModelSpec, refusals: list[str], trace: TraceWriter | None) -> Any:
    """The SDK client of `model`'s API (``anthropic`` for messages, else ``openai``), its
    calls held to `RelayPolicy`; refusals are appended to `refusals` and traced."""
    policy, refused = RelayPolicy(model), _refused(refusals, trace)
    if model.chat_api == "gemini":
        return gemini_client(model, policy, refused)
    return _sdk_client(model, policy, refused)[0]


def _refused(refusals: list[str], trace: TraceWriter | None) -> Callable[[str, str], None]:
    def refused(path: str, reason: str) -> None:
        refusals.append(reason)
        if trace is not None:
            trace.event("model_refused", path=path, reason=reason)

    return refused


def _sdk_client(
    model: ModelSpec, policy: RelayPolicy, refused: Callable[[str, str], None]
) -> tuple[Any, PolicyTransport]:
    """The Anthropic or OpenAI SDK's client of `model`, and the transport under it."""
    key, base = model.api_key() or "hangar-cloud", model.endpoint  # a cloud: credentials
    sdk = importlib.import_module("anthropic" if model.chat_api == "messages" else "openai")
    transport = PolicyTransport(policy, sdk_http(sdk), refused)
    client = policy_client(sdk, transport, model.timeout_s)
    made = sdk.Anthropic if model.chat_api == "messages" else sdk.OpenAI
    return made(api_key=key, base_url=base, max_retries=5, http_client=client), transport


def call_client(model: ModelSpec, refusals: list[str], trace: TraceWriter | None) -> Any:
    """`sdk_client` for one call made now, on this thread: the client is made once per
    thread and model settings, its transport given this call's policy and refusals at
    each call (a client of each call's own was a twentieth of a prompt trial's CPU)."""
    if model.chat_api == "gemini":
        return sdk_client(model, refusals, trace)
    policy, refused = RelayPolicy(model), _refused(refusals, trace)
    held: dict[tuple[Any, ...], Any] = _CLIENTS.__dict__.setdefault("by_settings", {})
    settings = (model.chat_api, model.api_key(), model.endpoint, model.timeout_s)
    found = held.get(settings)
    if found is None:
        found = held[settings] = _sdk_client(model, policy, refused)
    client, transport = found
    transport.policy, transport.on_refused = policy, refused
    return client


#: Each thread's SDK clients for `call_client`, by the settings they were made with.
_CLIENTS = threading.local()


def warm_up(models: Iterable[ModelSpec]) -> None:
    """Import the SDK of each model's API and open this process's transport for it (TLS
    context and connection pool), ahead of the first call: a pool does so while the
    sweep's preflight runs, where its first trials each waited about 0.6 s on it. Only
    a head start: what fails here (an SDK not installed) is left to the first call, which
    says so in its trial's result."""
    for api in sorted({m.chat_api for m in models if m.provider != "none"}):
        try:
            if api == "gemini":
                importlib.import_module("google.genai")
                http = "httpx2"
            else:
                sdk = importlib.import_module("anthropic" if api == "messages" else "openai")
                http = sdk_http(sdk).__name__
            shared_transport(http, os.getpid())
        except Exception as exc:
            log.debug("no head start for the %s API: %s", api, exc)


def gemini_client(model: ModelSpec, policy: RelayPolicy, refused: Any) -> Any:
    """Google's SDK (``google-genai``) for a Gemini model, its HTTP (httpx2) through
    `PolicyTransport`."""
    import httpx2
    from google import genai
    from google.genai import types

    transport = PolicyTransport(policy, httpx2, refused)
    http = httpx2.Client(transport=transport, timeout=httpx2.Timeout(model.timeout_s))  # type: ignore[arg-type]
    options = types.HttpOptions(
        base_url=model.endpoint,
        api_version="v1beta",
        httpx_client=http,
        retry_options=types.HttpRetryOptions(attempts=5),
    )
    # A cloud's model has no key (the transport adds its credentials): the SDK wants one.
    return genai.Client(api_key=model.api_key() or "hangar-cloud", http_options=options)


def gemini_config(system: str, max_output_tokens: int, timeout: float, **more: Any) -> Any:
    """A Gemini call's config: the system instruction, the output cap, the timeout; no
    automatic function calling (the agent's loop runs its tools)."""
    from google.genai import types

    return types.GenerateContentConfig(
        system_instruction=system,
        max_output_tokens=max_output_tokens,
        http_options=types.HttpOptions(timeout=int(timeout * 1000)),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        **more,
    )


def gemini_usage(reply: Any) -> Usage:
    """The usage of a Gemini SDK answer."""
    meta = reply.usage_metadata
    return from_gemini(meta.model_dump(by_alias=True, exclude_none=True) if meta else {})


def provider_error_of(exc: Exception, model: ModelSpec) -> ProviderError | None:
    """The provider's failure an SDK exception stands for (None: the request's own fault,
    such as a 400). The SDKs name their errors alike (Google's status is its ``code``)."""
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if status is None and isinstance(getattr(exc, "code", None), int):
        status = exc.code  # type: ignore[attr-defined]
    transient = name in ("APITimeoutError", "APIConnectionError", "ConnectError", "ReadTimeout")
    return classify(status, f"{name}: {exc}", model.id, model.key_env, transient=transient)


def complete(
    model: ModelSpec,
    system: str,
    user: str,
    *,
    trace: TraceWriter | None = None,
    max_output_tokens: int = 2048,
    reasoning_effort: str | None = None,
    timeout_s: float | None = None,
    earlier: Sequence[tuple[str, str]] = (),
) -> Completion:
    """Ask `model` once: `system` instructions, one `user` message, no tools; `earlier`
    (user, assistant) turns come before it (a follow-up: "answer again in the format")."""
    refusals: list[str] = []
    timeout = timeout_s or model.timeout_s
    if trace is not None:
        trace.event("model_request", model=model.id, api=model.chat_api, system=system, user=user)
    messages = [
        *(
            {"role": role, "content": text}
            for asked, answered in earlier
            for role, text in (("user", asked), ("assistant", answered))
        ),
        {"role": "user", "content": user},
    ]
    try:
        client = call_client(model, refusals, trace)
        text, usage = _ask(
            client, model, system, messages, max_output_tokens, reasoning_effort, timeout
        )
    except Exception as exc:  # the SDK already retried what can be retried
        error = f"model call failed: {type(exc).__name__}: {exc}"
        if trace is not None:
            trace.event("model_error", error=error)
        upstream = None if refusals else provider_error_of(exc, model)
        return Completion(error=error, provider_error=upstream, refused=refusals)
    usage = cost_of(usage, model.id, model.price_table, model.price)
    if trace is not None:
        trace.event("model_response", text=text, usage=usage.model_dump())
    return Completion(text=text, usage=usage)


def _ask(
    client: Any,
    model: ModelSpec,
    system: str,
    messages: list[dict[str, str]],
    max_output_tokens: int,
    reasoning_effort: str | None,
    timeout: float,
) -> tuple[str, Usage]:
    if model.chat_api == "gemini":
        contents = [
            {
                "role": "model" if m["role"] == "assistant" else "user",
                "parts": [{"text": m["content"]}],
            }
            for m in messages
        ]
        reply = client.models.generate_content(
            model=model.id,
            contents=contents,
            config=gemini_config(system, max_output_tokens, timeout),
        )
        return reply.text or "", gemini_usage(reply)
    if model.chat_api == "messages":
        reply = client.messages.create(
            model=model.id,
            system=system,
            messages=messages,
            max_tokens=max_output_tokens,
            timeout=timeout,
        )
        text = "".join(b.text for b in reply.content if b.type == "text")
        return text, from_anthropic(reply.usage.model_dump())
    effort = {"reasoning_effort": reasoning_effort} if reasoning_effort else {}
    body: dict[str, Any]
    if model.chat_api == "responses":
        reasoning = {"reasoning": {"effort": reasoning_effort}} if reasoning_effort else {}
        from openai.types.responses import Response

        body = {"model": model.id, "instructions": system, "input": messages}
        body |= {"max_output_tokens": max_output_tokens, **reasoning}
        response = _post(client, "/responses", Response, body, timeout)
        usage = response.usage.model_dump() if response.usage else {}
        return response.output_text, from_openai_responses(usage)
    body = {"model": model.id, "messages": [{"role": "system", "content": system}, *messages]}
    body |= {"max_tokens": max_output_tokens, **effort}
    # The answer's JSON as it came (`object`): its text and usage are all this reads, and
    # building the SDK's ChatCompletion of it was a tenth of a prompt trial's CPU.
    completion = _post(client, "/chat/completions", object, body, timeout)
    text = completion["choices"][0]["message"].get("content")
    return text or "", from_openai_chat(completion.get("usage") or {})


def _post(client: Any, path: str, cast_to: type, body: dict[str, Any], timeout: float) -> Any:
    """An OpenAI API call through the SDK client's own `post` (its retries, errors and
    parsing): `create` first walks the request's type hints to transform it, a fifth of a
    prompt trial's CPU, and this body is already what the API takes."""
    return client.post(path, cast_to=cast_to, body=body, options={"timeout": timeout})
