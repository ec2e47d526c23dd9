"""The knowledge kind of trial: seed 003's repo-search arm, one question per trial.

`KnowledgeTrial` is the sandboxed lifecycle's hooks: **admission** (a read-only chat
agent and a model; every repository holds its ``as_of`` commit; the image exists),
**workspace** (each repository's files at ``as_of`` within ``scope``, as plain files
under ``/workspace/<repository>``: no ``.git``, no history, no link), **sandbox** (the
workspace mounted read-only, the network off), **agent** (a chat loop on the host with
only list, grep and read, which run in the sandbox as argv commands, never a shell, and
answer), and **answer** (the answer and its citations written to ``answer.json``; each
citation becomes ``repo://<repository>@<commit>/<path>`` with the sha256 of that file at
``as_of``, or stays as the agent wrote it, with no hash, when it names no file of the
workspace).

A ``retrieval:<server>`` arm runs the same way with a chat agent whose knowledge comes
from the pinned MCP server ``<server>`` (`hangar.agents.mcp`), mounted read-only into the
sandbox (the network stays off), read through its tools (``tools: retrieval``: answer and
the server's tools, nothing of the workspace): the server's manifest (resource
``knowledge://manifest``) is recorded as the arm's knowledge snapshot, and a citation of
``repo://<repository>@<commit>/<path>`` gets the sha256 of that file at that commit, read
by hangar from the repository (a snapshot older or newer than ``as_of`` shows as stale).

Only the question reaches the sandbox and the prompt: never its key, its answer or its
canary. The verdict says whether an answer was given; what it is worth is decided later
by people's labels (`hangar.kinds.knowledge.scoring`): its scores are pending until then.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from hangar.agents import ChatAgent
from hangar.errors import WorkspaceError
from hangar.kinds.knowledge.questions import LoadedQuestion
from hangar.results import TrialOutcome, Verdict
from hangar.sandbox import Mount, Sandbox, SandboxSpec
from hangar.sandbox.workspace import MirrorCache, export_tree, file_digest_at
from hangar.trials.boundary import Outcome, provider_failed
from hangar.trials.limits import ScenarioLimits
from hangar.trials.mcp import start_servers
from hangar.trials.sandboxed import SandboxedTrial
from hangar.trials.spec import TrialSpec

log = logging.getLogger(__name__)
WORKDIR = "/workspace"
#: Time the agent has for one question.
TIME_S = 600.0
#: The resource of a retrieval server that says what it knows.
MANIFEST_URI = "knowledge://manifest"
_URI = re.compile(r"^repo://(?P<repo>[^@/]+)@(?P<commit>[0-9a-f]{40})/(?P<path>.+)$")
#: The arm that searches the repositories itself, and the prefix of a retrieval server's.
REPO_SEARCH, RETRIEVAL = "baseline-repo-search", "retrieval:"


def arm_agent_problems(arm: str, agent: Any) -> list[str]:
    """Why `agent` cannot answer in `arm`: a ``retrieval:<server>`` arm needs a chat agent
    with that MCP server (``tools: retrieval`` or ``read``); any other arm a chat agent
    with ``tools: read``."""
    if arm.startswith(RETRIEVAL):
        server = arm.removeprefix(RETRIEVAL)
        if not isinstance(agent, ChatAgent) or agent.tools not in ("retrieval", "read"):
            return [f"the {arm} arm needs a chat agent with `tools: retrieval`"]
        if server not in agent.mcp:
            have = ", ".join(agent.mcp) or "none"
            return [f"the {arm} arm needs the MCP server {server!r} in the agent's `mcp` ({have})"]
        return []
    if not isinstance(agent, ChatAgent) or agent.tools != "read":
        return ["the repo-search arm needs a chat agent with `tools: read`"]
    return []


def citation_uri(repo: str, commit: str, path: str) -> str:
    """A repository file's uri: repository, commit and path."""
    return f"repo://{repo}@{commit}/{path}"


