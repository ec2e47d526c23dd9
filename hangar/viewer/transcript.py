"""A trial's trace (``trace.jsonl``) as a transcript people read, in order.

Each event becomes an `Item`: model calls (the request, the answer, its usage), tool calls
and their results, command output (consecutive chunks of one stream joined), refusals by
the relay, errors, the end. Everything is text here: the templates escape it. Long texts
fold; a page shows at most `MAX_ITEMS` items and `MAX_TEXT` characters of one text (the
whole file is one click away), so a trace of megabytes keeps the page responsive.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from hangar.sessions import SessionEvent, read_events

MAX_ITEMS = 2000
MAX_TEXT = 64 * 1024
#: Texts longer than this (characters or lines) fold.
FOLD_CHARS, FOLD_LINES = 1200, 25


class Block(BaseModel):
    """One labelled text of an item."""

    label: str
    text: str
    folded: bool = False
    """Shown folded (long)."""
    cut: int = 0
    """Characters left out (past `MAX_TEXT`)."""


class Item(BaseModel):
    """One step of the transcript."""

    seq: int
    t: float
    """Seconds since the first event."""
    kind: str
    """The event kind (``model_request``, ``tool_call``, ``stdout``...)."""
    title: str
    tone: str = ""
    """``refused``, ``error`` or ``""``: how it is marked."""
    blocks: list[Block] = Field(default_factory=list)


class Transcript(BaseModel):
    """The items, and what was left out."""

    items: list[Item]
    events: int
    """Events in the file."""
    shown: int
    """Events shown."""
    bad_lines: int = 0
    """Lines that are not JSON events."""


def block(label: str, value: Any) -> Block:
    """A text block, cut at `MAX_TEXT` and folded when long."""
    text = value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False)
    cut = max(0, len(text) - MAX_TEXT)
    text = text[:MAX_TEXT]
    folded = len(text) > FOLD_CHARS or text.count("\n") > FOLD_LINES
    return Block(label=label, text=text, folded=folded, cut=cut)


Shown = tuple[str, str, list[Block]]
"""(title, tone, blocks) of one event."""


def _request(f: dict[str, Any]) -> Shown:
    model = f" ({f['model']})" if "model" in f else ""
    blocks = [block(k, f[k]) for k in ("system", "user") if f.get(k)]
    return f"model request{_turn(f)}{model}", "", blocks


def _response(f: dict[str, Any]) -> Shown:
    blocks = [block("answer", f["text"])] if f.get("text") else []
    if f.get("tool_calls"):
        blocks.append(block("tool calls", f["tool_calls"]))
    u = f.get("usage") or {}
    spent = f"{u.get('input_tokens', 0)} in, {u.get('output_tokens', 0)} out"
    return f"model answer{_turn(f)}: {spent}, ${u.get('cost_usd', 0):.5f}", "", blocks


def _end(f: dict[str, Any]) -> Shown:
    done = "completed" if f.get("completed") else "not completed"
    why = f": {f.get('reason')}" if f.get("reason") else ""
    return f"end ({done}{why})", "", []


SHOWN = {
    "model_request": _request,
    "model_response": _response,
    "tool_call": lambda f: (
        f"tool call {f.get('name')}",
        "",
        [block("arguments", f.get("arguments"))],
    ),
    "tool_result": lambda f: ("tool result", "", [block("output", f.get("output", ""))]),
    "stdout": lambda f: ("stdout", "", [block("stdout", f.get("text", ""))]),
    "stderr": lambda f: ("stderr", "", [block("stderr", f.get("text", ""))]),
    "model_refused": lambda f: (
        f"refused by the relay: {f.get('path', '')}",
        "refused",
        [block("reason", f.get("reason", ""))],
    ),
    "model_error": lambda f: ("model error", "error", [block("error", f.get("error", ""))]),
    "agent_disconnected": lambda f: (
        "agent disconnected",
        "error",
        [block("error", f.get("error", ""))],
    ),
    "trace_end": _end,
}


def _item(event: dict[str, Any], t: float) -> Item:
    kind = str(event.get("kind", "?"))
    seq = event.get("seq") if isinstance(event.get("seq"), int) else 0
    fields = {k: v for k, v in event.items() if k not in ("ts", "seq", "kind")}
    shown = SHOWN.get(kind)
    if shown is None:
        title, tone, blocks = (
            kind.replace("_", " "),
            "",
            [block("fields", fields)] if fields else [],
        )
    else:
        title, tone, blocks = shown(fields)
    return Item(seq=int(seq or 0), t=t, kind=kind, title=title, tone=tone, blocks=blocks)


def _turn(fields: dict[str, Any]) -> str:
    return f" {fields['turn']}" if "turn" in fields else ""


def _append(b: Block, text: str) -> None:
    """More output of the same stream: kept up to `MAX_TEXT`, the rest counted as cut."""
    room = max(0, MAX_TEXT - len(b.text))
    b.text += text[:room]
    b.cut += max(0, len(text) - room)
    b.folded = len(b.text) > FOLD_CHARS or b.text.count("\n") > FOLD_LINES


def read_transcript(path: Path) -> Transcript:
    """The transcript of a trace file (see the module docstring)."""
    items: list[Item] = []
    events = bad = 0
    start: float | None = None
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                event = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if not isinstance(event, dict):
                bad += 1
                continue
            events += 1
            ts = event.get("ts")
            ts = float(ts) if isinstance(ts, int | float) else 0.0
            start = ts if start is None else start
            kind = event.get("kind")
            last = items[-1] if items else None
            if last is not None and kind in ("stdout", "stderr") and last.kind == kind:
                _append(last.blocks[0], str(event.get("text", "")))
                continue
            if len(items) >= MAX_ITEMS:
                continue
            items.append(_item(event, round(ts - start, 3)))
    return Transcript(items=items, events=events, shown=len(items), bad_lines=bad)


def _session_item(e: SessionEvent) -> Item | None:
    """One event of an agent's own session, as a transcript item (None: not shown)."""
    tone = "error" if e.type == "error" or e.ok is False else ""
    if e.type == "tool_call":
        return Item(seq=e.seq, t=0, kind="tool_call", title=f"tool call {e.tool}",
                    blocks=[block("arguments", e.arguments)])  # fmt: skip
    if e.type == "tool_result":
        how = "failed" if e.ok is False else "ok" if e.ok else "result"
        return Item(seq=e.seq, t=0, kind="tool_result", title=f"tool result {e.tool} ({how})",
                    tone=tone, blocks=[block("output", e.text)] if e.text else [])  # fmt: skip
    if e.type == "shell":
        code = "" if e.exit_code is None else f", exit {e.exit_code}"
        return Item(seq=e.seq, t=0, kind="stdout", title=f"$ {e.command[:200]}{code}", tone=tone)
    if e.type in ("file_read", "file_write", "skill"):
        what = {"file_read": "read", "file_write": "wrote", "skill": f"skill {e.skill}:"}[e.type]
        sha = f" (sha256 {e.sha256[:12]})" if e.sha256 else ""
        return Item(seq=e.seq, t=0, kind=e.type, title=f"{what} {e.path}{sha}")
    if e.type in ("user", "assistant"):
        label = "the task" if e.type == "user" else "answer"
        kind = "model_response" if e.type == "assistant" else "model_request"
        blocks = [block(label, e.text)] if e.text else []
        return Item(seq=e.seq, t=0, kind=kind, title=e.type, blocks=blocks)
    if e.type == "model_call":
        u = e.usage
        return Item(seq=e.seq, t=0, kind="model_request",
                    title=f"model call{f' ({e.model})' if e.model else ''}: "
                    f"{u.get('input', 0)} in, {u.get('output', 0)} out")  # fmt: skip
    if e.type == "error":
        return Item(seq=e.seq, t=0, kind="model_error", title="error", tone="error",
                    blocks=[block("error", e.text)])  # fmt: skip
    if e.type == "turn_end":
        return Item(seq=e.seq, t=0, kind="trace_end",
                    title="turn ended without completing" if e.partial else "turn completed",
                    tone="error" if e.partial else "")  # fmt: skip
    if e.type == "raw":
        return Item(seq=e.seq, t=0, kind="raw", title="a record hangar does not know",
                    blocks=[block("record", e.raw)])  # fmt: skip
    return None


def read_agent_sessions(path: Path) -> list[tuple[str, Transcript]]:
    """The agent's own sessions in a trial's ``session.jsonl`` (not hangar's trace, shown
    apart), each as a transcript: (source, transcript)."""
    by_session: dict[tuple[str, str], list[Item]] = {}
    for e in read_events(path):
        if e.source == "trace":
            continue
        items = by_session.setdefault((e.source, e.session), [])
        if len(items) < MAX_ITEMS and (item := _session_item(e)) is not None:
            items.append(item)
    return [
        (f"{source} session {sid}", Transcript(items=items, events=len(items), shown=len(items)))
        for (source, sid), items in by_session.items()
    ]
