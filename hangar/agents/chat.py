"""Chat agents: a host-side loop whose tool calls run in the sandbox.

Each turn: the model is called (official SDKs: OpenAI Chat Completions or Responses,
Anthropic Messages; retries with backoff on rate limits and transient errors), its
tool calls run in the sandbox (`bash`, and `edit` to view, create or change a file),
their results go back. The loop stops when the model answers without a tool call
(completed), or at the turn, token, cost or time limit (not completed). The key is
used on the host only; the sandbox never sees it. Every request, response and tool
call is a trace event; usage comes from the provider's responses. Skills installed in
``~/.agents/skills`` of the sandbox are listed in the system prompt (`hangar.agents.skills`):
the agent loads one by reading its ``SKILL.md``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from hangar.agents.base import AgentConfig
from hangar.agents.command import AgentRun
from hangar.agents.mcp import McpServer, McpTools
from hangar.agents.skills import native_skills, skills_note
from hangar.models import ModelSpec
from hangar.models.complete import gemini_config, gemini_usage, provider_error_of, sdk_client
from hangar.models.pricing import cost_of
from hangar.models.usage import add, from_anthropic, from_openai_chat, from_openai_responses
from hangar.results import Usage
from hangar.sandbox.base import Sandbox
from hangar.trace import TraceWriter
from hangar.validation import Name

DEFAULT_SYSTEM = (
    "You are a software engineer working in a git repository (your working directory). "
    "Use the tools to inspect and change files and to run commands. There is no network. "
    "When the task is done, answer with a short summary and no tool call."
)
READ_SYSTEM = (
    "You answer a question about the repositories in your working directory, which you can "
    "only read: each top-level folder is one repository at a pinned commit. Find the facts "
    "with list, grep and read, then call answer once with your answer and the files that "
    "support it (each cited as repository/path)."
)
RETRIEVAL_SYSTEM = (
    "You answer a question with the retrieval tools you are given: search for the facts, "
    "read what you found, then call answer once with your answer and the sources that "
    "support it (each cited by the uri the tools gave it)."
)
TOOLS: list[dict[str, Any]] = [
    {
        "name": "bash",
        "description": "Run a bash command in the repository; returns its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
    {
        "name": "edit",
        "description": (
            "View, create or change a file. command=view shows it; create writes file_text; "
            "str_replace replaces old_str (which must occur exactly once) with new_str."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                "path": {"type": "string"},
                "file_text": {"type": "string"},
                "old_str": {"type": "string"},
                "new_str": {"type": "string"},
            },
            "required": ["command", "path"],
        },
    },
]


#: The read-only tool set: no write, no shell (seed 003's repo-search arm).
READ_TOOLS: list[dict[str, Any]] = [
    {
        "name": "list",
        "description": "List the files under a folder (relative to the working directory).",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "grep",
        "description": "Search files under a path for a regular expression; returns matching "
        "lines as path:line:text.",
        "parameters": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
            "required": ["pattern"],
        },
    },
    {
        "name": "read",
        "description": "Read a file (relative to the working directory).",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "answer",
        "description": "Give your final answer and the files that support it; ends the task.",
        "parameters": {
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "citations": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Files as repository/path.",
                },
            },
            "required": ["answer", "citations"],
        },
    },
]
TOOLSETS = {
    "edit": TOOLS,
    "read": READ_TOOLS,
    "retrieval": [t for t in READ_TOOLS if t["name"] == "answer"],
}


class ChatAgent(AgentConfig):
    """An agent whose loop runs on the host and whose tools run in the sandbox."""

    kind: Literal["chat"] = "chat"
    """Agent kind tag."""
    name: Name
    """Name in results and reports."""
    system_prompt: str = DEFAULT_SYSTEM
    """The system prompt; the task text is the first user message."""
    max_turns: int = Field(default=30, gt=0)
    """Model calls at most."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Tokens (input + output, all calls) at most."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Cost of this trial's calls at most."""
    max_output_tokens: int = Field(default=4096, gt=0)
    """Completion tokens per call."""
    tool_timeout_s: float = Field(default=120, gt=0)
    """Time limit of one tool call (the trial's budget still applies)."""
    tool_output_chars: int = Field(default=16_000, gt=0)
    """The tail of a tool's output the model sees."""
    tools: Literal["edit", "read", "retrieval"] = "edit"
    """``edit``: bash and edit. ``read``: list, grep, read and answer (no write, no shell;
    the answer tool ends the run and its arguments are the run's answer). ``retrieval``:
    only answer and its MCP servers' tools (a knowledge arm whose knowledge comes from a
    pinned retrieval server)."""
    mcp: dict[Name, McpServer] = Field(default_factory=dict)
    """MCP servers it gets, pinned (`hangar.agents.mcp`): they run in the sandbox, their
    tools are offered to the model as ``mcp__<server>__<tool>``."""

    @model_validator(mode="before")
    @classmethod
    def _read_prompt(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and data.get("tools") in ("read", "retrieval")
            and "system_prompt" not in data
        ):
            return {
                **data,
                "system_prompt": READ_SYSTEM if data["tools"] == "read" else RETRIEVAL_SYSTEM,
            }
        return data


