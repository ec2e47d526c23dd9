"""hangar's own trace (``trace.jsonl``: ``{ts, seq, kind, ...}``): the host-side chat
agents' turns and tool calls, every agent's output and the relay's model calls."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from hangar.sessions import Records, SessionEvent, SessionFormat
from hangar.sessions.common import capped, digest, read_events, shell_events

_EXIT = re.compile(r"^exit (-?\d+)")
#: Kinds that say nothing the audit reads (the raw output is in the trace itself).
QUIET = {"stdout", "stderr", "collect_skipped", "truncated"}


def _recognizes(first: dict[str, Any]) -> bool:
    return "kind" in first and "seq" in first and "ts" in first


def _ts(value: Any) -> str:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC).isoformat()
    return str(value or "")


def _events(records: Records, name: str) -> Iterator[SessionEvent]:
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    turn = ""
    ended = False
    for r in records:
        base: dict[str, Any] = {"source": "trace", "session": name, "ts": _ts(r.get("ts"))}
        base["turn"] = turn
        kind = r.get("kind")
        if kind in QUIET:
            continue
        if kind == "agent_start":
            yield SessionEvent(**base, type="turn_start", text=capped(r.get("agent")))
        elif kind == "model_request":
            turn = str(r.get("turn", turn))
        elif kind == "model_call":
            raw_usage = r.get("usage")
            usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
            yield SessionEvent(
                **base,
                type="model_call",
                model=str(r.get("model", "")),
                ok=r.get("error") is None and int(r.get("status") or 200) < 400,
                text=capped(r.get("error") or ""),
                usage={
                    "input": int(usage.get("input_tokens", 0)),
                    "output": int(usage.get("output_tokens", 0)),
                    "cached_input": int(usage.get("cached_input_tokens", 0)),
                    "reasoning": int(usage.get("reasoning_tokens", 0)),
                },
            )
        elif kind == "model_response":
            yield SessionEvent(**base, type="assistant", text=capped(r.get("text")))
        elif kind in ("model_refused", "model_error"):
            yield SessionEvent(**base, type="error", text=capped(r.get("reason") or r.get("error")))
        elif kind == "tool_call":
            call_id, tool = str(r.get("id", "")), str(r.get("name", ""))
            raw = r.get("arguments")
            arguments: dict[str, Any] = raw if isinstance(raw, dict) else {}
            calls[call_id] = (tool, arguments)
            yield SessionEvent(
                **base, type="tool_call", tool=tool, call_id=call_id, arguments=arguments
            )
        elif kind == "tool_result":
            yield from _tool_result(base, r, calls)
        elif kind in ("agent_end", "trace_end"):
            if kind == "agent_end" and r.get("error"):
                yield SessionEvent(**base, type="error", text=capped(r.get("error")))
            if not ended:
                ended = True
                # a chat agent says `completed`; a command agent's run completed when it
                # exited 0 within its time
                done = bool(r.get("completed")) or (
                    r.get("exit_code") == 0 and not r.get("timed_out") and not r.get("oom_killed")
                )
                yield SessionEvent(
                    **base, type="turn_end", partial=not done, text=capped(r.get("reason"))
                )
        else:
            yield SessionEvent(**base, type="raw", raw=r)


def _tool_result(
    base: dict[str, Any], r: dict[str, Any], calls: dict[str, tuple[str, dict[str, Any]]]
) -> Iterator[SessionEvent]:
    call_id = str(r.get("id", ""))
    tool, arguments = calls.get(call_id, ("", {}))
    output = str(r.get("output", ""))
    code_match = _EXIT.match(output) if tool == "bash" else None
    code = int(code_match.group(1)) if code_match else None
    ok = code == 0 if code is not None else not output.startswith("error:")
    yield SessionEvent(
        **base, type="tool_result", tool=tool, call_id=call_id, ok=ok, text=capped(output),
        sha256=digest(output),
    )  # fmt: skip
    if tool == "bash":
        command = str(arguments.get("command", ""))
        yield SessionEvent(
            **base, type="shell", call_id=call_id, command=command, exit_code=code, ok=ok
        )
        # what the command printed, without the tool's own "exit N" first line
        printed = output.split("\n", 1)[1] if code_match and "\n" in output else output
        yield from shell_events(base, command, printed, ok)
    elif tool in ("edit", "read", "view") and arguments.get("path"):
        path = str(arguments["path"])
        reading = tool != "edit" or arguments.get("command") == "view"
        if reading and ok:
            yield from read_events(base, path, output)
        elif ok:
            yield SessionEvent(**base, type="file_write", path=path)


FORMAT = SessionFormat(name="trace", recognizes=_recognizes, events=_events)
