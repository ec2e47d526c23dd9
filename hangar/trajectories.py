"""Agent sessions as ATIF trajectories (the Agent Trajectory Interchange Format, v1.7).

ATIF is the trajectory format Harbor writes (``agent/trajectory.json``) and tools that
read agent runs take (Inspect Scout, NeMo Gym, trace exporters). hangar reads every
agent's session into one normalized event stream (`hangar.sessions`); `trajectory` turns
that stream into one ATIF document:

- a ``user`` message is a user step; an ``error`` (and a turn that ended without
  completing) a system step;
- an assistant message, the tool calls that follow it and their results are one agent
  step (``tool_calls``, and ``observation.results`` paired by ``source_call_id``); a
  shell command the agent ran outside a tool call is a ``shell`` call with its result;
- a model call's tokens are the step's ``metrics`` (``llm_call_count`` counts the calls;
  several calls in a step add up), and ``final_metrics`` totals them with the trial's
  cost;
- what ATIF has no field for (files read and written, skills loaded, exit codes) is in
  the step's or the call's ``extra``; records no format knew are counted in ``notes``.

The document is validated against ATIF's published schema in the tests (Harbor's own
models).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hangar.results import TrialResult
from hangar.sessions import SESSION_FILE, SessionEvent, read_events, trial_sessions

SCHEMA_VERSION = "ATIF-v1.7"


def _iso(ts: str) -> str | None:
    """An event's time in ISO 8601 (agents write ISO strings or epoch seconds); None when
    it is neither."""
    try:
        return datetime.fromtimestamp(float(ts), UTC).isoformat()
    except ValueError:
        pass
    try:
        datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts


def _step(steps: list[dict[str, Any]], source: str, message: str, ts: str) -> dict[str, Any]:
    step: dict[str, Any] = {"step_id": len(steps) + 1, "source": source, "message": message}
    if ts and (when := _iso(ts)) is not None:
        step["timestamp"] = when
    steps.append(step)
    return step


class _Builder:
    """The steps, as the events come."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.calls: dict[str, dict[str, Any]] = {}  # call id -> the step that made it
        self.unknown = 0
        self.partial = 0

    def agent_step(self, event: SessionEvent, *, fresh: bool = False) -> dict[str, Any]:
        """The agent step an event belongs to: the current one unless it already has
        results (a new action after an observation is a new step) or `fresh`."""
        last = self.steps[-1] if self.steps else None
        if fresh or last is None or last["source"] != "agent" or "observation" in last:
            last = _step(self.steps, "agent", "", event.ts)
        if event.model and "model_name" not in last:
            last["model_name"] = event.model
        return last

    def add(self, e: SessionEvent) -> None:
        handler = getattr(self, f"_on_{e.type}", None)
        if handler is not None:
            handler(e)

    def _on_user(self, e: SessionEvent) -> None:
        _step(self.steps, "user", e.text, e.ts)

    def _on_assistant(self, e: SessionEvent) -> None:
        last = self.steps[-1] if self.steps else None
        reuse = (
            last is not None
            and last["source"] == "agent"
            and not last["message"]
            and "tool_calls" not in last
        )
        step = self.agent_step(e) if reuse else self.agent_step(e, fresh=True)
        step["message"] = e.text

    def _on_model_call(self, e: SessionEvent) -> None:
        step = self.agent_step(e)
        metrics = step.setdefault("metrics", {})
        for ours, theirs in (
            ("input", "prompt_tokens"),
            ("output", "completion_tokens"),
            ("cached_input", "cached_tokens"),
        ):
            metrics[theirs] = metrics.get(theirs, 0) + int(e.usage.get(ours, 0))
        if e.usage.get("reasoning"):
            extra = metrics.setdefault("extra", {})
            extra["reasoning_tokens"] = extra.get("reasoning_tokens", 0) + e.usage["reasoning"]
        step["llm_call_count"] = step.get("llm_call_count", 0) + 1

    def _call(self, e: SessionEvent, name: str, arguments: Any) -> dict[str, Any]:
        step = self.agent_step(e)
        call_id = e.call_id or f"call-{len(self.calls) + 1}"
        args = arguments if isinstance(arguments, dict) else {"input": arguments}
        call = {"tool_call_id": call_id, "function_name": name or "tool", "arguments": args}
        step.setdefault("tool_calls", []).append(call)
        self.calls[call_id] = step
        return call

    def _on_tool_call(self, e: SessionEvent) -> None:
        if e.call_id and e.call_id in self.calls:
            return  # the same call again (a format that writes it twice)
        self._call(e, e.tool, e.arguments if e.arguments is not None else {})

    def _result(self, call_id: str, content: str, extra: dict[str, Any]) -> None:
        step = self.calls.get(call_id) or self.agent_step(SessionEvent(source="", type="raw"))
        result: dict[str, Any] = {"source_call_id": call_id, "content": content}
        if extra:
            result["extra"] = extra
        step.setdefault("observation", {"results": []})["results"].append(result)

    def _on_tool_result(self, e: SessionEvent) -> None:
        extra = {"ok": e.ok} if e.ok is not None else {}
        if e.call_id not in self.calls:
            self._call(e, e.tool, {})
        self._result(e.call_id or f"call-{len(self.calls)}", e.text, extra)

    def _on_shell(self, e: SessionEvent) -> None:
        extra: dict[str, Any] = {"command": e.command}
        if e.exit_code is not None:
            extra["exit_code"] = e.exit_code
        step = self.calls.get(e.call_id) if e.call_id else None
        if step is not None:  # a tool call's command: its exit code on the call
            for call in step.get("tool_calls", []):
                if call["tool_call_id"] == e.call_id:
                    call.setdefault("extra", {}).update(extra)
            return
        call = self._call(e, "shell", {"command": e.command})
        self._result(call["tool_call_id"], e.text, extra)

    def _note(self, e: SessionEvent, key: str, value: str) -> None:
        """What the last agent step did beside its calls (a file its command read)."""
        step = next((s for s in reversed(self.steps) if s["source"] == "agent"), None)
        step = step or self.agent_step(e)
        step.setdefault("extra", {}).setdefault(key, []).append(value)

    def _on_file_read(self, e: SessionEvent) -> None:
        self._note(e, "files_read", e.path)

    def _on_file_write(self, e: SessionEvent) -> None:
        self._note(e, "files_written", e.path)

    def _on_skill(self, e: SessionEvent) -> None:
        self._note(e, "skills_loaded", e.skill)

    def _on_error(self, e: SessionEvent) -> None:
        _step(self.steps, "system", f"error: {e.text}", e.ts)

    def _on_turn_end(self, e: SessionEvent) -> None:
        if e.partial:
            self.partial += 1
            _step(self.steps, "system", "the turn ended without completing", e.ts)

    def _on_raw(self, e: SessionEvent) -> None:
        self.unknown += 1


