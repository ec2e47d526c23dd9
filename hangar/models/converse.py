"""Amazon Bedrock's Converse API behind OpenAI's Chat Completions, for the models on
Bedrock that are not Anthropic's (Amazon Nova, Llama, Mistral, DeepSeek...).

The agent (through the relay) and hangar's own calls speak Chat Completions; the call
goes to ``/model/{id}/converse`` (``converse-stream`` when streamed) and the answer
comes back as a chat completion (a stream of ``chat.completion.chunk`` events):

- messages: ``system`` and ``developer`` become Converse's ``system`` blocks; a ``tool``
  message becomes a ``toolResult`` block of a user turn; an assistant's ``tool_calls``
  become ``toolUse`` blocks; consecutive turns of one role are joined, as Converse wants
  them alternating; images as ``data:`` URLs become ``image`` blocks;
- ``max_tokens`` (``max_completion_tokens``), ``temperature``, ``top_p``, ``stop`` become
  ``inferenceConfig``; ``tools`` and ``tool_choice`` become ``toolConfig``;
- the answer's ``usage`` (``inputTokens`` without the cache's, ``cacheReadInputTokens``,
  ``cacheWriteInputTokens``, ``outputTokens``) becomes Chat Completions' usage, cache
  reads and writes counted as prompt tokens and the reads as ``cached_tokens``;
- a stream's exception event becomes an ``error`` chunk the OpenAI SDKs raise.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
_IMAGE = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}


def request(body: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions request body as Converse's (see the module docstring)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for message in body.get("messages") or []:
        role = message.get("role")
        if role in ("system", "developer"):
            system += [{"text": t} for t in _texts(message.get("content"))]
            continue
        if role == "tool":
            texts = [{"text": t} for t in _texts(message.get("content"))]
            use = str(message.get("tool_call_id", ""))
            _join(turns, "user", [{"toolResult": {"toolUseId": use, "content": texts}}])
        elif role == "assistant":
            _join(turns, "assistant", _assistant(message))
        else:
            _join(turns, "user", _blocks(message.get("content")))
    sent: dict[str, Any] = {"messages": turns}
    if system:
        sent["system"] = system
    config = _inference(body)
    if config:
        sent["inferenceConfig"] = config
    tools = _tools(body)
    if tools:
        sent["toolConfig"] = tools
    return sent


def _join(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"] += blocks
    else:
        turns.append({"role": role, "content": blocks})


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    if isinstance(content, list):
        return [str(p["text"]) for p in content if isinstance(p, dict) and p.get("text")]
    return []


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A user message's content as Converse blocks (text, ``data:`` URL images)."""
    if not isinstance(content, list):
        return [{"text": t} for t in _texts(content)]
    blocks: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "image_url":
            blocks.append(_image(str((part.get("image_url") or {}).get("url", ""))))
        elif part.get("text"):
            blocks.append({"text": str(part["text"])})
    return blocks


def _image(url: str) -> dict[str, Any]:
    head, _, data = url.partition(",")
    kind = head.removeprefix("data:").removesuffix(";base64")
    if not url.startswith("data:") or kind not in _IMAGE:
        raise ValueError("Bedrock takes images only as data: URLs (png, jpeg, gif, webp)")
    return {"image": {"format": _IMAGE[kind], "source": {"bytes": data}}}