def _tools_for(api: str, toolset: str = "edit", extra: list[dict[str, Any]] | None = None) -> Any:
    """The tool definitions in one API's shape (the SDKs' typed dicts, built as data);
    `extra`: more tools (an MCP server's), in the same neutral shape."""
    tools = TOOLSETS[toolset] + (extra or [])
    if api == "messages":
        return [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in tools
        ]
    if api == "gemini":
        declarations = [
            {"name": t["name"], "description": t["description"],
             "parameters_json_schema": t["parameters"]}
            for t in tools
        ]  # fmt: skip
        return [{"function_declarations": declarations}]
    if api == "responses":
        return [{"type": "function", **t} for t in tools]
    return [{"type": "function", "function": t} for t in tools]


class _Call(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any]


def run_read_tool(agent: ChatAgent, sandbox: Sandbox, call: _Call, timeout: float) -> str:
    """One read-only tool call: argv commands in the sandbox, never a shell."""
    args, cap = call.arguments, agent.tool_output_chars
    path = str(args.get("path") or ".")
    if path.startswith("-"):
        return f"error: bad path {path!r}"
    if call.name == "read":
        return sandbox.read_file(path)[:cap]
    if call.name == "list":
        argv = ["find", path, "-type", "f", "-not", "-path", "*/.git/*"]
    elif call.name == "grep":
        argv = ["grep", "-rnI", "--exclude-dir=.git", "-e", str(args["pattern"]), "--", path]
    else:
        return f"error: unknown tool {call.name!r} (tools: list, grep, read, answer)"
    res = sandbox.exec(argv, timeout=timeout)
    out = (res.stdout + res.stderr) or "(nothing)"
    return out[:cap] + ("\n(output cut)" if len(out) > cap else "")


def run_tool(
    agent: ChatAgent, sandbox: Sandbox, call: _Call, timeout: float, mcp: McpTools | None = None
) -> str:
    """Run one tool call in the sandbox; its result as the model will see it."""
    args = call.arguments
    try:
        if mcp is not None and call.name in mcp.tools:
            return mcp.call(call.name, dict(args))[-agent.tool_output_chars :]
        if agent.tools == "retrieval":
            return f"error: unknown tool {call.name!r}"
        if agent.tools == "read":
            return run_read_tool(agent, sandbox, call, timeout)
        if call.name == "bash":
            res = sandbox.exec(["bash", "-c", str(args["command"])], timeout=timeout)
            out = res.stdout + res.stderr
            note = " (timed out)" if res.timed_out else ""
            return f"exit {res.returncode}{note}\n{out[-agent.tool_output_chars :]}"
        if call.name == "edit":
            path, command = str(args["path"]), args.get("command")
            if command == "view":
                return sandbox.read_file(path)[-agent.tool_output_chars :]
            if command == "create":
                sandbox.write_file(path, str(args.get("file_text", "")))
                return f"created {path}"
            if command == "str_replace":
                text = sandbox.read_file(path)
                old = str(args.get("old_str", ""))
                if not old or text.count(old) != 1:
                    return f"error: old_str occurs {text.count(old) if old else 0} times in {path}"
                sandbox.write_file(path, text.replace(old, str(args.get("new_str", ""))))
                return f"edited {path}"
            return f"error: unknown edit command {command!r}"
        return f"error: unknown tool {call.name!r}"
    except (KeyError, TypeError) as exc:
        return f"error: bad arguments for {call.name}: {exc}"
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError) as exc:
        return f"error: {exc}"


