"""Sweep files and their lazy expansion into trials.

A sweep is scenarios x agents x models x arms x repeats. Scenarios are loaded (and
digested) once; trials are generated one at a time, in an order that cycles through
models fastest so that per-model caps rarely stall the driver.

```yaml
id: statkit-demo                  # default: the file's stem
scenarios: [median/scenario.yaml, "suites/core/*.yaml", suites/extra/]   # globs or suites
agents_file: agents.yaml          # and/or inline `agents: {name: {command: ...}}`
models: [none]
arms: {control: [], skill: [tdd]}
repeats: 1
backend: docker
store: sqlite:///runs/hangar.db   # or postgresql+psycopg://...
evidence: file://runs/evidence    # or s3://bucket/prefix
concurrency: {sandbox_slots: 2, max_in_flight: null, per_model: {}}
retry: {infra_retries: 2, backoff_s: 2, backoff_max_s: 60}
```
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import itertools
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar
from urllib.parse import unquote, urlparse

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
)

from hangar.agents import AgentSpec, load_agents, parse_agent
from hangar.errors import AdmissionError, ConfigError, HangarError
from hangar.files import read_yaml
from hangar.models import ModelSpec
from hangar.paths import runs_dir
from hangar.results import TrialResult, Verdict
from hangar.sandbox.config import BackendConfig, DockerConfig
from hangar.sealing import sealed_suite_of
from hangar.sealing import verify as verify_suite
from hangar.trials import Arm, Task, TrialSpec, trial_key
from hangar.trials.kind import (
    Kind,
    Matrix,
    SweepSettings,
    kind_of,
    kind_of_file,
    kinds,
    resolve_entry,
    tasks_in,
)
from hangar.validation import check_name, validation_message

if TYPE_CHECKING:
    from hangar.store import ResultsStore


PromptPlace = Literal["auto", "driver", "nodes"]
"""Where a sweep's trials that need no sandbox run (`Concurrency.prompt_trials`)."""


class Concurrency(BaseModel):
    """How many trials run at once."""

    model_config = ConfigDict(extra="forbid")

    sandbox_slots: int = Field(default=2, gt=0)
    """Sandboxes per node (the ``hangar_sandbox`` resource of an embedded Ray node)."""
    max_in_flight: int | None = Field(default=None, gt=0)
    """Trials submitted at once (default: twice the cluster's sandbox slots)."""
    per_model: dict[str, int] = Field(default_factory=dict)
    """In-flight cap per model id."""
    warm_sandboxes: int | None = Field(default=None, ge=0)
    """Sandboxes each node keeps started ahead of need, per kind of sandbox its trials
    use (`hangar.sandbox.warm_pool`; 0: none, each trial starts its own). Default: the node's
    sandbox slots (at most the window) on a node with more CPUs than slots, none on a
    node whose trials can fill its CPUs."""
    prompt_trials: PromptPlace = "auto"
    """Where trials that need no sandbox (a decision case's prompt, a judged sample) run:
    ``driver``, in threads of the driver's own process; ``nodes``, in pool processes on
    the nodes (`scheduler.pool`); ``auto``, the driver when every node of the cluster is
    this machine (its model calls leave from the same place either way), else the nodes."""


class RetryPolicy(BaseModel):
    """Retries of infra_error and verifier_error trials (the agent's outcomes are never
    retried)."""

    model_config = ConfigDict(extra="forbid")

    infra_retries: int = Field(default=2, ge=0)
    """Extra attempts after an infra_error or a verifier_error."""
    backoff_s: float = Field(default=2.0, ge=0)
    """Wait before the first retry; doubles each time."""
    backoff_max_s: float = Field(default=60.0, ge=0)
    """Longest wait between attempts."""
    node_retries: int = Field(default=3, ge=0)
    """Ray re-runs of a task whose worker or node died."""

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before `attempt` (2 is the first retry)."""
        return float(min(self.backoff_max_s, self.backoff_s * 2.0 ** max(0, attempt - 2)))


class UntilDecided(BaseModel):
    """Run a comparison with fixed roles in rounds of paired units and stop it once its
    decision is reached (`hangar.scores.sequential`): ``hangar run --until-decided``."""

    model_config = ConfigDict(extra="forbid")

    baseline: str
    """The baseline's value of the factor compared (an arm, a model or an agent)."""
    candidate: str
    """The candidate's value of the same factor."""
    metric: str | None = None
    """The metric the decision is on (default: the first the two groups share of
    ``pass``, ``correct``, ``resolved``, ``reward``, else the first by name)."""
    round: int = Field(default=10, gt=0)
    """Paired units (tasks) added per round."""
    max_units: int | None = Field(default=None, gt=0)
    """The most paired units a comparison runs on (default: every task of the sweep)."""
    seed: int = 0
    """Seed of the random order the units are drawn in."""


