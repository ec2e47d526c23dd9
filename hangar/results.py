"""What a trial produces: its verdict, reason, timings, usage and evidence.

`TrialResult` is the one message a worker sends back to the driver and the one row
shape the results store persists; it carries a `schema_version`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Former names of kinds -> their names now: results stored under a former name read as
#: the kind's (the store also rewrites them, schema 10).
FORMER_KINDS = {"prompt": "decision"}

RESULT_SCHEMA_VERSION = 3

#: How the URI of an evidence archive kept in the results store begins (the store key
#: follows: ``store:///<sweep>/<trial key>/<attempt>/<run>/bundle.tar.gz``).
STORED_PREFIX = "store:///"


class Verdict(StrEnum):
    """How a trial ended. Only `pass` and `fail` count in scores."""

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    """Every check passed on admitted evidence."""
    FAIL = "fail"
    """The agent's work did not pass (or could not be shown to)."""
    BLOCKED_SETUP = "blocked_setup"
    """The fixture was missing or broken, or prepare failed; no agent ran."""
    INFRA_ERROR = "infra_error"
    """The farm failed (sandbox, daemon); retried, reported, never counted as a fail."""
    VERIFIER_ERROR = "verifier_error"
    """The task's verifier crashed, hung or printed what cannot be read, where nothing of
    the agent ran it: the task's problem. Retried like infra_error, never counted."""
    VOID = "void"
    """A canary leaked into the trace; the trial says nothing about the agent."""

    @property
    def final(self) -> bool:
        """Whether a re-run would be pointless (everything but infra_error and
        verifier_error, which a retry can mend)."""
        return self not in (Verdict.INFRA_ERROR, Verdict.VERIFIER_ERROR)


#: The verdicts that say something of the agent: only these are scored.
COUNTED_VERDICTS = (Verdict.PASS, Verdict.FAIL)

CheckStatus = Literal["pass", "fail", "unassessed"]


class FindingOutcome(BaseModel):
    """A finding of the host verifier, as admitted (route, scope, or a check)."""

    model_config = ConfigDict(frozen=True)

    status: CheckStatus
    """pass, fail or unassessed."""
    evidence: tuple[str, ...] = ()
    """Files under the artifacts folder that support the finding."""


class CheckOutcome(FindingOutcome):
    """One checklist requirement as the host verifier judged it."""

    requirement: str
    """The exact checklist string."""


Scale = Literal["binary", "points", "count"]


class Score(BaseModel):
    """What a trial is worth on one metric, beside its verdict (what happened).

    ``binary`` is 0 or 1 (an execution trial's ``pass``, a decision case's ``correct``);
    ``points`` lies within `low`..`high` (a rubric's 1-5); ``count`` is a number of
    things. A score whose value is None was not assessed (shown, never dropped)."""

    model_config = ConfigDict(frozen=True)

    metric: str
    """The metric's name (``pass``, ``correct``...)."""
    value: float | None
    """The score (None: not assessed)."""
    scale: Scale = "binary"
    """How to read it (and which statistics apply)."""
    low: float | None = None
    """The lowest value of a ``points`` scale."""
    high: float | None = None
    """The highest value of a ``points`` scale."""


CHECK_SYSTEM = "Answer with one word."
CHECK_USER = "Say OK."
"""A sweep's model check (`hangar.models.exists`): one call of these words per model
before the first trial (the scripted server tells it from trial calls by them)."""


class ProviderError(BaseModel):
    """A model provider's failure that is not the agent's: it makes a trial that did not
    pass an ``infra_error`` (never a counted fail)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["auth", "not_found", "unavailable"]
    """``auth``: the provider refused the key (401/403), so every trial of the model would
    fail the same way; ``not_found``: the provider has no such model (404, or the API's
    400 saying so): the same, for every trial; ``unavailable``: 5xx, 429, timeout or a
    dropped stream that no later call recovered from."""
    model: str
    """The model id."""
    status: int | None = None
    """The provider's HTTP status (None for a timeout or a dropped connection)."""
    message: str
    """What happened, in words."""
    key_env: str = ""
    """The host variable holding the key (for ``auth``)."""

    @property
    def stops_model(self) -> bool:
        """Whether every trial of the model would fail the same way (its key refused, or
        no such model): the sweep sends none of them any more."""
        return self.kind in ("auth", "not_found")


class Usage(BaseModel):
    """Model tokens and their cost, metered on the host."""

    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    output_tokens: int = 0
    """Completion tokens, reasoning included."""
    cached_input_tokens: int = 0
    """Prompt tokens served from the provider's cache."""
    reasoning_tokens: int = 0
    """Reasoning tokens (a part of output_tokens)."""
    cost_usd: float = 0.0
    """Cost in US dollars at the model's prices."""


class TrialOutcome(BaseModel):
    """What a trial's run knows beyond its identity and verdict (`TrialRun.outcome`): the
    fields of its `TrialResult` that a kind fills, typed where the kind writes them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    completed: bool = False
    """The agent ran to its end (see `TrialResult.completed`)."""
    agent_exit_code: int | None = None
    """The agent's exit code, when it ran as a command."""
    checks: tuple[CheckOutcome, ...] = ()
    """The graded checks."""
    route: FindingOutcome | None = None
    """The route finding, where the kind judges one."""
    scope: FindingOutcome | None = None
    """The scope finding, where the kind judges one."""
    provider_error: ProviderError | None = None
    """The provider's failure that made the trial an infra_error."""
    scores: tuple[Score, ...] = ()
    """The trial's scores (none for a verdict that says nothing of the agent)."""
    usage: Usage = Field(default_factory=Usage)
    """The agent's metered model use."""
    judge_usage: Usage = Field(default_factory=Usage)
    """A model judge's use."""
    details: dict[str, Any] = Field(default_factory=dict)
    """The kind's own provenance and findings, for its reports."""

    def result_fields(self) -> dict[str, Any]:
        """The fields as `TrialResult` takes them (the values themselves, not dumps)."""
        return {name: getattr(self, name) for name in type(self).model_fields}