def trajectory(
    events: Iterable[SessionEvent],
    *,
    agent: str,
    version: str = "",
    model: str | None = None,
    session_id: str | None = None,
    cost_usd: float | None = None,
) -> dict[str, Any]:
    """The ATIF document of a session's `events` (see the module docstring): `agent` and
    its `version` name the agent system, `model` its default model, `cost_usd` the
    trial's cost of its model calls."""
    built = _Builder()
    for event in events:
        built.add(event)
    steps = built.steps or [
        {"step_id": 1, "source": "system", "message": "the agent left no session"}
    ]
    metrics = [s["metrics"] for s in steps if "metrics" in s]
    final: dict[str, Any] = {
        "total_prompt_tokens": sum(m["prompt_tokens"] for m in metrics),
        "total_completion_tokens": sum(m["completion_tokens"] for m in metrics),
        "total_cached_tokens": sum(m["cached_tokens"] for m in metrics),
        "total_steps": len(steps),
    }
    if cost_usd is not None:
        final["total_cost_usd"] = cost_usd
    notes = []
    if built.unknown:
        notes.append(f"{built.unknown} session record(s) no format knew are left out")
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "agent": {"name": agent, "version": version or "unknown"},
        "steps": steps,
        "final_metrics": final,
    }
    if model:
        doc["agent"]["model_name"] = model
    if session_id:
        doc["session_id"] = session_id
    if notes:
        doc["notes"] = "; ".join(notes)
    return doc


def trial_trajectory(result: TrialResult, evidence: Path) -> dict[str, Any]:
    """The ATIF document of a trial from its evidence (the bundle's folder).

    Its steps are the agent's own session where the evidence holds one (the agent CLI's
    files: messages, tool calls, results), else hangar's trace; the two describe the same
    model calls, so they are never added together. ``final_metrics`` are hangar's meter
    (the relay's count of the trial's tokens and its cost), which the agent cannot edit;
    a step's ``metrics`` are the session's own account. The agent's settings' digest is
    its version."""
    kept = evidence / SESSION_FILE
    events = (
        list(read_events(kept))
        if kept.is_file()
        else [e for s in trial_sessions(evidence) for e in s.events]
    )
    own = [e for e in events if e.source != "trace"]
    doc = trajectory(
        own or events,
        agent=result.agent,
        version=result.agent_digest[:12],
        model=None if result.model == "none" else result.model,
        session_id=result.trial_key,
    )
    usage = result.usage
    doc["final_metrics"] |= {
        "total_prompt_tokens": usage.input_tokens,
        "total_completion_tokens": usage.output_tokens,
        "total_cached_tokens": usage.cached_input_tokens,
        "total_cost_usd": usage.cost_usd,
    }
    said = "steps from the agent's own session" if own else "steps from hangar's trace"
    metered = "final_metrics: hangar's metering of the trial's model calls"
    doc["notes"] = "; ".join(x for x in (doc.get("notes"), said, metered) if x)
    return doc