class SweepFile(BaseModel):
    """A sweep file as written (paths relative to it)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    """Sweep id; resume and the store key on it (default: the file's stem). ``{date}``
    (UTC ``2026-12-03``) or ``{week}`` (ISO ``2026-W49``) in it start a new run each day or
    week (``weekly-{week}``), resumed within it; `hangar run --new` starts one any time."""

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        if value is not None:
            check_name(expand_id(value, datetime(2000, 1, 3, tzinfo=UTC)))
        return value

    scenarios: list[str]
    """Scenario files, globs or suite folders."""
    agents: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Inline agents: name -> config."""
    agents_file: str | None = None
    """A YAML file of agents (name -> config)."""
    models: list[ModelSpec] = Field(default_factory=lambda: [ModelSpec(id="none")])
    """Models: ids, or full specs (see `hangar.models`); ``none`` for no model."""
    budget_usd: float | None = Field(default=None, gt=0)
    """Stop scheduling new trials once this much has been spent (this run and earlier)."""
    arms: dict[str, list[str]] = Field(default_factory=lambda: {"control": list[str]()})
    """Arm name -> the scenario plugins it installs."""
    repeats: int = Field(default=1, gt=0)
    """Trials per (scenario, agent, model, arm)."""
    backend: BackendConfig = Field(default_factory=DockerConfig)
    """Sandbox backend and its settings: ``docker``, or ``{kind: kubernetes, namespace:
    ..., runtime_class: gvisor}`` (see `hangar.sandbox.config`)."""
    store: str | None = None
    """Results store URL (default: sqlite in ``runs/`` beside the sweep file; a relative
    sqlite path is read from the sweep file's folder)."""
    evidence: str | None = None
    """Evidence store URL (default: file:// in ``runs/`` beside the sweep file; a relative
    path is read from the sweep file's folder)."""
    evidence_endpoint: str | None = None
    """S3 endpoint URL (MinIO, Ceph, a local server); default from the AWS settings."""
    concurrency: Concurrency = Field(default_factory=Concurrency)
    """Slots, window and caps."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retries of infrastructure failures."""
    margin: float | None = Field(default=None, gt=0, le=100)
    """Points of a metric's range the comparisons' decision sentences are about (default:
    the margin its decision suites declare, else 5); recorded with the results, so every
    report of the sweep says the same sentence."""
    until_decided: UntilDecided | None = None
    """Run the comparison of these roles in rounds and stop once decided (see
    `UntilDecided`); reports say it stopped early, after how many units and why."""
    registry: str | None = None
    """Where the nodes of a cluster share the images they build for image tasks and the
    agent CLIs' bundles (``host:port/namespace``): a node pulls what another pushed, and
    pushes what it built; on Kubernetes sandbox pods take their agent's bundle from it."""

    # Each kind's own fields (`Kind.settings_model`) sit beside these: `sweep_file_model`.


class UnloadableScenario(BaseModel):
    """A task file of the sweep that does not load: its trials are ``blocked_setup`` rows
    (keyed on its path and bytes), counted and listed, never silently left out."""

    path: Path
    """The file."""
    scenario_id: str
    """Its ``id`` when the YAML has one, else its path relative to the sweep file."""
    digest: str
    """sha256 of its path and bytes: a fixed file is a new task."""
    suite: str = ""
    """Its suite."""
    error: str
    """Why it does not load."""
    kind: str = "execution"
    """The kind its file is (``decision`` for a decision suite, ``kind: decision``)."""


class Sweep(BaseModel):
    """A loaded sweep: tasks digested, agents and arms validated."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    """Sweep id: the run's (placeholders filled in; with a stamp for `hangar run --new`)."""
    family: str = ""
    """The id as the file gives it (placeholders kept; default its stem): every run of
    the file shares it, so reports find its runs over time."""
    path: Path | None
    """The sweep file."""
    config: SweepFile
    """The file's generic fields."""
    settings: SweepSettings = Field(default_factory=SweepSettings)
    """What it says to its kinds (each kind's own fields, typed)."""
    tasks: list[Task]
    """Every task, of every kind, in file order."""
    agents: dict[str, AgentSpec]
    """Agents by name."""
    arms: list[Arm]
    """The sweep's arms (of the kinds whose arms a sweep chooses: execution scenarios)."""
    unloadable: list[UnloadableScenario] = Field(default_factory=list)
    """Task files that could not be loaded (their trials are blocked_setup rows)."""
    sources: dict[str, Any] = Field(default_factory=dict)
    """What each ``scheme:value`` entry of ``scenarios:`` resolved to, recorded with the
    sweep (a registry dataset's lock: its tasks' commits and digests)."""
    left_out: list[dict[str, str]] = Field(default_factory=list)
    """Image tasks left out before any trial ({scenario, status, reason}: broken or not
    validated), recorded with the sweep for reports and the viewer."""

    def matrix(self, evidence_url: str = "") -> Matrix:
        """What every kind expands its tasks with."""
        c = self.config
        return Matrix(
            id=self.id,
            agents=self.agents,
            arms=tuple(self.arms),
            models=tuple(c.models),
            repeats=c.repeats,
            backend=c.backend,
            evidence_url=evidence_url,
        )

    def of_kind(self, name: str) -> list[Task]:
        """The tasks of the kind called `name`."""
        return [t for t in self.tasks if t.kind == name]

    def breakdown(self) -> list[dict[str, Any]]:
        """The size's terms: tasks of one kind with the same agents and arms (files that
        did not load apart), so `size` = sum(tasks x agents x arms) x models x repeats."""
        matrix = self.matrix()
        terms: dict[tuple[str, int, int, bool], int] = {}
        for kind, task in [(kind_of(t.kind), t) for t in self.tasks] + [
            (kind_of(u.kind), None) for u in self.unloadable
        ]:
            arms = (
                kind.arms(task, matrix) if task is not None else self._fallback_arms(kind, matrix)
            )
            key = (kind.title_of(task), len(kind.agents(matrix)), len(arms), task is None)
            terms[key] = terms.get(key, 0) + 1
        return [
            {"tasks": n, "kind": title, "agents": agents, "arms": arms, "unloadable": bad}
            for (title, agents, arms, bad), n in terms.items()
        ]

    def _per_task(self, kind: Kind, task: Task | None, matrix: Matrix) -> int:
        """Trials of one task (or of an unloadable file of that kind) per model and repeat."""
        arms = kind.arms(task, matrix) if task is not None else self._fallback_arms(kind, matrix)
        return len(kind.agents(matrix)) * len(arms)

    @staticmethod
    def _fallback_arms(kind: Kind, matrix: Matrix) -> list[Arm]:
        """The arms of a file that did not load: the sweep's, or the kind's own."""
        return (
            list(matrix.arms)
            if kind.name == "execution"
            else kind.arms(Task.model_construct(), matrix)
        )

    @property
    def size(self) -> int:
        """Number of trials in the matrix (those of unloadable files included)."""
        c = self.config
        matrix = self.matrix()
        per = sum(self._per_task(kind_of(t.kind), t, matrix) for t in self.tasks)
        per += sum(self._per_task(kind_of(u.kind), None, matrix) for u in self.unloadable)
        return per * len(c.models) * c.repeats

    @property
    def margin(self) -> float | None:
        """The margin (points) of its comparisons: the sweep's own, else the one its
        tasks declare (decision suites do) when they agree, else None (the default)."""
        if self.config.margin is not None:
            return self.config.margin
        declared = {getattr(t, "margin", None) for t in self.tasks} - {None}
        return declared.pop() if len(declared) == 1 else None

    def narrowed(self, pattern: str | None = None, repeats: int | None = None) -> Sweep:
        """Only the tasks whose id matches `pattern` (a regular expression, searched), and
        `repeats` repeats (`hangar run --filter --repeat`)."""
        update: dict[str, Any] = {}
        if pattern is not None:
            try:
                found = re.compile(pattern).search
            except re.error as exc:
                raise ConfigError(
                    f"--filter {pattern!r} is not a regular expression: {exc}"
                ) from None
            update["tasks"] = [t for t in self.tasks if found(t.id)]
            update["unloadable"] = [u for u in self.unloadable if found(u.scenario_id)]
        if repeats is not None:
            update["config"] = self.config.model_copy(update={"repeats": repeats})
        return self.model_copy(update=update)

    def blocked_results(self) -> Iterator[TrialResult]:
        """The blocked_setup result of every trial of an unloadable task file."""
        c = self.config
        now = datetime.now(UTC)
        matrix = self.matrix()
        for bad in self.unloadable:
            kind = kind_of(bad.kind)
            for repeat, arm, agent, model in itertools.product(
                range(c.repeats), kind.arms(None, matrix), kind.agents(matrix), c.models
            ):
                yield TrialResult(
                    sweep=self.id,
                    trial_key=trial_key(
                        "unloadable", bad.digest, agent, model.id, arm=[arm.name], repeat=repeat
                    ),
                    scenario_id=bad.scenario_id,
                    scenario_digest=bad.digest,
                    suite=bad.suite,
                    kind=bad.kind,
                    agent=agent.name,
                    model=model.id,
                    arm=arm.name,
                    repeat=repeat,
                    verdict=Verdict.BLOCKED_SETUP,
                    reason=f"the task file {bad.path} does not load: {bad.error}",
                    agent_digest=agent.digest(),
                    agent_settings=agent.settings(),
                    started_at=now,
                    finished_at=now,
                )

    def trials(self, evidence_url: str) -> Iterator[TrialSpec]:
        """The sweep's trials, lazily; models vary fastest, repeats slowest."""
        matrix = self.matrix(evidence_url)
        shared = {"registry": self.config.registry} if self.config.registry else None
        for repeat in range(self.config.repeats):
            for task in self.tasks:
                kind = kind_of(task.kind)
                for arm in kind.arms(task, matrix):
                    for agent in kind.agents(matrix):
                        for model in matrix.models:
                            spec = kind.spec(task, agent, arm, model, repeat, matrix)
                            yield spec.model_copy(update=shared) if shared else spec


def _scenario_files(
    base: Path, patterns: list[str], sources: dict[str, Any] | None = None
) -> dict[Path, str]:
    """Scenario files -> the suite folder's name they were found in ('' for files). A
    ``scheme:value`` entry (``registry:terminal-bench@2.0``) is the folder its kind
    resolves it to, its suite the entry; what the kind records of it goes in `sources`."""
    files: dict[Path, str] = {}
    for pattern in patterns:
        target = base / pattern
        suite = ""
        resolved = None if target.exists() else resolve_entry(pattern)
        if resolved is not None:
            target, record = resolved
            if sources is not None:
                sources[pattern] = record
            suite = pattern.partition(":")[2]
        if target.is_dir():  # a suite: its scenario files and task folders (task.toml)
            suite = suite or target.resolve().name
            found = sorted(
                {
                    *target.rglob("scenario.yaml"),
                    *target.rglob("*.scenario.yaml"),
                    *target.rglob("task.toml"),
                }
            )
        else:
            # glob.glob, not Path.glob: a pattern may be absolute
            found = sorted(Path(p) for p in glob.glob(str(target), recursive=True))  # noqa: PTH207
        if not found:
            raise ConfigError(f"scenarios: {pattern!r} matches no file (relative to {base})")
        for p in found:
            files.setdefault(p.resolve(), suite)
    return files


def load_sweep(path: Path, overrides: dict[str, str] | None = None) -> Sweep:
    """Load and validate a sweep file; errors name the file and the field. `overrides`:
    fields given on the command line instead of the file's (``{"fixtures": PATH}``)."""
    path = path.resolve()
    config, settings = _sweep_file(path, overrides or {})
    base = path.parent
    agents: dict[str, AgentSpec] = {}
    if config.agents_file:
        agents.update(load_agents(base / config.agents_file))
    text = path.read_text(encoding="utf-8", errors="replace")
    for name, cfg in config.agents.items():
        agents[name] = parse_agent(name, cfg, str(path), base, text=text, root=("agents", name))
    try:
        arms = [Arm(name=name, plugins=tuple(plugins)) for name, plugins in config.arms.items()]
    except ValidationError as exc:
        raise ConfigError(f"{path}: arms: {exc.errors()[0]['msg']}") from None
    if not arms:
        raise ConfigError(f"{path}: `arms` is empty (use `control: []` for no plugins)")
    sources: dict[str, Any] = {}
    tasks, unloadable = _tasks(path, config, settings, sources)
    sweep = Sweep(
        id=expand_id(config.id, datetime.now(UTC)) if config.id else path.stem,
        family=config.id or path.stem,
        path=path,
        config=config,
        settings=settings,
        tasks=tasks,
        agents=agents,
        arms=arms,
        unloadable=unloadable,
        sources=sources,
    )
    matrix = sweep.matrix()
    for kind in {kind_of(t.kind).name: kind_of(t.kind) for t in tasks}.values():
        if not kind.agents(matrix):
            raise ConfigError(
                f"{path}: no agents for its {kind.title}: give `agents` or `agents_file` "
                "(command or chat agents; prompt agents answer decision suites only)"
            )
    return sweep


def _week(now: datetime) -> str:
    year, week, _ = now.isocalendar()
    return f"{year}-W{week:02d}"


#: What an id's placeholders become.
_PLACEHOLDERS: dict[str, Callable[[datetime], str]] = {
    "date": lambda now: now.strftime("%Y-%m-%d"),
    "week": _week,
}


def expand_id(template: str, now: datetime) -> str:
    """`template` with ``{date}`` and ``{week}`` filled in for `now` (UTC)."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in _PLACEHOLDERS:
            raise ValueError(
                f"unknown placeholder {{{name}}} in the id {template!r}: use {{date}} or {{week}}"
            )
        return _PLACEHOLDERS[name](now)

    return re.sub(r"\{([^{}]*)\}", fill, template)


def new_run_id(sweep_id: str, now: datetime) -> str:
    """The id of a new run of a sweep (`hangar run --new`): its id and the UTC time."""
    return f"{sweep_id}.{now.strftime('%Y%m%d-%H%M%S')}"


@functools.cache
def sweep_file_model() -> type[SweepFile]:
    """The sweep file as validated: its generic fields and every kind's own
    (`Kind.settings_model`), so that an unknown or misspelt field is told the nearest
    known one, whichever kind it is of."""
    fields: dict[str, Any] = {}
    owner: dict[str, str] = dict.fromkeys(SweepFile.model_fields, "the sweep")
    for kind in kinds():
        model = kind.settings_model
        for name, info in (model.model_fields if model else {}).items():
            if name in owner:
                raise ConfigError(
                    f"the kind {kind.name!r} declares the sweep field {name!r}, which "
                    f"{owner[name]} has: rename one of them"
                )
            owner[name] = f"the kind {kind.name!r}"
            fields[name] = (info.annotation, info)
    return create_model("SweepFile", __base__=SweepFile, **fields)


def _sweep_file(path: Path, overrides: dict[str, str]) -> tuple[SweepFile, SweepSettings]:
    """The sweep file's generic fields and its kinds' settings, validated."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a sweep file must be a YAML mapping")
    data |= overrides
    text = path.read_text(errors="replace")
    model = sweep_file_model()
    full = _validated(model, data, path, text)
    if not full.models:
        raise ConfigError(f"{path}: `models` is empty")
    generic = {name: getattr(full, name) for name in SweepFile.model_fields}
    config = SweepFile.model_construct(full.model_fields_set & set(generic), **generic)
    mine = [
        _validated(m, {k: v for k, v in data.items() if k in m.model_fields}, path, text)
        for m in (kind.settings_model for kind in kinds())
        if m is not None
    ]
    settings = SweepSettings.holding(
        *(m.located(path.parent) for m in mine), registry=config.registry
    )
    return _located(config, path.parent), settings