class TrialResult(BaseModel):
    """The outcome of one trial attempt."""

    schema_version: int = RESULT_SCHEMA_VERSION
    """Version of this shape."""
    sweep: str
    """Sweep id."""
    trial_key: str
    """sha256 of (scenario digest, agent, model, arm, repeat)."""
    scenario_id: str
    """The scenario's id."""
    scenario_digest: str
    """The scenario version that ran."""
    suite: str = ""
    """The suite of the scenario ('' when it was named on its own)."""
    agent: str
    """Agent name."""
    model: str
    """Model id (``none`` when the agent uses no model)."""
    arm: str
    """Arm name."""
    repeat: int = 0
    """Repeat index."""
    attempt: int = 1
    """Attempt number (retries of infra_error count up)."""
    verdict: Verdict
    """How the trial ended."""
    reason: str
    """Why, in words; names the rule or phase that decided it."""
    completed: bool = False
    """The agent's run ended by itself, exit 0, within its time."""
    agent_exit_code: int | None = None
    """Exit code of a command agent."""
    checks: tuple[CheckOutcome, ...] = ()
    """The verification's checklist findings, as admitted."""
    route: FindingOutcome | None = None
    """The verification's route finding (None when it could not be read)."""
    scope: FindingOutcome | None = None
    """The verification's scope finding (None when it could not be read)."""
    agent_digest: str = ""
    """sha256 of the agent's settings (its command or preset and options)."""
    agent_settings: dict[str, Any] = Field(default_factory=dict)
    """The agent's settings in brief (kind, preset, options, the command's sha256)."""
    plugins_digest: str = ""
    """sha256 of the names and bytes of the plugins the arm installed."""
    provider_error: ProviderError | None = None
    """The model provider's failure that decided an infra_error, if one did."""
    kind: str = "execution"
    """The kind of trial (a name in `hangar.trials.kind.REGISTRY`; a former name is read as
    the kind's name now, `FORMER_KINDS`)."""

    @field_validator("kind", mode="before")
    @classmethod
    def _current_kind(cls, value: Any) -> Any:
        return FORMER_KINDS.get(value, value) if isinstance(value, str) else value

    scores: tuple[Score, ...] = ()
    """What it is worth, per metric (only for pass and fail: what happened to the others
    says nothing of the agent)."""
    judge_usage: Usage = Field(default_factory=Usage)
    """A judge's tokens and cost (reported apart from the model's, counted in budgets)."""
    details: dict[str, Any] = Field(default_factory=dict)
    """What its kind records beyond the rest (a decision case: the skill and its digest,
    the case-set and grader digests, the references supplied, the selected choices)."""
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds per lifecycle phase."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens and cost."""
    evidence_uri: str | None = None
    """Where the evidence archive is."""
    evidence_sha256: str | None = None
    """sha256 of the bundle archive."""
    evidence_data: bytes | None = Field(default=None, exclude=True, repr=False)
    """The archive itself, on its way to the results store, for a bundle kept there (its
    URI starts with `STORED_PREFIX`); never in a dump, and None once recorded or read."""
    node: str = ""
    """Host that ran it."""
    started_at: datetime
    """When the trial started (UTC)."""
    finished_at: datetime
    """When it ended (UTC)."""

    @field_validator("scores")
    @classmethod
    def _by_metric(cls, value: tuple[Score, ...]) -> tuple[Score, ...]:
        """Scores in metric order (as the store gives them back)."""
        metrics = [s.metric for s in value]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"a trial has one score per metric, got {metrics}")
        return tuple(sorted(value, key=lambda s: s.metric))

    @property
    def duration_s(self) -> float:
        """Wall time of the trial."""
        return (self.finished_at - self.started_at).total_seconds()


class _Open(BaseModel):
    """A part of a sweep's record: the fields hangar reads, typed; the rest kept as is."""

    model_config = ConfigDict(extra="allow")


class RecordedConcurrency(_Open):
    sandbox_slots: int | None = None
    """Sandbox slots per node the sweep ran with."""


class RecordedRetry(_Open):
    infra_retries: int = 0
    """How often an infra_error was sent again."""


class SweepRecord(_Open):
    """A sweep's configuration as the results store keeps it (`ResultsStore.sweep_config`):
    the sweep file's settings as it ran, and what the run added (its family, the tasks it
    left out, the dataset locks, the margin, how its comparisons ended). Every field has a
    default, so the record of any earlier version reads; fields hangar does not read are
    kept, untyped."""

    id: str | None = None
    family: str | None = None
    """The sweep file's own id: the runs of one file share it (`hangar compare`)."""
    repeats: int = 1
    margin: float | None = None
    """The margin its sentences used, in points (None: recorded before margins were)."""
    left_out: list[dict[str, Any]] = Field(default_factory=list)
    """Tasks left out as broken or never validated."""
    sources: dict[str, Any] = Field(default_factory=dict)
    """Each task source's lock (``registry:NAME@VERSION`` -> the dataset lock)."""
    until_decided: dict[str, Any] | None = None
    """The roles of a sweep run until decided (``baseline``, ``candidate``)."""
    sequential: list[dict[str, Any]] = Field(default_factory=list)
    """How its comparisons ended, when it ran until decided."""
    concurrency: RecordedConcurrency = Field(default_factory=RecordedConcurrency)
    retry: RecordedRetry = Field(default_factory=RecordedRetry)
