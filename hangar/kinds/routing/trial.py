"""The routing kind of trial: one prompt, the catalog installed natively, the route graded.

`RoutingTrial.run` walks: **admission** (the catalog and the case are whole, the agent works
in a sandbox and has a model, the image exists), the trial's **disk**, the model **relay**,
an empty **workspace**, the **sandbox** (the network off; the relay's forwarder in it),
**skills** (every catalog skill copied where the agent finds skills natively:
`hangar.agents.skills.skills_dir`; their bytes recorded), the **agent** (the prompt and
nothing else: no skill is named to it), and the **route**: the trial's session
(``session.jsonl``, `hangar.sessions`) graded against the case's golden set
(`hangar.kinds.routing.grading`), written as ``route.json``.

A run that did not complete cannot pass, whatever it loaded; a provider's failure is the
farm's (infra_error), never the agent's.
"""

from __future__ import annotations

from hangar.agents import ChatAgent, CommandAgent, ReferenceAgent
from hangar.agents.skills import skills_dir
from hangar.kinds.routing.grading import Route, grade
from hangar.kinds.routing.suite import LoadedRoutingCase
from hangar.results import COUNTED_VERDICTS, Score, TrialOutcome, Verdict
from hangar.sandbox import Mount, Sandbox, SandboxSpec
from hangar.sandbox.base import SANDBOX_UID
from hangar.sandbox.workspace import hand_over
from hangar.sessions import read_events, write_trial_session
from hangar.trials.boundary import Outcome, provider_failed
from hangar.trials.sandboxed import SandboxedTrial
from hangar.trials.spec import TrialSpec

WORKDIR = "/workspace"
HOME = "/home/agent"


class RoutingTrial(SandboxedTrial):
    """One routing case's trial; `run` walks its phases."""

    def __init__(self, spec: TrialSpec) -> None:
        if not isinstance(spec.task, LoadedRoutingCase):
            raise TypeError(f"a routing trial needs a routing case, not {spec.task.kind}")
        self.case = spec.task
        super().__init__(spec, self.case.limits, self.case.image, self.case.case.prompt)
        self.route: Route | None = None
        self.installed_in = ""

    def record(self) -> None:
        """The case as it ran (its catalog is the suite's)."""
        self.write("case.json", self.case.model_dump(mode="json", exclude={"catalog"}))

    def set_up(self) -> Sandbox:
        """An empty workspace, the sandbox, the catalog's skills."""
        with self.phase("workspace"):
            self.workspace.mkdir(parents=True, exist_ok=True)
            if self.backend.isolated:
                hand_over(self.workspace, SANDBOX_UID)
        with self.phase("sandbox_up"):
            sandbox = self.start_sandbox()
            if self.relay is not None:
                self.start_forwarder(sandbox)
        with self.phase("skills"):
            self.install(sandbox)
        return sandbox

    def verify(self, sandbox: Sandbox) -> None:
        """The route the agent took, against the golden set."""
        with self.phase("route"):
            self.judge()

    def admit(self) -> None:
        """What keeps the case from running is blocked_setup, before any model call."""
        problems = list(self.case.problems)
        agent = self.spec.agent
        if isinstance(agent, ChatAgent) and agent.tools != "edit":
            problems.append(f"agent {agent.name!r} has `tools: {agent.tools}`: it loads no skill")
        elif not isinstance(agent, ChatAgent | CommandAgent | ReferenceAgent):
            problems.append(
                f"agent {agent.name!r} is a prompt agent: a route is what an agent loads "
                "by itself in a sandbox (a chat or command agent)"
            )
        image = self.backend.image_problem(self.case.image)
        if image:
            problems.append(image)
        self.write("admission.json", {"problems": problems})
        if problems:
            raise Outcome(Verdict.BLOCKED_SETUP, "admission: " + "; ".join(problems))

    def sandbox_spec(self) -> SandboxSpec:
        """The sandbox: the empty workspace, a writable HOME in the image's root."""
        return self.sandbox_of(
            self.case.image,
            (Mount(source=self.workspace, target=WORKDIR), *self.agent_mounts()),
            ttl_s=self.limits.time_s + 900,
            workdir=WORKDIR,
            home=HOME,
            read_only_root=False,
        )

    def install(self, sandbox: Sandbox) -> None:
        """Every catalog skill where the agent finds skills; ``skills.json`` records where
        and each file's sha256."""
        folder = skills_dir(self.spec.agent)
        self.installed_in = HOME + folder[1:] if folder.startswith("~") else folder
        installed: dict[str, dict[str, str]] = {}
        for skill in self.case.catalog:
            for f in skill.files:
                sandbox.write_file(f"{self.installed_in}/{skill.name}/{f.path}", f.data)
            installed[skill.name] = {f.path: f.sha256 for f in skill.files}
        self.write("skills.json", {"folder": self.installed_in, "skills": installed})

    def judge(self) -> None:
        """The route from the session, graded; the verdict."""
        session = write_trial_session(self.artifacts)
        installed = {
            s.name: s.skill_md.data.decode("utf-8", errors="replace")
            for s in self.case.catalog
            if s.skill_md is not None
        }
        self.route = grade(
            read_events(session),
            expected=self.case.case.expected,
            forbidden=self.case.case.forbidden,
            installed=installed,
            folder=self.installed_in,
            home=HOME,
            workdir=WORKDIR,
        )
        self.write("route.json", self.route.model_dump(mode="json"))
        run = self.agent_run
        if run.provider_error is not None:
            raise provider_failed(run.provider_error)
        if not run.completed:
            self.verdict = Verdict.FAIL
            self.reason = (
                f"the agent's run did not complete ({run.reason}); {self.route.sentence()}"
            )
            return
        self.verdict = Verdict.PASS if self.route.exact else Verdict.FAIL
        self.reason = self.route.sentence()

    def judged(self) -> TrialOutcome:
        """The route and its scores: ``route`` (exactly the golden set) and
        ``forbidden_avoided`` (no forbidden skill loaded)."""
        route = self.route
        scores: tuple[Score, ...] = ()
        if route is not None and self.verdict in COUNTED_VERDICTS:
            scores = (
                Score(metric="route", value=float(self.verdict is Verdict.PASS)),
                Score(metric="forbidden_avoided", value=float(not route.forbidden_loaded)),
            )
        return TrialOutcome(
            scores=scores,
            details={
                "suite": self.case.suite,
                "case": self.case.id,
                "route": route.model_dump(mode="json", exclude={"loads", "outside"})
                if route
                else None,
            },
        )
