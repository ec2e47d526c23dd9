"""Pi's session files (``~/.pi/agent/sessions/--<folder>--/<time>_<id>.jsonl``): a
``session`` header, then entries (``message``, ``model_change``, ``compaction``...) whose
messages are user, assistant (text, thinking, ``toolCall`` blocks, usage, a stop
reason), ``toolResult`` and ``bashExecution``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hangar.sessions import Records, SessionEvent, SessionFormat
from hangar.sessions.common import (
    ToolNames,
    as_text,
    assistant_blocks,
    call_effects,
    capped,
    digest,
    shell_events,
)

#: Entries that change settings or the view of the tree, not what the agent did.
SETTINGS = {"model_change", "thinking_level_change", "label", "session_info", "custom"}


#: Its tools by kind.
TOOLS = ToolNames(
    shells=frozenset({"bash"}),
    read=frozenset({"read"}),
    write=frozenset({"write", "edit"}),
    paths=("path", "file_path"),
)


def _recognizes(first: dict[str, Any]) -> bool:
    return first.get("type") == "session" and "cwd" in first and "version" in first


class _Reader:
    def __init__(self, name: str) -> None:
        self.session = name
        self.calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self.last_stop = ""

    def base(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"source": "pi", "session": self.session, "ts": str(record.get("timestamp", ""))}

    def read(self, record: dict[str, Any]) -> list[SessionEvent]:
        kind = record.get("type")
        if kind == "session":
            self.session = str(record.get("id") or self.session)
            return [
                SessionEvent(**self.base(record), type="session", text=capped(record.get("cwd")))
            ]
        if kind in SETTINGS:
            return []
        message = record.get("message")
        if kind == "message" and isinstance(message, dict):
            return self.message(self.base(record), message)
        return [SessionEvent(**self.base(record), type="raw", raw=record)]

    def message(self, base: dict[str, Any], m: dict[str, Any]) -> list[SessionEvent]:
        role = m.get("role")
        if role == "user":
            return [SessionEvent(**base, type="user", text=capped(as_text(m.get("content"))))]
        if role == "assistant":
            return self.assistant(base, m)
        if role == "toolResult":
            return self.tool_result(base, m)
        if role == "bashExecution":
            command, output = str(m.get("command", "")), str(m.get("output", ""))
            code = m.get("exitCode")
            ok = code == 0 and not m.get("cancelled")
            shell = SessionEvent(**base, type="shell", command=command, exit_code=code, ok=ok)
            return [shell, *shell_events(base, command, output, ok)]
        return [SessionEvent(**base, type="raw", raw=m)]

    def assistant(self, base: dict[str, Any], m: dict[str, Any]) -> list[SessionEvent]:
        model = str(m.get("model", ""))
        self.last_stop = str(m.get("stopReason") or "")
        events = []
        usage = m.get("usage")
        if isinstance(usage, dict):
            events.append(
                SessionEvent(
                    **base,
                    type="model_call",
                    model=model,
                    usage={
                        "input": int(usage.get("input", 0)) + int(usage.get("cacheRead", 0)),
                        "output": int(usage.get("output", 0)),
                        "cached_input": int(usage.get("cacheRead", 0)),
                    },
                )
            )
        events += assistant_blocks(
            base, m.get("content"), model, self.calls, call="toolCall", arguments="arguments"
        )
        if self.last_stop in ("error", "aborted"):
            events.append(
                SessionEvent(
                    **base, type="error", text=capped(m.get("errorMessage") or self.last_stop)
                )
            )
        return events

    def tool_result(self, base: dict[str, Any], m: dict[str, Any]) -> list[SessionEvent]:
        call_id = str(m.get("toolCallId", ""))
        tool, arguments = self.calls.get(call_id, (str(m.get("toolName", "")), {}))
        text = as_text(m.get("content"))
        ok = not m.get("isError")
        result = SessionEvent(
            **base,
            type="tool_result",
            tool=tool,
            call_id=call_id,
            ok=ok,
            text=capped(text),
            sha256=digest(text),
        )
        events = [result]
        return events + call_effects(base, TOOLS, tool, call_id, arguments, text, ok)


def _events(records: Records, name: str) -> Iterator[SessionEvent]:
    reader = _Reader(name)
    started = False
    for record in records:
        for event in reader.read(record):
            if not started and event.type in ("user", "assistant", "tool_call"):
                started = True
                yield SessionEvent(
                    source="pi", session=reader.session, ts=event.ts, type="turn_start"
                )
            yield event
    if started:
        yield SessionEvent(
            source="pi", session=reader.session, type="turn_end", partial=reader.last_stop != "stop"
        )


FORMAT = SessionFormat(name="pi", recognizes=_recognizes, events=_events)
