"""Claude Code project files (``~/.claude/projects/<folder>/<session id>.jsonl``): one
record a line with a ``type`` (``user``, ``assistant``, ``attachment``, ``summary``...)
and a ``sessionId``; messages in the Anthropic API's shape."""

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
)

#: Records of the CLI's own bookkeeping: nothing the agent did.
BOOKKEEPING = {
    "queue-operation",
    "atis-latch",
    "last-prompt",
    "tools-used",
    "api-request-shape",
    "api-request-blob",
    "api-request",
    "summary",
    "file-history-snapshot",
    "cost-state",
}
#: Its tools by kind.
TOOLS = ToolNames(
    shells=frozenset({"Bash"}),
    read=frozenset({"Read", "NotebookRead"}),
    write=frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"}),
    skill=frozenset({"Skill"}),
    paths=("file_path", "notebook_path"),
    skill_argument="skill",
)


def _recognizes(first: dict[str, Any]) -> bool:
    return "sessionId" in first and isinstance(first.get("type"), str)


class _Reader:
    def __init__(self, name: str) -> None:
        self.session = name
        self.calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self.last_stop = ""

    def base(self, record: dict[str, Any]) -> dict[str, Any]:
        self.session = str(record.get("sessionId") or self.session)
        return {"source": "claude", "session": self.session, "ts": str(record.get("timestamp", ""))}

    def read(self, record: dict[str, Any]) -> list[SessionEvent]:
        kind = record.get("type")
        base = self.base(record)
        if kind in BOOKKEEPING:
            return []
        if kind == "attachment":
            return self.attachment(base, record.get("attachment"), record)
        message = record.get("message")
        if kind == "assistant" and isinstance(message, dict):
            return self.assistant(base, message)
        if kind == "user" and isinstance(message, dict):
            return self.user(base, message, record.get("toolUseResult"))
        if kind == "system" and record.get("level") == "error":
            return [SessionEvent(**base, type="error", text=capped(record.get("content")))]
        return [SessionEvent(**base, type="raw", raw=record)]

    def attachment(
        self, base: dict[str, Any], att: Any, record: dict[str, Any]
    ) -> list[SessionEvent]:
        if isinstance(att, dict) and att.get("type") in ("skill", "invoked_skills"):
            names = att.get("skills") or [att.get("name", "")]
            return [SessionEvent(**base, type="skill", skill=str(n)) for n in names if n]
        return []  # the environment, the model, listings: context, not actions

    def assistant(self, base: dict[str, Any], message: dict[str, Any]) -> list[SessionEvent]:
        model = str(message.get("model", ""))
        events = []
        usage = message.get("usage")
        if isinstance(usage, dict):
            events.append(
                SessionEvent(
                    **base,
                    type="model_call",
                    model=model,
                    usage={
                        "input": int(usage.get("input_tokens", 0))
                        + int(usage.get("cache_read_input_tokens", 0))
                        + int(usage.get("cache_creation_input_tokens", 0)),
                        "output": int(usage.get("output_tokens", 0)),
                        "cached_input": int(usage.get("cache_read_input_tokens", 0)),
                    },
                )
            )
        self.last_stop = str(message.get("stop_reason") or "")
        events += assistant_blocks(
            base, message.get("content"), model, self.calls, call="tool_use", arguments="input"
        )
        return events

    def user(
        self, base: dict[str, Any], message: dict[str, Any], result: Any
    ) -> list[SessionEvent]:
        content = message.get("content")
        if isinstance(content, str):
            return [SessionEvent(**base, type="user", text=capped(content))]
        events = []
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                events += self.tool_result(base, block, result if isinstance(result, dict) else {})
            elif block.get("type") == "text":
                events.append(SessionEvent(**base, type="user", text=capped(block.get("text"))))
        return events

    def tool_result(
        self, base: dict[str, Any], block: dict[str, Any], result: dict[str, Any]
    ) -> list[SessionEvent]:
        call_id = str(block.get("tool_use_id", ""))
        tool, arguments = self.calls.get(call_id, ("", {}))
        text = as_text(block.get("content"))
        failed = bool(block.get("is_error")) or bool(result.get("interrupted"))
        events = [
            SessionEvent(
                **base, type="tool_result", tool=tool, call_id=call_id, ok=not failed,
                text=capped(text), sha256=digest(text),
            )
        ]  # fmt: skip
        output = str(result.get("stdout", text)) + str(result.get("stderr", ""))
        # its Skill tool loads a skill it has (one it does not have is an error result)
        return events + call_effects(
            base, TOOLS, tool, call_id, arguments, text, not failed, shell_output=output
        )


def _events(records: Records, name: str) -> Iterator[SessionEvent]:
    reader = _Reader(name)
    started = False
    for record in records:
        for event in reader.read(record):
            if not started and event.type in ("user", "assistant", "tool_call"):
                started = True
                yield SessionEvent(
                    source="claude", session=reader.session, ts=event.ts, type="turn_start"
                )
            yield event
    if started:  # the last answer ended the turn, or the session stopped mid-way
        done = reader.last_stop in ("end_turn", "stop_sequence")
        yield SessionEvent(
            source="claude", session=reader.session, type="turn_end", partial=not done
        )


FORMAT = SessionFormat(name="claude", recognizes=_recognizes, events=_events)
