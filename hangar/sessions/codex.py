"""Codex rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): one record
a line, ``{timestamp, type, payload}``; ``session_meta`` first."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from hangar.sessions import Records, SessionEvent, SessionFormat
from hangar.sessions.common import as_text, capped, digest, read_events, shell_events

#: Tool names Codex runs shell commands under (versions differ).
SHELL_TOOLS = {"exec_command", "shell", "local_shell", "container.exec"}
_EXIT = re.compile(r"(?:Process exited with code|Exit code:)\s*(-?\d+)")


def _recognizes(first: dict[str, Any]) -> bool:
    return first.get("type") == "session_meta" and isinstance(first.get("payload"), dict)


def _command(arguments: Any) -> str:
    """The command line of a shell tool call's arguments."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return str(arguments)
    if not isinstance(arguments, dict):
        return ""
    cmd = arguments.get("cmd", arguments.get("command", ""))
    if isinstance(cmd, list):
        cmd = cmd[-1] if len(cmd) >= 3 and cmd[1] in ("-lc", "-c") else " ".join(map(str, cmd))
    return str(cmd)


class _Reader:
    """State across a rollout's records: the session, the turn, open calls."""

    def __init__(self, name: str) -> None:
        self.session = name
        self.turn = ""
        self.calls: dict[str, tuple[str, str]] = {}  # call id -> (tool, command)
        self.open_turns: set[str] = set()
        self.shell_done: set[str] = set()

    def base(self, record: dict[str, Any]) -> dict[str, Any]:
        return {
            "source": "codex",
            "session": self.session,
            "ts": str(record.get("timestamp", "")),
            "turn": self.turn,
        }

    def read(self, record: dict[str, Any]) -> list[SessionEvent]:
        kind, payload = record.get("type"), record.get("payload")
        if not isinstance(payload, dict):
            return [SessionEvent(**self.base(record), type="raw", raw=record)]
        if kind == "session_meta":
            self.session = str(payload.get("id") or self.session)
            return [
                SessionEvent(**self.base(record), type="session", text=capped(payload.get("cwd")))
            ]
        if kind == "turn_context":
            self.turn = str(payload.get("turn_id") or self.turn)
            return []
        if kind in ("world_state", "token_usage_record"):
            return []  # the harness's state; usage is read from `token_count` once a call
        if kind == "response_item":
            return self.response_item(record, payload)
        if kind == "event_msg":
            return self.event_msg(record, payload)
        return [SessionEvent(**self.base(record), type="raw", raw=record)]

    def response_item(self, record: dict[str, Any], p: dict[str, Any]) -> list[SessionEvent]:
        base = self.base(record)
        kind = p.get("type")
        if kind == "message":
            role = p.get("role")
            text = as_text(p.get("content"))
            if role == "assistant":
                return [SessionEvent(**base, type="assistant", text=capped(text))]
            if role == "user":
                return [SessionEvent(**base, type="user", text=capped(text))]
            return []  # developer instructions: the harness's, not a turn
        if kind in ("function_call", "custom_tool_call", "local_shell_call"):
            tool = str(p.get("name") or kind)
            call_id = str(p.get("call_id") or p.get("id") or "")
            arguments = p.get("arguments", p.get("input", p.get("action")))
            self.calls[call_id] = (tool, _command(arguments) if tool in SHELL_TOOLS else "")
            return [
                SessionEvent(
                    **base, type="tool_call", tool=tool, call_id=call_id, arguments=arguments
                )
            ]
        if kind in ("function_call_output", "custom_tool_call_output"):
            call_id = str(p.get("call_id") or "")
            tool, command = self.calls.get(call_id, ("", ""))
            output = p.get("output")
            text = output if isinstance(output, str) else as_text(output)
            exit_match = _EXIT.search(text)
            code = int(exit_match.group(1)) if exit_match else None
            ok = code == 0 if code is not None else None
            result = SessionEvent(
                **base, type="tool_result", tool=tool, call_id=call_id, ok=ok,
                text=capped(text), sha256=digest(text),
            )  # fmt: skip
            events = [result]
            if command and call_id not in self.shell_done:
                self.shell_done.add(call_id)
                events.append(
                    SessionEvent(
                        **base,
                        type="shell",
                        call_id=call_id,
                        command=command,
                        exit_code=code,
                        ok=ok,
                    )
                )
                events += shell_events(base, command, text, ok)
            return events
        if kind == "reasoning":
            return []
        return [SessionEvent(**base, type="raw", raw=record)]

    def event_msg(self, record: dict[str, Any], p: dict[str, Any]) -> list[SessionEvent]:
        base = self.base(record)
        kind = p.get("type")
        if kind == "task_started":
            self.turn = str(p.get("turn_id") or self.turn)
            self.open_turns.add(self.turn)
            return [SessionEvent(**{**base, "turn": self.turn}, type="turn_start")]
        if kind in ("task_complete", "turn_aborted"):
            turn = str(p.get("turn_id") or self.turn)
            self.open_turns.discard(turn)
            return [
                SessionEvent(
                    **{**base, "turn": turn}, type="turn_end", partial=kind != "task_complete"
                )
            ]
        if kind == "token_count":
            info = p.get("info") or {}
            last = info.get("last_token_usage") if isinstance(info, dict) else None
            if not isinstance(last, dict):
                return []
            usage = {
                "input": int(last.get("input_tokens", 0)),
                "output": int(last.get("output_tokens", 0)),
                "cached_input": int(last.get("cached_input_tokens", 0)),
                "reasoning": int(last.get("reasoning_output_tokens", 0)),
            }
            return [SessionEvent(**base, type="model_call", usage=usage)]
        if kind == "item_completed":
            return self.item(base, p.get("item"))
        if kind in ("error", "stream_error"):
            return [SessionEvent(**base, type="error", text=capped(p.get("message")))]
        return []  # echoes of the response items (user_message, agent_message...)

    def item(self, base: dict[str, Any], item: Any) -> list[SessionEvent]:
        """A completed command: its exit code and the files Codex itself parsed from it."""
        if not isinstance(item, dict) or item.get("type") != "CommandExecution":
            return []
        call_id = str(item.get("id", ""))
        if call_id in self.shell_done:
            return []
        command = item.get("command")
        line = _command({"cmd": command})
        code = item.get("exit_code")
        output = str(item.get("aggregated_output", ""))
        self.shell_done.add(call_id)
        events = [
            SessionEvent(
                **base, type="shell", call_id=call_id, command=line, exit_code=code, ok=code == 0
            )
        ]
        parsed = item.get("parsed_cmd")
        reads = [
            str(part["path"])
            for part in (parsed if isinstance(parsed, list) else [])
            if isinstance(part, dict) and part.get("type") == "read" and part.get("path")
        ]
        if reads and code == 0:  # what Codex itself parsed the command into
            return events + [e for path in reads for e in read_events(base, path, output)]
        # Codex could not parse it (``unknown``): read the words, as for other agents
        return events + shell_events(base, line, output, code == 0)


def _events(records: Records, name: str) -> Iterator[SessionEvent]:
    reader = _Reader(name)
    for record in records:
        yield from reader.read(record)
    for turn in sorted(reader.open_turns):  # started, never completed
        yield SessionEvent(
            source="codex", session=reader.session, type="turn_end", turn=turn, partial=True
        )


FORMAT = SessionFormat(name="codex", recognizes=_recognizes, events=_events)