class KnowledgeTrial(SandboxedTrial):
    """One question of the repo-search arm (or a retrieval arm): the lifecycle's hooks."""

    def __init__(self, spec: TrialSpec) -> None:
        if not isinstance(spec.task, LoadedQuestion):
            raise TypeError(f"a knowledge trial needs a question, not {spec.task.kind}")
        self.item = spec.task
        super().__init__(spec, ScenarioLimits(time_s=TIME_S), self.item.image, "")
        self.mirrors = MirrorCache(self.cache / "mirrors")
        self.files: dict[str, dict[str, str]] = {}
        self.answer: dict[str, Any] | None = None
        self.snapshot: str | None = None

    def admit(self) -> None:
        """What keeps the question from running is blocked_setup, before any call."""
        q = self.item
        self.write("question.json", q.model_dump(mode="json"))
        problems = arm_agent_problems(q.arm, self.spec.agent)
        if self.spec.model_spec is None or self.spec.model_spec.provider == "none":
            problems.append("a knowledge question needs a model")
        for name, commit in q.commits.items():
            try:
                if not self.mirrors.has_revision(q.repositories[name], commit):
                    problems.append(f"as_of commit {commit} is not in repository {name}")
            except WorkspaceError as exc:
                problems.append(f"repository {name}: {exc}")
        image = self.backend.image_problem(q.image)
        if image:
            problems.append(image)
        if problems:
            raise Outcome(Verdict.BLOCKED_SETUP, "admission: " + "; ".join(problems))

    def set_up(self) -> Sandbox:
        """Each repository's files at ``as_of`` within scope (and their hashes), the
        sandbox with them read-only, and the question as the agent's task."""
        q = self.item
        with self.phase("workspace"):
            for name, commit in sorted(q.commits.items()):
                self.files[name] = export_tree(
                    self.mirrors, q.repositories[name], commit, self.workspace / name, q.scope[name]
                )
            self.workspace.mkdir(parents=True, exist_ok=True)
            self.write("files.json", self.files)
        with self.phase("sandbox_up"):
            sandbox = self.start_sandbox()
        repos = ", ".join(f"{name} at {commit[:12]}" for name, commit in sorted(q.commits.items()))
        self.task_text = f"Repositories (read-only): {repos}.\n\nQuestion ({q.question.kind}): "
        self.task_text += q.question.question
        assert isinstance(self.spec.agent, ChatAgent)
        self.write("prompt.json", {"system": self.spec.agent.system_prompt, "user": self.task_text})
        return sandbox

    def sandbox_spec(self) -> SandboxSpec:
        """The sandbox: the workspace read-only, nothing else of the host."""
        return self.sandbox_of(
            self.item.image,
            (Mount(source=self.workspace, target=WORKDIR, read_only=True), *self.agent_mounts()),
            ttl_s=TIME_S + 900,
            workdir=WORKDIR,
        )

    def start_mcp(self, sandbox: Sandbox) -> None:
        """The retrieval server's tools, and its manifest as what the arm knew."""
        self.start_retrieval(sandbox)

    def verify(self, sandbox: Sandbox) -> None:
        """The answer and its citations (a provider's failure is an infra_error)."""
        if self.agent_run.provider_error is not None:
            raise provider_failed(self.agent_run.provider_error)
        with self.phase("answer"):
            self.collect()

    def collect(self) -> None:
        """The answer file: the answer and its citations, each with its hash at as_of."""
        raw = self.agent_run.answer
        if not self.agent_run.completed or raw is None:
            self.verdict, self.reason = Verdict.FAIL, f"no answer: {self.agent_run.reason}"
            return
        cited = raw.get("citations") or []
        citations = [
            self.cite(str(c.get("uri") or c.get("path") or "") if isinstance(c, dict) else str(c))
            for c in (cited if isinstance(cited, list) else [cited])
        ]
        self.answer = {
            "id": self.item.id,
            "answer": str(raw.get("answer") or ""),
            "citations": citations,
        }
        self.write("answer.json", self.answer)
        self.verdict = Verdict.PASS
        self.reason = f"answered with {len(citations)} citation(s); correctness awaits labels"

    def cite(self, given: str) -> dict[str, str | None]:
        """A citation as `repo://name@commit/path` with its hash, when it names a file: of
        the workspace (at ``as_of``), or of a repository at the commit the uri names (what a
        retrieval server cites), read by hangar from the repository."""
        text = given.strip()
        for name, commit in self.item.commits.items():
            prefixes = (citation_uri(name, commit, ""), f"{WORKDIR}/{name}/", f"{name}/")
            for prefix in prefixes:
                if text.startswith(prefix):
                    path = text[len(prefix) :]
                    digest = self.files.get(name, {}).get(path)
                    if digest is not None:
                        return {"uri": citation_uri(name, commit, path), "sha256": digest}
        match = _URI.match(text)
        if match and match["repo"] in self.item.repositories:
            url = self.item.repositories[match["repo"]]
            digest = file_digest_at(self.mirrors, url, match["commit"], match["path"])
            return {"uri": text, "sha256": digest}
        return {"uri": text, "sha256": None}

    def start_retrieval(self, sandbox: Sandbox) -> None:
        """The agent's MCP servers started and offered to it; the retrieval server's
        manifest recorded (``mcp-manifest.json``) as what the arm knew."""
        self.mcp_tools, _ = start_servers(self, sandbox, self.spec.agent, self.mcp)
        server = self.item.arm.partition(":")[2]
        if not server or self.mcp_tools is None or server not in self.mcp_tools.servers:
            return
        text = self.mcp_tools.read_resource(server, MANIFEST_URI)
        try:
            manifest = json.loads(text) if text else None
        except ValueError:
            manifest = {"text": text}
        self.write("mcp-manifest.json", {"server": server, "manifest": manifest})
        if isinstance(manifest, dict):
            found = manifest.get("knowledge_snapshot")
            self.snapshot = str(found) if found else json.dumps(manifest, sort_keys=True)

    def judged(self) -> TrialOutcome:
        """The answer and what it was asked on (no score: labels decide later)."""
        q = self.item
        return TrialOutcome(
            details={
                "suite": q.suite,
                "question": q.id,
                "questionKind": q.question.kind,
                "commits": q.commits,
                "scope": q.scope,
                "answer": self.answer,
                "knowledge_snapshot": self.snapshot,
            },
        )
