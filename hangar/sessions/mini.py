"""mini-swe-agent's trajectory (``*.traj.json``, one JSON object rewritten after every
step): ``trajectory_format`` ``mini-swe-agent-1.x``, ``info`` (its exit status) and
``messages`` in the OpenAI Chat Completions shape: the system and user prompts, each
assistant message with its ``tool_calls`` (one tool, ``bash``) and, under ``extra``, the
provider's response with its usage; each ``tool`` message with the command's return code
and output under ``extra``; an ``exit`` message last."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hangar.sessions import Records, SessionEvent, SessionFormat
from hangar.sessions.common import ToolNames, as_text, call_effects, capped, digest

#: Its one tool.
TOOLS = ToolNames(shells=frozenset({"bash"}), read=frozenset(), write=frozenset())


def _recognizes(record: dict[str, Any]) -> bool:
    return str(record.get("trajectory_format", "")).startswith("mini-swe-agent")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _usage(response: dict[str, Any]) -> dict[str, int]:
    usage = _dict(response.get("usage"))
    prompt, completion = (
        _dict(usage.get("prompt_tokens_details")),
        _dict(usage.get("completion_tokens_details")),
    )
    return {
        "input": int(usage.get("prompt_tokens") or 0),
        "output": int(usage.get("completion_tokens") or 0),
        "cached_input": int(prompt.get("cached_tokens") or 0),
        "reasoning": int(completion.get("reasoning_tokens") or 0),
    }


class _Reader:
    def __init__(self, name: str) -> None:
        self.session = name
        self.calls: dict[str, tuple[str, dict[str, Any]]] = {}

    def read(self, message: dict[str, Any]) -> list[SessionEvent]:
        extra = _dict(message.get("extra"))
        base: dict[str, Any] = {"source": "mini", "session": self.session,
                                "ts": str(extra.get("timestamp", ""))}  # fmt: skip
        role = message.get("role")
        if role == "system":
            return []
        if role == "user":
            return [SessionEvent(**base, type="user", text=capped(as_text(message.get("content"))))]
        if role == "assistant":
            return self.assistant(base, message, extra)
        if role == "tool":
            return self.result(base, message, extra)
        if role == "exit":
            return []
        return [SessionEvent(**base, type="raw", raw=message)]

    def assistant(
        self, base: dict[str, Any], message: dict[str, Any], extra: dict[str, Any]
    ) -> list[SessionEvent]:
        response = _dict(extra.get("response"))
        model = str(response.get("model", ""))
        events = [SessionEvent(**base, type="model_call", model=model, usage=_usage(response))]
        if text := as_text(message.get("content")):
            events.append(SessionEvent(**base, type="assistant", model=model, text=capped(text)))
        for call in message.get("tool_calls") or []:
            function = _dict(_dict(call).get("function"))
            call_id, name = str(_dict(call).get("id", "")), str(function.get("name", ""))
            try:
                args = json.loads(function.get("arguments") or "{}")
            except (TypeError, ValueError):
                args = {}
            args = args if isinstance(args, dict) else {}
            self.calls[call_id] = (name, args)
            events.append(
                SessionEvent(**base, type="tool_call", tool=name, call_id=call_id, arguments=args)
            )
        return events

    def result(
        self, base: dict[str, Any], message: dict[str, Any], extra: dict[str, Any]
    ) -> list[SessionEvent]:
        call_id = str(message.get("tool_call_id", ""))
        name, args = self.calls.get(call_id, ("bash", {}))
        code = extra.get("returncode")
        exit_code = code if isinstance(code, int) else None
        output = str(extra.get("raw_output") or "")
        ok = exit_code == 0 and not extra.get("exception_info")
        text = as_text(message.get("content"))
        result = SessionEvent(**base, type="tool_result", tool=name, call_id=call_id, ok=ok,
                              text=capped(text), sha256=digest(text))  # fmt: skip
        effects = call_effects(
            base, TOOLS, name, call_id, args, text, ok, exit_code=exit_code, shell_output=output
        )
        return [result, *effects]


def _events(records: Records, name: str) -> Iterator[SessionEvent]:
    (trajectory,) = records
    info = _dict(trajectory.get("info"))
    reader = _Reader(name)
    yield SessionEvent(source="mini", session=name, type="turn_start")
    for message in trajectory.get("messages") or []:
        if isinstance(message, dict):
            yield from reader.read(message)
    status = str(info.get("exit_status", ""))
    yield SessionEvent(source="mini", session=name, type="turn_end", text=status,
                       partial=status != "Submitted")  # fmt: skip


FORMAT = SessionFormat(name="mini", recognizes=_recognizes, events=_events)
