"""Token usage as providers report it, normalised; and its cost.

Usage is read on the host from the provider's own response (JSON or SSE stream), never
from what an agent says. Normalised fields (`hangar.results.Usage`):

- ``input_tokens``: every prompt token, cached ones included;
- ``cached_input_tokens``: the part of them read from the provider's cache;
- ``output_tokens``: every completion token, reasoning included;
- ``reasoning_tokens``: the reasoning part of them.

Sources: OpenAI Chat Completions (``usage.prompt_tokens``, ``prompt_tokens_details.
cached_tokens``, ``completion_tokens``, ``completion_tokens_details.reasoning_tokens``;
the last stream chunk when ``stream_options.include_usage``), OpenAI Responses
(``usage.input_tokens``, ``input_tokens_details.cached_tokens``, ``output_tokens``,
``output_tokens_details.reasoning_tokens``; the ``response.completed`` event), Anthropic
Messages (``usage.input_tokens`` excludes cache reads and writes, so those are added;
``message_start`` and ``message_delta`` events when streaming).
"""

from __future__ import annotations

import json
from typing import Any

from hangar.results import Usage


def _get(data: Any, *path: str) -> int:
    for key in path:
        if not isinstance(data, dict):
            return 0
        data = data.get(key)
    return int(data) if isinstance(data, int | float) else 0


def from_openai_chat(usage: Any) -> Usage:
    """A Chat Completions ``usage`` object."""
    return Usage(
        input_tokens=_get(usage, "prompt_tokens"),
        cached_input_tokens=_get(usage, "prompt_tokens_details", "cached_tokens"),
        output_tokens=_get(usage, "completion_tokens"),
        reasoning_tokens=_get(usage, "completion_tokens_details", "reasoning_tokens"),
    )


def from_openai_responses(usage: Any) -> Usage:
    """A Responses API ``usage`` object."""
    return Usage(
        input_tokens=_get(usage, "input_tokens"),
        cached_input_tokens=_get(usage, "input_tokens_details", "cached_tokens"),
        output_tokens=_get(usage, "output_tokens"),
        reasoning_tokens=_get(usage, "output_tokens_details", "reasoning_tokens"),
    )


def from_anthropic(usage: Any) -> Usage:
    """An Anthropic Messages ``usage`` object (cache reads and writes are input too)."""
    cached = _get(usage, "cache_read_input_tokens")
    written = _get(usage, "cache_creation_input_tokens")
    return Usage(
        input_tokens=_get(usage, "input_tokens") + cached + written,
        cached_input_tokens=cached,
        output_tokens=_get(usage, "output_tokens"),
    )


def from_gemini(usage: Any) -> Usage:
    """A Gemini API ``usageMetadata`` object: the prompt's tokens (cached ones included),
    the answer's and the thoughts' (billed as output)."""
    thoughts = _get(usage, "thoughtsTokenCount")
    return Usage(
        input_tokens=_get(usage, "promptTokenCount") + _get(usage, "toolUsePromptTokenCount"),
        cached_input_tokens=_get(usage, "cachedContentTokenCount"),
        output_tokens=_get(usage, "candidatesTokenCount") + thoughts,
        reasoning_tokens=thoughts,
    )


def is_gemini(path: str) -> bool:
    """Whether `path` is a Gemini API call (``models/{model}:generateContent``...)."""
    return ":generateContent" in path or ":streamGenerateContent" in path


def add(a: Usage, b: Usage) -> Usage:
    """The sum of two usages (cost included)."""
    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cached_input_tokens=a.cached_input_tokens + b.cached_input_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
        cost_usd=a.cost_usd + b.cost_usd,
    )


def from_body(path: str, body: bytes, content_type: str) -> Usage | None:
    """The usage in a provider response (JSON or an SSE stream), or None if it has none."""
    if "text/event-stream" in content_type:
        return _from_stream(path, body)
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if isinstance(data, dict) and is_gemini(path):
        return from_gemini(data["usageMetadata"]) if "usageMetadata" in data else None
    if not isinstance(data, dict) or "usage" not in data:
        return None
    if path.endswith("/messages"):
        return from_anthropic(data["usage"])
    if path.endswith("/responses"):
        return from_openai_responses(data["usage"])
    return from_openai_chat(data["usage"])


def _events(body: bytes) -> list[dict[str, Any]]:
    events = []
    for line in body.decode("utf-8", errors="replace").splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload and payload != "[DONE]":
                try:
                    item = json.loads(payload)
                except ValueError:
                    continue
                if isinstance(item, dict):
                    events.append(item)
    return events


def _from_stream(path: str, body: bytes) -> Usage | None:
    events = _events(body)
    if is_gemini(path):  # each chunk carries the usage so far: the last one is the call's
        metered = [e for e in events if e.get("usageMetadata")]
        return from_gemini(metered[-1]["usageMetadata"]) if metered else None
    if path.endswith("/messages"):
        start = next((e for e in events if e.get("type") == "message_start"), None)
        deltas = [e for e in events if e.get("type") == "message_delta"]
        if start is None and not deltas:
            return None
        base = from_anthropic((start or {}).get("message", {}).get("usage", {}))
        output = sum(_get(d, "usage", "output_tokens") for d in deltas)
        return base.model_copy(update={"output_tokens": base.output_tokens + output})
    if path.endswith("/responses"):
        done = [e for e in events if e.get("type") == "response.completed"]
        return from_openai_responses(done[-1]["response"].get("usage")) if done else None
    with_usage = [e for e in events if e.get("usage")]
    return from_openai_chat(with_usage[-1]["usage"]) if with_usage else None