_M = TypeVar("_M", bound=BaseModel)


def _validated(model: type[_M], data: dict[str, Any], path: Path, text: str) -> _M:
    """`data` as `model`, or the error naming the file, the field and its line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message = validation_message(str(path), "sweep", exc, text, model=model)
        raise ConfigError(message) from None


class LeftOut(NamedTuple):
    """A task a sweep leaves out until it is ready (`Kind.unready`)."""

    task_id: str
    status: str
    reason: str

    def recorded(self) -> dict[str, str]:
        """How the sweep records it (reports and the viewer read it)."""
        return {"scenario": self.task_id, "status": self.status, "reason": self.reason}


def ready_tasks(
    tasks: list[Task], store: ResultsStore, *, include_unready: bool = False
) -> tuple[list[Task], list[LeftOut]]:
    """The tasks a sweep runs, and those each kind leaves out until they are ready (an
    image task broken or never validated); with `include_unready` it runs them all and
    still names them."""
    unready: dict[str, tuple[str, str]] = {}
    for kind in kinds():
        mine = [t for t in tasks if t.kind == kind.name]
        if mine:
            unready |= kind.unready(mine, store)
    left = [LeftOut(t.id, *unready[t.digest]) for t in tasks if t.digest in unready]
    kept = tasks if include_unready else [t for t in tasks if t.digest not in unready]
    return list(kept), left


def _located(config: SweepFile, base: Path) -> SweepFile:
    """The sweep's stores where its file is, as every other path in it: the defaults in
    ``runs/`` beside it, relative paths read from its folder."""
    runs = runs_dir(base)
    store = config.store or f"sqlite:///{runs / 'hangar.db'}"
    if store.startswith("sqlite:///") and store != "sqlite:///:memory:":
        store = f"sqlite:///{base / store.removeprefix('sqlite:///')}"
    evidence = config.evidence or (runs / "evidence").as_uri()
    parsed = urlparse(evidence)
    if parsed.scheme in ("", "file"):
        local = unquote(parsed.netloc + parsed.path) if parsed.scheme else evidence
        evidence = (base / local).resolve().as_uri()
    return config.model_copy(update={"store": store, "evidence": evidence})


def _tasks(
    path: Path, config: SweepFile, settings: SweepSettings, sources: dict[str, Any]
) -> tuple[list[Task], list[UnloadableScenario]]:
    """The tasks of every file the sweep lists, and the files that do not load (what its
    ``scheme:value`` entries resolved to goes in `sources`)."""
    base = path.parent
    tasks: list[Task] = []
    unloadable: list[UnloadableScenario] = []
    seen: dict[str, Path] = {}
    files = _scenario_files(base, config.scenarios, sources)
    _check_sealed(files, base)
    for file, suite in files.items():
        try:
            found = [kind_of(t.kind).configure(t, settings) for t in tasks_in(file, settings)]
        except AdmissionError:
            raise
        except HangarError as exc:
            unloadable.append(_unloadable(file, base, suite, str(exc)))
            continue
        for task in found:
            if task.id in seen:
                # Unknown and duplicate case ids fail admission.
                raise ConfigError(
                    f"{path}: two scenarios have the id {task.id!r}: {seen[task.id]} and {file} "
                    "(ids must be unique in a sweep; give one of them another id)"
                )
            seen[task.id] = file
            tasks.append(task.model_copy(update={"suite": suite}) if not task.suite else task)
    ids = set(seen) | {u.scenario_id for u in unloadable}
    for kind in kinds():
        kind.admit(settings, ids)
    return tasks, unloadable


def load_task_folder(folder: Path, settings: SweepSettings) -> list[Task]:
    """The tasks of a folder named on the command line (a dataset), in a sweep that says
    `settings`."""
    files = _scenario_files(Path.cwd(), [str(folder.resolve())])
    return [kind_of(t.kind).configure(t, settings) for f in files for t in tasks_in(f, settings)]


def _check_sealed(files: dict[Path, str], base: Path) -> None:
    """Name each file of a sealed suite after the suite; refuse a sealed suite that no
    longer matches its manifest outright."""
    checked: set[Path] = set()
    for file in list(files):
        sealed = sealed_suite_of(file, base)
        if sealed is None:
            continue
        files[file] = sealed.name
        if sealed not in checked:
            checked.add(sealed)
            if broken := verify_suite(sealed):
                raise ConfigError(
                    f"sealed suite {sealed} does not match its manifest:\n  " + "\n  ".join(broken)
                )


def _unloadable(file: Path, base: Path, suite: str, error: str) -> UnloadableScenario:
    """What is known of a task file that does not load."""
    data = file.read_bytes() if file.is_file() else b""
    try:
        rel = file.relative_to(base).as_posix()
    except ValueError:
        rel = str(file)
    sid, kind = rel, "execution"
    with contextlib.suppress(Exception):
        parsed = yaml.safe_load(data)
        if isinstance(parsed, dict) and isinstance(parsed.get("id"), str) and parsed["id"]:
            sid = parsed["id"]
        kind = kind_of_file(file, parsed).name
    digest = hashlib.sha256(rel.encode() + b"\0" + data).hexdigest()
    return UnloadableScenario(
        path=file, scenario_id=sid, digest=digest, suite=suite, error=error, kind=kind
    )