class _Conversation:
    """One conversation in the shape of one API: call the model, add tool results.

    The SDKs' requests go through `PolicyTransport`: the same rules as the relay's
    (``store`` off, only the trial's model, no provider-hosted tool) hold for the calls
    the host makes on the agent's behalf."""

    def __init__(
        self,
        agent: ChatAgent,
        model: ModelSpec,
        context: str,
        trace: TraceWriter,
        system: str,
        extra: list[dict[str, Any]] | None = None,
    ) -> None:
        self.agent, self.model, self.api, self.system = agent, model, model.chat_api, system
        self.extra = extra or []
        self.refusals: list[str] = []
        client = sdk_client(model, self.refusals, trace)
        if self.api == "gemini":
            self.gemini = client
            self.messages: list[Any] = [{"role": "user", "parts": [{"text": context}]}]
        elif self.api == "messages":
            self.anthropic = client
            self.messages = [{"role": "user", "content": context}]
        else:
            self.openai = client
            if self.api == "responses":
                self.messages = [{"role": "user", "content": context}]
            else:
                self.messages = [
                    {"role": "system", "content": system},
                    {"role": "user", "content": context},
                ]

    def call(self, timeout: float) -> tuple[str, list[_Call], Usage]:
        """One model call: its text, its tool calls, its usage."""
        a = self.agent
        if self.api == "gemini":
            return self._call_gemini(timeout)
        if self.api == "messages":
            reply = self.anthropic.messages.create(
                model=self.model.id,
                system=self.system,
                messages=self.messages,
                max_tokens=a.max_output_tokens,
                timeout=timeout,
                tools=_tools_for("messages", a.tools, self.extra),
            )
            self.messages.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            text = "".join(b.text for b in reply.content if b.type == "text")
            calls = [
                _Call(id=b.id, name=b.name, arguments=dict(b.input))
                for b in reply.content
                if b.type == "tool_use"
            ]
            return text, calls, from_anthropic(reply.usage.model_dump())
        if self.api == "responses":
            response = self.openai.responses.create(
                model=self.model.id,
                instructions=self.system,
                input=self.messages,
                max_output_tokens=a.max_output_tokens,
                timeout=timeout,
                tools=_tools_for("responses", a.tools, self.extra),
            )
            items = [i.model_dump(exclude_none=True) for i in response.output]
            self.messages += [i for i in items if i.get("type") in ("message", "function_call")]
            calls = [
                _Call(id=i["call_id"], name=i["name"], arguments=json.loads(i["arguments"]))
                for i in items
                if i.get("type") == "function_call"
            ]
            usage = response.usage.model_dump() if response.usage else {}
            return response.output_text, calls, from_openai_responses(usage)
        completion = self.openai.chat.completions.create(
            model=self.model.id,
            messages=self.messages,
            max_tokens=a.max_output_tokens,
            timeout=timeout,
            tools=_tools_for("chat", a.tools, self.extra),
        )
        message = completion.choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        calls = [
            _Call(id=c.id, name=c.function.name, arguments=json.loads(c.function.arguments))
            for c in message.tool_calls or []
            if c.type == "function"
        ]
        usage = completion.usage.model_dump() if completion.usage else {}
        return message.content or "", calls, from_openai_chat(usage)

    def _call_gemini(self, timeout: float) -> tuple[str, list[_Call], Usage]:
        a = self.agent
        config = gemini_config(
            self.system,
            a.max_output_tokens,
            timeout,
            tools=_tools_for("gemini", a.tools, self.extra),
        )
        reply = self.gemini.models.generate_content(
            model=self.model.id, contents=self.messages, config=config
        )
        candidate = (reply.candidates or [None])[0]
        content = candidate.content if candidate is not None else None
        parts = (content.parts if content is not None else None) or []
        self.messages.append(
            {"role": "model", "parts": [p.model_dump(exclude_none=True) for p in parts]}
        )
        text = "".join(p.text for p in parts if p.text and not p.thought)
        calls = [
            _Call(id=p.function_call.id or f"call_{i}", name=p.function_call.name or "",
                  arguments=dict(p.function_call.args or {}))
            for i, p in enumerate(parts)
            if p.function_call is not None
        ]  # fmt: skip
        return text, calls, gemini_usage(reply)

    def results(self, calls: list[_Call], outputs: list[str]) -> None:
        """Give the tool results back to the model."""
        if self.api == "gemini":
            self.messages.append(
                {
                    "role": "user",
                    "parts": [
                        {"function_response": {"name": c.name, "response": {"result": out}}}
                        for c, out in zip(calls, outputs, strict=True)
                    ],
                }
            )
        elif self.api == "messages":
            self.messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": c.id, "content": out}
                        for c, out in zip(calls, outputs, strict=True)
                    ],
                }
            )
        elif self.api == "responses":
            self.messages += [
                {"type": "function_call_output", "call_id": c.id, "output": out}
                for c, out in zip(calls, outputs, strict=True)
            ]
        else:
            self.messages += [
                {"role": "tool", "tool_call_id": c.id, "content": out}
                for c, out in zip(calls, outputs, strict=True)
            ]


