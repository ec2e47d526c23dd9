"""Agent sessions read as one event stream, and the session audit through the real CLI.

Codex and Claude Code are read from their own session files in the tests that run the
real CLIs (`tests/models/test_codex.py`, `test_claude.py`: `check_session`); here each
format's rules are checked on files written as the formats' documentation describes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hangar.sessions import read_session, sessions_under, write_session
from hangar.sessions.common import digest, shell_files


def jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


SKILL = "# TDD\nWrite the failing test first.\n"


def codex_file(folder: Path, *, complete: bool = True) -> Path:
    """A rollout as Codex writes it: a read of a skill (parsed by Codex), a failing
    command, token counts, the task started and (maybe) completed."""
    t = "2026-12-01T10:00:00.000Z"
    records: list[dict[str, Any]] = [
        {"timestamp": t, "type": "session_meta", "payload": {"id": "s-codex", "cwd": "/w"}},
        {"timestamp": t, "type": "event_msg", "payload": {"type": "task_started", "turn_id": "t1"}},
        {
            "timestamp": t,
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": "cat .agents/skills/tdd/SKILL.md"}),
                "call_id": "c1",
            },
        },
        {
            "timestamp": t,
            "type": "event_msg",
            "payload": {
                "type": "item_completed",
                "item": {
                    "type": "CommandExecution",
                    "id": "c1",
                    "command": ["/bin/bash", "-lc", "cat .agents/skills/tdd/SKILL.md"],
                    "parsed_cmd": [{"type": "read", "path": ".agents/skills/tdd/SKILL.md"}],
                    "aggregated_output": SKILL,
                    "exit_code": 0,
                },
            },
        },
        {
            "timestamp": t,
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": "c1",
                "output": f"Process exited with code 0\nOutput:\n{SKILL}",
            },
        },
        {
            "timestamp": t,
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": "curl http://example.com > page.html"}),
                "call_id": "c2",
            },
        },
        {
            "timestamp": t,
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": "c2",
                "output": "Process exited with code 6\nOutput:\ncould not resolve host",
            },
        },
        {
            "timestamp": t,
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {"last_token_usage": {"input_tokens": 100, "output_tokens": 7}},
            },
        },
        {"timestamp": t, "type": "a_record_of_a_later_codex", "payload": {"x": 1}},
    ]
    if complete:
        records.append(
            {
                "timestamp": t,
                "type": "event_msg",
                "payload": {"type": "task_complete", "turn_id": "t1"},
            }
        )
    return jsonl(folder / "2026" / "12" / "01" / "rollout-s-codex.jsonl", records)


def pi_file(folder: Path) -> Path:
    """A Pi session as its documentation describes one, ended by an error."""
    t = "2026-12-01T10:00:00.000Z"
    return jsonl(
        folder / "--w--" / "2026-12-01_s-pi.jsonl",
        [
            {"type": "session", "version": 3, "id": "s-pi", "timestamp": t, "cwd": "/w"},
            {"type": "message", "id": "a", "parentId": None, "timestamp": t,
             "message": {"role": "user", "content": "fix it"}},
            {"type": "message", "id": "b", "parentId": "a", "timestamp": t,
             "message": {"role": "assistant", "model": "m", "stopReason": "toolUse",
                         "usage": {"input": 50, "output": 5, "cacheRead": 10},
                         "content": [{"type": "toolCall", "id": "k1", "name": "read",
                                      "arguments": {"path": "skills/review/SKILL.md"}}]}},
            {"type": "message", "id": "c", "parentId": "b", "timestamp": t,
             "message": {"role": "toolResult", "toolCallId": "k1", "toolName": "read",
                         "content": [{"type": "text", "text": "Review well."}], "isError": False}},
            {"type": "message", "id": "d", "parentId": "c", "timestamp": t,
             "message": {"role": "assistant", "model": "m", "stopReason": "error",
                         "errorMessage": "overloaded", "content": []}},
        ],
    )  # fmt: skip


def test_a_codex_rollout_reads_as_events(tmp_path: Path) -> None:
    session = read_session(codex_file(tmp_path))
    assert session is not None and session.source == "codex" and session.id == "s-codex"
    types = [e.type for e in session.events]
    skill = next(e for e in session.events if e.type == "skill")
    assert (skill.skill, skill.path, skill.sha256) == (
        "tdd",
        ".agents/skills/tdd/SKILL.md",
        digest(SKILL),
    )
    shells = [e for e in session.events if e.type == "shell"]
    assert [(e.exit_code, e.ok) for e in shells] == [(0, True), (6, False)]  # one each
    assert [e.path for e in session.events if e.type == "file_write"] == ["page.html"]
    raw = [e for e in session.events if e.type == "raw"]
    assert raw and raw[0].raw["type"] == "a_record_of_a_later_codex"  # kept, never dropped
    assert types[-1] == "turn_end" and not session.events[-1].partial
    assert next(e for e in session.events if e.type == "model_call").usage["input"] == 100


def test_a_turn_that_never_completed_is_partial(tmp_path: Path) -> None:
    session = read_session(codex_file(tmp_path, complete=False))
    assert session is not None
    ends = [e for e in session.events if e.type == "turn_end"]
    assert len(ends) == 1 and ends[0].partial and ends[0].turn == "t1"


def test_a_pi_session_reads_as_events(tmp_path: Path) -> None:
    session = read_session(pi_file(tmp_path))
    assert session is not None and session.source == "pi"
    assert [(e.skill, e.sha256) for e in session.events if e.type == "skill"] == [
        ("review", digest("Review well."))
    ]
    assert any(e.type == "error" and e.text == "overloaded" for e in session.events)
    assert session.events[-1].type == "turn_end" and session.events[-1].partial
    call = next(e for e in session.events if e.type == "model_call")
    assert call.usage == {"input": 60, "output": 5, "cached_input": 10}


def test_hangar_trace_of_a_chat_agent(tmp_path: Path) -> None:
    trace = jsonl(
        tmp_path / "trace.jsonl",
        [
            {"ts": 1.0, "seq": 0, "kind": "agent_start", "agent": "chat"},
            {"ts": 1.1, "seq": 1, "kind": "model_request", "turn": 1},
            {"ts": 1.2, "seq": 2, "kind": "tool_call", "id": "x", "name": "bash",
             "arguments": {"command": "sed -n 1,5p README.md"}},
            {"ts": 1.3, "seq": 3, "kind": "tool_result", "id": "x", "output": "exit 0\nhello"},
            {"ts": 1.4, "seq": 4, "kind": "tool_call", "id": "y", "name": "edit",
             "arguments": {"path": "a.py", "command": "str_replace"}},
            {"ts": 1.5, "seq": 5, "kind": "tool_result", "id": "y",
             "output": "error: old_str occurs 0 times in a.py"},
            {"ts": 1.6, "seq": 6, "kind": "model_refused", "reason": "a hosted tool"},
            {"ts": 1.7, "seq": 7, "kind": "agent_end", "completed": False, "reason": "turn limit"},
        ],
    )  # fmt: skip
    session = read_session(trace)
    assert session is not None and session.source == "trace"
    read = next(e for e in session.events if e.type == "file_read")
    # the digest is of what the command printed, not of the tool's "exit 0" line
    assert (read.path, read.sha256) == ("README.md", digest("hello"))
    results = [(e.tool, e.ok) for e in session.events if e.type == "tool_result"]
    assert results == [("bash", True), ("edit", False)]
    assert any(e.type == "error" and e.text == "a hosted tool" for e in session.events)
    assert session.events[-1].type == "turn_end" and session.events[-1].partial


def test_what_shell_words_say_a_command_reads_and_writes() -> None:
    assert shell_files("sed -n 13,20p statkit/stats.py") == (["statkit/stats.py"], [])
    assert shell_files("cat a b | grep x > out && tee t < in") == (["a", "b"], ["out", "t"])
    assert shell_files("head -n 5 x.py 2>/dev/null") == (["x.py"], [])
    assert shell_files("sed -i s/a/b/ f.py") == ([], ["f.py"])


def test_session_jsonl_round_trips(tmp_path: Path) -> None:
    sessions = [*sessions_under(tmp_path / "none"), read_session(codex_file(tmp_path / "h"))]
    out = write_session([s for s in sessions if s is not None], tmp_path / "session.jsonl")
    from hangar.sessions import read_events

    events = list(read_events(out))
    assert [e.type for e in events][:2] == ["session", "turn_start"] and events[0].seq == 0


def test_the_audit_through_the_cli(tmp_path: Path) -> None:
    history = tmp_path / "history"
    codex_file(history / "codex")
    pi_file(history / "pi")
    (history / "notes.jsonl").write_text('{"not": "a session"}\n')  # no format: ignored
    patterns = tmp_path / "forbidden.txt"
    patterns.write_text("# network, and the answer key\nshell:\\b(curl|wget)\\b\nread:answer\n")
    proc = subprocess.run(
        [sys.executable, "-m", "hangar", "sessions", "audit", str(history),
         "--forbid-file", str(patterns), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # a forbidden action was taken
    audits = {a["source"]: a for a in json.loads(proc.stdout)["sessions"]}
    assert set(audits) == {"codex", "pi"}
    codex = audits["codex"]
    assert codex["skills"] == [
        {"skill": "tdd", "path": ".agents/skills/tdd/SKILL.md", "sha256": digest(SKILL)}
    ]
    assert codex["failed"][0]["detail"].startswith("Process exited with code 6")
    assert [v["pattern"] for v in codex["forbidden"]] == ["shell:\\b(curl|wget)\\b"]
    assert codex["tokens"]["input"] == 100 and codex["incomplete_turns"] == 0
    assert audits["pi"]["incomplete_turns"] == 1 and audits["pi"]["errors"] == ["overloaded"]
    clean = subprocess.run(
        [sys.executable, "-m", "hangar", "sessions", "audit", str(history / "pi")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert clean.returncode == 0 and "skill review" in clean.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "hangar", "sessions", "audit", str(tmp_path / "nope/x.jsonl")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert missing.returncode == 2 and "file not found" in missing.stderr


def test_whatever_an_agent_writes_never_breaks_the_reading(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    values: list[Any] = [None, 5, "x", [], {}, [1, {"type": "text"}], {"a": None}, True, -1.5]
    shapes = [
        {"timestamp": "t", "type": "session_meta", "payload": {"id": "s"}},
        {"type": "session", "version": 3, "cwd": "/", "id": "p"},
        {"sessionId": "c", "type": "user", "message": {"content": "hi"}},
        {"ts": 1, "seq": 0, "kind": "agent_start"},
    ]
    kinds = ["response_item", "event_msg", "assistant", "user", "message", "tool_result",
             "tool_call", "model_call", "agent_end", "turn_context", "attachment"]  # fmt: skip
    for n in range(60):
        records = [dict(rng.choice(shapes))]
        for _ in range(12):
            record = {k: rng.choice(values) for k in ("payload", "message", "content", "id")}
            record.update(type=rng.choice(kinds), kind=rng.choice(kinds), seq=1, ts=1)
            if isinstance(record["payload"], dict):
                payload_type = rng.choice(
                    ["function_call", "message", "task_complete", "item_completed", "token_count"]
                )
                fields = ("arguments", "output", "content", "item", "info")
                record["payload"] = {
                    "type": payload_type,
                    **{k: rng.choice(values) for k in fields},
                }
            records.append(record)
        session = read_session(jsonl(tmp_path / f"{n}.jsonl", records))
        assert session is not None  # read, or said to be unreadable: never raised
    from hangar.sessions import write_trial_session

    (tmp_path / "trial" / "agent").mkdir(parents=True)
    (tmp_path / "trial" / "agent" / "x.jsonl").write_text("\x00\xff not json\n")
    assert write_trial_session(tmp_path / "trial").is_file()


def test_a_gemini_cli_chat_file_reads_as_events(tmp_path: Path) -> None:
    """A chat file Gemini CLI 0.61 wrote in a test run (tests/models/test_gemini_cli.py):
    its message records rewritten once their tool calls ran are read once each."""
    real = Path(__file__).parents[1] / "fixtures" / "sessions" / "gemini-chat.jsonl"
    session = read_session(real)
    assert session is not None and session.source == "gemini"
    shells = [e for e in session.events if e.type == "shell"]
    assert shells[0].command == "sed -n 13,20p statkit/stats.py"
    assert len(shells) == 2 and all(e.ok for e in shells)
    assert [e.path for e in session.events if e.type == "file_read"] == ["statkit/stats.py"]
    calls = [e for e in session.events if e.type == "model_call"]
    assert sum(e.usage["input"] for e in calls) == 4500 and len(calls) == 3
    (end,) = [e for e in session.events if e.type == "turn_end"]
    assert not end.partial
    # cut after a model message with tool calls: the turn did not complete
    lines = real.read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if '"toolCalls"' in line)
    short = tmp_path / "cut.jsonl"
    short.write_text("\n".join(lines[: cut + 1]) + "\n")
    cut_session = read_session(short)
    assert cut_session is not None
    assert [e.partial for e in cut_session.events if e.type == "turn_end"] == [True]


def test_a_mini_swe_agent_trajectory_reads_as_events(tmp_path: Path) -> None:
    """A trajectory mini-swe-agent 2.4.6 wrote in a test run
    (tests/models/test_mini_swe_agent.py): one JSON object, found beside JSONL sessions."""
    real = Path(__file__).parents[1] / "fixtures" / "sessions" / "mini.traj.json"
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "run.traj.json").write_text(real.read_text())
    (session,) = sessions_under(tmp_path)
    assert session.source == "mini"
    shells = [e for e in session.events if e.type == "shell"]
    assert shells[0].command == "sed -n 13,20p statkit/stats.py"
    assert len(shells) == 2 and all(e.ok and e.exit_code == 0 for e in shells)
    assert [e.path for e in session.events if e.type == "file_read"] == ["statkit/stats.py"]
    calls = [e for e in session.events if e.type == "model_call"]
    assert [e.usage["input"] for e in calls] == [1200, 1500, 1800]
    assert [e.usage["cached_input"] for e in calls] == [0, 1000, 1400]
    (end,) = [e for e in session.events if e.type == "turn_end"]
    assert not end.partial and end.text == "Submitted"
    # stopped at its step limit: the turn did not complete; a broken file is said, not raised
    data = json.loads(real.read_text())
    data["info"]["exit_status"] = "LimitsExceeded"
    (tmp_path / "agent" / "run.traj.json").write_text(json.dumps(data))
    (limited,) = sessions_under(tmp_path)
    assert [e.partial for e in limited.events if e.type == "turn_end"] == [True]
    data["messages"] = [{"role": "assistant", "tool_calls": [{"function": 5}]}, 7]
    (tmp_path / "agent" / "run.traj.json").write_text(json.dumps(data))
    (hostile,) = sessions_under(tmp_path)
    assert hostile.source == "mini" and hostile.events
    (tmp_path / "agent" / "run.traj.json").write_text("{not json")
    assert sessions_under(tmp_path) == []
