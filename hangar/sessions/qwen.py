"""Qwen Code's chat files (``~/.qwen/projects/<project>/chats/<session id>.jsonl``): one
record a line with ``uuid``, ``sessionId`` and a ``type`` (``user``, ``assistant``,
``tool_result``, ``system``), messages in the Gemini API's shape (``parts``), the usage
as ``usageMetadata`` and each tool's outcome as ``toolCallResult``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hangar.sessions import Records, SessionEvent, SessionFormat
from hangar.sessions.common import capped, digest
from hangar.sessions.gemini import tool_effects


def _recognizes(first: dict[str, Any]) -> bool:
    message = first.get("message")
    parts = isinstance(message, dict) and "parts" in message
    return "sessionId" in first and "uuid" in first and ("provenance" in first or parts)


def _parts(record: dict[str, Any]) -> list[dict[str, Any]]:
    message = record.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    return [p for p in parts or [] if isinstance(p, dict)]


class _Reader:
    def __init__(self, name: str) -> None:
        self.session = name
        self.calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self.pending = True  # no answer yet: a turn that ends here did not complete

    def read(self, r: dict[str, Any]) -> list[SessionEvent]:
        self.session = str(r.get("sessionId") or self.session)
        base: dict[str, Any] = {"source": "qwen", "session": self.session,
                                "ts": str(r.get("timestamp", ""))}  # fmt: skip
        kind = r.get("type")
        if kind == "system":
            return []  # the CLI's own bookkeeping (attribution, UI telemetry)
        if kind == "user":
            text = "\n".join(str(p["text"]) for p in _parts(r) if "text" in p)
            return [SessionEvent(**base, type="user", text=capped(text))]
        if kind == "assistant":
            return self.assistant(base, r)
        if kind == "tool_result":
            return [
                e for p in _parts(r) if "functionResponse" in p for e in self.result(base, r, p)
            ]
        return [SessionEvent(**base, type="raw", raw=r)]

    def assistant(self, base: dict[str, Any], r: dict[str, Any]) -> list[SessionEvent]:
        given = r.get("usageMetadata")
        meta: dict[str, Any] = given if isinstance(given, dict) else {}
        thoughts = int(meta.get("thoughtsTokenCount") or 0)
        events = [
            SessionEvent(**base, type="model_call", model=str(r.get("model", "")), usage={
                "input": int(meta.get("promptTokenCount") or 0),
                # converted from the OpenAI API's usage: its candidates include the reasoning
                "output": int(meta.get("candidatesTokenCount") or 0),
                "cached_input": int(meta.get("cachedContentTokenCount") or 0),
                "reasoning": thoughts,
            })
        ]  # fmt: skip
        self.pending = False
        for p in _parts(r):
            if p.get("text") and not p.get("thought"):
                events.append(SessionEvent(**base, type="assistant", text=capped(p["text"])))
            call = p.get("functionCall")
            if isinstance(call, dict):
                call_id, name = str(call.get("id", "")), str(call.get("name", ""))
                raw = call.get("args")
                args: dict[str, Any] = raw if isinstance(raw, dict) else {}
                self.calls[call_id] = (name, args)
                self.pending = True
                events.append(SessionEvent(**base, type="tool_call", tool=name, call_id=call_id,
                                           arguments=args))  # fmt: skip
        return events

    def result(
        self, base: dict[str, Any], r: dict[str, Any], part: dict[str, Any]
    ) -> list[SessionEvent]:
        response = part["functionResponse"] if isinstance(part["functionResponse"], dict) else {}
        call_id = str(response.get("id", ""))
        name, args = self.calls.get(call_id, (str(response.get("name", "")), {}))
        given = r.get("toolCallResult")
        outcome: dict[str, Any] = given if isinstance(given, dict) else {}
        display = (
            outcome.get("resultDisplay") if isinstance(outcome.get("resultDisplay"), dict) else {}
        )
        ok = outcome.get("status") == "success"
        body = response.get("response") if isinstance(response.get("response"), dict) else {}
        text = str((display or {}).get("output") or (body or {}).get("output") or "")
        events = [SessionEvent(**base, type="tool_result", tool=name, call_id=call_id, ok=ok,
                               text=capped(text), sha256=digest(text))]  # fmt: skip
        code = (display or {}).get("exitCode")
        exit_code = code if isinstance(code, int) else None
        return events + tool_effects(base, name, call_id, args, text, ok, exit_code)


def _events(records: Records, name: str) -> Iterator[SessionEvent]:
    reader = _Reader(name)
    started = False
    for record in records:
        for event in reader.read(record):
            if not started:
                started = True
                yield SessionEvent(source="qwen", session=reader.session, ts=event.ts,
                                   type="turn_start")  # fmt: skip
            yield event
    if started:  # the last answer left no tool call to run
        yield SessionEvent(source="qwen", session=reader.session, type="turn_end",
                           partial=reader.pending)  # fmt: skip


FORMAT = SessionFormat(name="qwen", recognizes=_recognizes, events=_events)