def run_chat_agent(
    agent: ChatAgent,
    sandbox: Sandbox,
    context: str,
    trace: TraceWriter,
    timeout: float,
    model: ModelSpec,
    mcp: McpTools | None = None,
) -> tuple[AgentRun, Usage]:
    """Run the loop until the model is done or a limit is reached (`mcp`: the tools of
    the agent's MCP servers, started in `sandbox`)."""
    deadline = time.monotonic() + timeout
    usage = Usage()
    # Skills installed where it finds them natively are listed in its system prompt.
    skills = native_skills(sandbox) if agent.tools == "edit" else []
    trace.event(
        "agent_start",
        agent=agent.name,
        agent_kind="chat",
        model=model.id,
        api=model.chat_api,
        skills=[s.name for s in skills],
        mcp_tools=sorted(mcp.tools) if mcp else [],
    )
    try:
        system = agent.system_prompt + skills_note(skills)
        extra = [
            {"name": t.name, "description": t.description, "parameters": t.schema}
            for t in (mcp.tools.values() if mcp else [])
        ]
        conversation = _Conversation(agent, model, context, trace, system, extra)
    except Exception as exc:  # a missing SDK or key: the run cannot start
        trace.event("agent_end", error=str(exc))
        return AgentRun(reason=f"the chat agent could not start: {exc}"), usage
    provider = model.price_table
    for turn in range(1, agent.max_turns + 1):
        left = deadline - time.monotonic()
        if left <= 0:
            return _stop(trace, "the agent ran out of its time budget"), usage
        trace.event("model_request", turn=turn, messages=len(conversation.messages))
        try:
            text, calls, call_usage = conversation.call(timeout=max(left, 1.0))
        except Exception as exc:  # the SDK already retried what can be retried
            run = _stop(trace, f"model call failed: {type(exc).__name__}: {exc}")
            if not conversation.refusals:
                run.provider_error = provider_error_of(exc, model)
            return run, usage
        call_usage = cost_of(call_usage, model.id, provider, model.price)
        usage = add(usage, call_usage)
        trace.event(
            "model_response",
            turn=turn,
            text=text,
            tool_calls=[c.model_dump() for c in calls],
            usage=call_usage.model_dump(),
        )
        if not calls:
            trace.event("agent_end", completed=True, turns=turn)
            answering = agent.tools in ("read", "retrieval")
            answer = {"answer": text, "citations": []} if answering else None
            return AgentRun(exit_code=0, completed=True, answer=answer), usage
        final = next((c for c in calls if c.name == "answer"), None)
        if agent.tools in ("read", "retrieval") and final is not None:
            trace.event("tool_call", id=final.id, name=final.name, arguments=final.arguments)
            trace.event("agent_end", completed=True, turns=turn)
            return AgentRun(exit_code=0, completed=True, answer=final.arguments), usage
        conversation.results(calls, _run_tools(agent, sandbox, calls, trace, deadline, mcp))
        if (limit := _over_limit(agent, usage)) is not None:
            return _stop(trace, limit), usage
    return _stop(trace, f"turn limit reached ({agent.max_turns})"), usage


def _run_tools(
    agent: ChatAgent,
    sandbox: Sandbox,
    calls: list[_Call],
    trace: TraceWriter,
    deadline: float,
    mcp: McpTools | None = None,
) -> list[str]:
    """Run the tool calls of one turn in the sandbox, in order, each traced."""
    outputs = []
    for call in calls:
        left = deadline - time.monotonic()
        trace.event("tool_call", id=call.id, name=call.name, arguments=call.arguments)
        output = run_tool(agent, sandbox, call, max(min(agent.tool_timeout_s, left), 1.0), mcp)
        trace.event("tool_result", id=call.id, output=output)
        outputs.append(output)
    return outputs


def _over_limit(agent: ChatAgent, usage: Usage) -> str | None:
    """Which of the agent's token and cost limits its usage reached, in words, or None."""
    tokens = usage.input_tokens + usage.output_tokens
    if agent.max_tokens is not None and tokens >= agent.max_tokens:
        return f"token limit reached ({tokens} >= {agent.max_tokens})"
    if agent.max_cost_usd is not None and usage.cost_usd >= agent.max_cost_usd:
        return f"cost limit reached (${usage.cost_usd:.4f})"
    return None


def _stop(trace: TraceWriter, reason: str) -> AgentRun:
    trace.event("agent_end", completed=False, reason=reason)
    return AgentRun(reason=reason)
