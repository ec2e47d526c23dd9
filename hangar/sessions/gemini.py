"""Gemini CLI's chat files (``~/.gemini/tmp/<project>/chats/session-*.jsonl``): a header
record (``sessionId``, ``projectHash``), then messages (``type`` ``user`` or ``gemini``)
and ``$set`` updates. A model message is written again once its tool calls ran (the same
``id``, with ``toolCalls`` and their results): the last record of an id is the message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hangar.sessions import Records, SessionEvent, SessionFormat
from hangar.sessions.common import ToolNames, as_text, call_effects, capped, digest

#: Its tools by kind (Qwen Code, a fork, names them the same).
TOOLS = ToolNames(
    shells=frozenset({"run_shell_command"}),
    read=frozenset({"read_file", "read_many_files"}),
    write=frozenset({"write_file", "replace", "edit"}),
    skill=frozenset({"activate_skill"}),
    paths=("file_path", "absolute_path", "path"),
)


def _recognizes(first: dict[str, Any]) -> bool:
    return "sessionId" in first and "projectHash" in first


def _output(result: Any) -> str:
    """The text of a tool call's result (its function responses' outputs)."""
    texts = []
    for part in result if isinstance(result, list) else []:
        response = (
            (part.get("functionResponse") or {}).get("response") if isinstance(part, dict) else None
        )
        if isinstance(response, dict):
            texts.append(str(response.get("output") or response.get("error") or ""))
    return "\n".join(texts)


def _tool_events(base: dict[str, Any], call: dict[str, Any]) -> list[SessionEvent]:
    name, call_id = str(call.get("name", "")), str(call.get("id", ""))
    raw = call.get("args")
    arguments: dict[str, Any] = raw if isinstance(raw, dict) else {}
    ok = call.get("status") == "success"
    text = _output(call.get("result"))
    events = [
        SessionEvent(**base, type="tool_call", tool=name, call_id=call_id, arguments=arguments),
        SessionEvent(**base, type="tool_result", tool=name, call_id=call_id, ok=ok,
                     text=capped(text), sha256=digest(text)),
    ]  # fmt: skip
    return events + tool_effects(base, name, call_id, arguments, text, ok)


def tool_effects(
    base: dict[str, Any],
    name: str,
    call_id: str,
    arguments: dict[str, Any],
    text: str,
    ok: bool,
    exit_code: int | None = None,
) -> list[SessionEvent]:
    """What a finished call of one of Gemini CLI's tools (and its forks') did."""
    return call_effects(base, TOOLS, name, call_id, arguments, text, ok, exit_code=exit_code)


def _events(records: Records, name: str) -> Iterator[SessionEvent]:
    session = str(records[0].get("sessionId") or name) if records else name
    messages: dict[str, dict[str, Any]] = {}
    raw: list[dict[str, Any]] = []
    for r in records[1:]:
        if "$set" in r:
            continue
        if r.get("type") in ("user", "gemini", "info", "error", "warning") and r.get("id"):
            messages[str(r["id"])] = r  # the last record of a message is the message
        else:
            raw.append(r)
    started = False
    last: dict[str, Any] | None = None
    for m in messages.values():
        base: dict[str, Any] = {
            "source": "gemini",
            "session": session,
            "ts": str(m.get("timestamp", "")),
        }
        if not started:
            started = True
            yield SessionEvent(**base, type="turn_start")
        kind = m.get("type")
        if kind == "user":
            yield SessionEvent(**base, type="user", text=capped(as_text(m.get("content"))))
        elif kind == "gemini":
            last = m
            given = m.get("tokens")
            tokens: dict[str, Any] = given if isinstance(given, dict) else {}
            yield SessionEvent(
                **base, type="model_call", model=str(m.get("model", "")),
                usage={"input": int(tokens.get("input", 0)),
                       "output": int(tokens.get("output", 0)) + int(tokens.get("thoughts", 0)),
                       "cached_input": int(tokens.get("cached", 0)),
                       "reasoning": int(tokens.get("thoughts", 0))},
            )  # fmt: skip
            if m.get("content"):
                yield SessionEvent(**base, type="assistant", model=str(m.get("model", "")),
                                   text=capped(as_text(m.get("content"))))  # fmt: skip
            for call in m.get("toolCalls") or []:
                if isinstance(call, dict):
                    yield from _tool_events(base, call)
        elif kind == "error":
            yield SessionEvent(**base, type="error", text=capped(as_text(m.get("content"))))
        else:
            yield SessionEvent(**base, type="raw", raw=m)
    for r in raw:
        yield SessionEvent(source="gemini", session=session, type="raw", raw=r)
    if started:  # the last model message answered with no tool call left to run
        done = last is not None and not last.get("toolCalls")
        yield SessionEvent(source="gemini", session=session, type="turn_end", partial=not done)


FORMAT = SessionFormat(name="gemini", recognizes=_recognizes, events=_events)
