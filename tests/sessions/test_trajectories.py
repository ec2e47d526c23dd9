"""Agent sessions as ATIF trajectories (`hangar.trajectories`), checked by hand and
against Harbor's own ATIF models (Python >= 3.12, ``.venv-harbor``: `make harbor`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangar.sessions import SessionEvent, read_session
from hangar.trajectories import trajectory
from tests.harbor import harbor_validates

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = ROOT / "tests" / "fixtures" / "sessions"


@pytest.mark.parametrize("name", ["mini.traj.json", "gemini-chat.jsonl"])
def test_a_session_is_a_trajectory_harbor_reads(name: str, tmp_path: Path) -> None:
    session = read_session(SESSIONS / name)
    assert session is not None
    doc = trajectory(session.events, agent=session.source, session_id=session.id, cost_usd=0.02)
    steps = doc["steps"]
    assert [s["step_id"] for s in steps] == list(range(1, len(steps) + 1))
    assert steps[0]["source"] == "user"
    for step in steps:  # every result answers a call of its own step
        calls = {c["tool_call_id"] for c in step.get("tool_calls", [])}
        results = step.get("observation", {}).get("results", [])
        assert {r["source_call_id"] for r in results} <= calls
    usage = [e.usage for e in session.events if e.type == "model_call"]
    final = doc["final_metrics"]
    assert final["total_prompt_tokens"] == sum(u.get("input", 0) for u in usage) > 0
    assert final["total_completion_tokens"] == sum(u.get("output", 0) for u in usage)
    assert final["total_cached_tokens"] == sum(u.get("cached_input", 0) for u in usage)
    assert final["total_cost_usd"] == 0.02 and final["total_steps"] == len(steps)
    assert harbor_validates(doc, tmp_path) == ""


def test_what_atif_has_no_field_for_is_kept_in_extra(tmp_path: Path) -> None:
    e = {"source": "trace", "session": "s"}
    events = [
        SessionEvent(**e, type="user", text="fix it", ts="1796155691.5"),
        SessionEvent(**e, type="model_call", usage={"input": 10, "output": 5}, model="m"),
        SessionEvent(**e, type="shell", command="cat a.py", exit_code=0, text="print(1)"),
        SessionEvent(**e, type="file_read", path="a.py"),
        SessionEvent(**e, type="skill", skill="tdd"),
        SessionEvent(**e, type="raw", raw={"odd": 1}),
        SessionEvent(**e, type="error", text="rate limited <b>"),
        SessionEvent(**e, type="turn_end", partial=True),
    ]
    doc = trajectory(events, agent="hangar", version="1", model="m")
    user, agent, error, partial = doc["steps"]
    assert user["timestamp"].startswith("2026-12-01T")  # epoch seconds, in ISO 8601
    (call,) = agent["tool_calls"]
    assert call["function_name"] == "shell" and call["arguments"] == {"command": "cat a.py"}
    (result,) = agent["observation"]["results"]
    assert result["content"] == "print(1)" and result["extra"]["exit_code"] == 0
    assert agent["extra"] == {"files_read": ["a.py"], "skills_loaded": ["tdd"]}
    assert agent["llm_call_count"] == 1 and agent["metrics"]["prompt_tokens"] == 10
    assert error == {"step_id": 3, "source": "system", "message": "error: rate limited <b>"}
    assert partial["message"] == "the turn ended without completing"
    assert doc["notes"] == "1 session record(s) no format knew are left out"
    assert harbor_validates(doc, tmp_path) == ""
    empty = trajectory([], agent="hangar")
    assert empty["steps"][0]["source"] == "system" and harbor_validates(empty, tmp_path) == ""
