"""The viewer's transcript of a trace, without a browser: every kind of event in order,
output chunks joined, long texts folded and cut, refusals and errors marked."""

from __future__ import annotations

import json
from pathlib import Path

from hangar.viewer.transcript import MAX_TEXT, read_transcript


def test_a_trace_reads_as_a_transcript(tmp_path: Path) -> None:
    events = [
        {"kind": "agent_start", "agent": "chat"},
        {"kind": "model_request", "turn": 1, "system": "be brief", "user": "fix it"},
        {
            "kind": "model_response",
            "turn": 1,
            "text": "",
            "tool_calls": [{"name": "bash"}],
            "usage": {"input_tokens": 12, "output_tokens": 3, "cost_usd": 0.0001},
        },
        {"kind": "tool_call", "id": "c1", "name": "bash", "arguments": {"command": "ls"}},
        {"kind": "tool_result", "id": "c1", "output": "a.py\n"},
        {"kind": "model_refused", "path": "/v1/files", "reason": "file uploads are refused"},
        {"kind": "stdout", "text": "x" * (MAX_TEXT - 10)},
        {"kind": "stdout", "text": "y" * 100},
        {"kind": "stderr", "text": "boom\n"},
        {"kind": "model_error", "error": "timeout"},
        {"kind": "trace_end", "completed": False, "reason": "turn limit reached"},
    ]
    path = tmp_path / "trace.jsonl"
    lines = [json.dumps({"ts": 100.0 + i, "seq": i, **e}) for i, e in enumerate(events)]
    path.write_text("\n".join([*lines[:3], "not json", *lines[3:]]) + "\n")
    t = read_transcript(path)
    assert (t.events, t.bad_lines) == (11, 1)
    kinds = [i.kind for i in t.items]
    assert kinds == [
        "agent_start",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "model_refused",
        "stdout",
        "stderr",
        "model_error",
        "trace_end",
    ]  # the two stdout chunks joined
    by = {i.kind: i for i in t.items}
    assert by["model_response"].title == "model answer 1: 12 in, 3 out, $0.00010"
    assert [b.label for b in by["model_request"].blocks] == ["system", "user"]
    assert (
        by["model_refused"].tone == "refused"
        and "file uploads" in by["model_refused"].blocks[0].text
    )
    assert by["model_error"].tone == "error"
    out = by["stdout"].blocks[0]
    assert len(out.text) == MAX_TEXT and out.cut == 90 and out.folded
    assert by["trace_end"].title == "end (not completed: turn limit reached)"
    assert by["tool_result"].t == 4.0  # seconds since the first event