def _assistant(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"text": t} for t in _texts(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = {"arguments": function.get("arguments")}
        use = {"toolUseId": str(call.get("id", "")), "name": str(function.get("name", ""))}
        blocks.append({"toolUse": use | {"input": arguments}})
    return blocks


def _inference(body: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    most = body.get("max_completion_tokens") or body.get("max_tokens")
    if most:
        config["maxTokens"] = int(most)
    if body.get("temperature") is not None:
        config["temperature"] = body["temperature"]
    if body.get("top_p") is not None:
        config["topP"] = body["top_p"]
    stop = body.get("stop")
    if stop:
        config["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    return config


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    specs = []
    for tool in body.get("tools") or []:
        function = tool.get("function") or {}
        spec = {"name": function.get("name", ""), "inputSchema": {"json": function.get(
            "parameters") or {"type": "object", "properties": {}}}}  # fmt: skip
        if function.get("description"):
            spec["description"] = function["description"]
        specs.append({"toolSpec": spec})
    if not specs:
        return {}
    config: dict[str, Any] = {"tools": specs}
    choice = body.get("tool_choice")
    if choice == "required":
        config["toolChoice"] = {"any": {}}
    elif choice == "auto":
        config["toolChoice"] = {"auto": {}}
    elif isinstance(choice, dict) and (choice.get("function") or {}).get("name"):
        config["toolChoice"] = {"tool": {"name": choice["function"]["name"]}}
    return config


def usage(found: dict[str, Any]) -> dict[str, Any]:
    """Converse's ``usage`` as Chat Completions' (cache reads and writes are prompt
    tokens; the reads are its ``cached_tokens``)."""
    read = int(found.get("cacheReadInputTokens") or 0)
    written = int(found.get("cacheWriteInputTokens") or 0)
    prompt = int(found.get("inputTokens") or 0) + read + written
    output = int(found.get("outputTokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": read},
    }


def _chunk(call: str, model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _sse(_envelope(call, model, "chat.completion.chunk") | {"choices": [choice]})


def _envelope(call: str, model: str, kind: str) -> dict[str, Any]:
    return {"id": call, "object": kind, "created": int(time.time()), "model": model}


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


class ConverseToChat:
    """Converse's answer (JSON) in, a chat completion out (at `close`)."""

    content_type = "application/json"

    def __init__(self, model: str) -> None:
        self.model = model
        self._body = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._body += data
        return b""

    def close(self) -> bytes:
        answer = json.loads(self._body or b"{}")
        blocks = ((answer.get("output") or {}).get("message") or {}).get("content") or []
        text = "".join(str(b["text"]) for b in blocks if "text" in b)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = [b["toolUse"] for b in blocks if "toolUse" in b]
        if calls:
            message["tool_calls"] = [_tool_call(use) for use in calls]
        finish = _STOP.get(str(answer.get("stopReason")), "stop")
        choice = {"index": 0, "message": message, "finish_reason": finish}
        call = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        completion = _envelope(call, self.model, "chat.completion") | {"choices": [choice]}
        completion["usage"] = usage(answer.get("usage") or {})
        return json.dumps(completion).encode()


def _tool_call(use: dict[str, Any]) -> dict[str, Any]:
    arguments = json.dumps(use.get("input", {}))
    function = {"name": use.get("name", ""), "arguments": arguments}
    return {"id": use.get("toolUseId", ""), "type": "function", "function": function}


class ConverseStreamToChat:
    """Converse's stream (AWS event-stream frames) in, Chat Completions' SSE out; the
    usage chunk when the request asked for it (`include_usage`)."""

    content_type = "text/event-stream"

    def __init__(self, model: str, include_usage: bool) -> None:
        from botocore.eventstream import EventStreamBuffer

        self.model, self.include_usage = model, include_usage
        self._buffer = EventStreamBuffer()
        self._call = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self._tools: dict[int, int] = {}  # Converse's block index: the tool call's index

    def feed(self, data: bytes) -> bytes:
        self._buffer.add_data(data)
        out = bytearray()
        for message in self._buffer:
            payload = json.loads(message.payload or b"{}")
            headers = message.headers
            if headers.get(":message-type") != "event":
                kind = headers.get(":exception-type") or headers.get(":error-code") or "error"
                text = payload.get("message") or headers.get(":error-message") or kind
                out += _sse({"error": {"type": str(kind), "message": str(text)}})
                continue
            out += self._event(str(headers.get(":event-type")), payload)
        return bytes(out)

    def _event(self, kind: str, payload: dict[str, Any]) -> bytes:
        call, model = self._call, self.model
        if kind == "messageStart":
            return _chunk(call, model, {"role": "assistant", "content": ""})
        index = int(payload.get("contentBlockIndex") or 0)
        if kind == "contentBlockStart" and "toolUse" in (payload.get("start") or {}):
            use = payload["start"]["toolUse"]
            self._tools[index] = len(self._tools)
            tool = {"index": self._tools[index], "id": use.get("toolUseId", ""),
                    "type": "function", "function": {"name": use.get("name", ""),
                                                     "arguments": ""}}  # fmt: skip
            return _chunk(call, model, {"tool_calls": [tool]})
        delta = payload.get("delta") or {}
        if kind == "contentBlockDelta" and "text" in delta:
            return _chunk(call, model, {"content": delta["text"]})
        if kind == "contentBlockDelta" and "toolUse" in delta and index in self._tools:
            arguments = str(delta["toolUse"].get("input", ""))
            tool = {"index": self._tools[index], "function": {"arguments": arguments}}
            return _chunk(call, model, {"tool_calls": [tool]})
        if kind == "messageStop":
            return _chunk(call, model, {}, _STOP.get(str(payload.get("stopReason")), "stop"))
        if kind == "metadata" and self.include_usage and "usage" in payload:
            used = _envelope(call, model, "chat.completion.chunk") | {"choices": []}
            return _sse(used | {"usage": usage(payload["usage"])})
        return b""

    def close(self) -> bytes:
        return b"data: [DONE]\n\n"
