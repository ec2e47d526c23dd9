"""The kinds of work hangar runs, each behind one interface (`Kind`), found by name.

A kind is a package under ``hangar/kinds/`` (execution scenarios, decision suites, rubric
benchmarks, knowledge gold sets, routing suites) whose ``KIND`` object says how its task
files load, how
a task expands into trial specs, which runner runs a trial, what a node needs for it,
how its tasks travel to the workers, and what the viewer shows of a trial. The trial
core, the scheduler and the viewer know kinds only through `kind_of` and `kinds`:
adding a kind is its package and one line in `REGISTRY` (or, from a package of its own,
an entry point of ``hangar.kinds``: `hangar.plugins`).
"""

from __future__ import annotations

import functools
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny

from hangar.agents import AgentSpec
from hangar.errors import ConfigError
from hangar.files import read_data
from hangar.models import ModelSpec
from hangar.plugins import load_target, plugin_targets
from hangar.results import FORMER_KINDS, TrialResult
from hangar.sandbox.config import BackendConfig, DockerConfig
from hangar.trials.spec import Arm, Task, TrialSpec

if TYPE_CHECKING:
    from hangar.store import ResultsStore
    from hangar.trials.boundary import TrialRun

#: Kind name (a task's and a result's ``kind``) -> the package whose ``KIND`` it is.
REGISTRY: dict[str, str] = {
    "execution": "hangar.kinds.execution",
    "decision": "hangar.kinds.decision",
    "rubric": "hangar.kinds.rubric",
    "knowledge": "hangar.kinds.knowledge",
    "routing": "hangar.kinds.routing",
}

#: Bytes put once into the object store, as the scheduler ships them (opaque to kinds).
Put = Callable[[bytes], Any]
#: On a worker: the fetcher of a shipped object's bytes (called only when needed).
Fetch = Callable[[Any], Callable[[], bytes]]


class Matrix(BaseModel):
    """What a sweep gives every kind to expand its tasks with."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    id: str
    """The sweep id (resume and the store key on it)."""
    agents: dict[str, AgentSpec] = Field(default_factory=dict)
    """The sweep's agents by name; each kind takes those that run its tasks."""
    arms: tuple[Arm, ...] = ()
    """The sweep's arms (of the kinds whose arms a sweep chooses)."""
    models: tuple[ModelSpec, ...] = ()
    """Models."""
    repeats: int = 1
    """Repeats per (task, agent, model, arm)."""
    backend: BackendConfig = Field(default_factory=DockerConfig)
    """The sandbox backend and its settings."""
    evidence_url: str = ""
    """Where the trials write their bundles."""


class KindSettings(BaseModel):
    """A kind's own fields of a sweep file (beside the generic ones, at its top level).

    A kind declares them as a subclass (`Kind.settings_model`); the sweep file is validated with
    every kind's fields (line numbers, "did you mean"), and each kind reads its own back,
    typed, with `SweepSettings.of`. The scheduler and the command line know none of them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    def located(self, base: Path) -> Self:
        """These settings with their relative paths read from the sweep file's folder."""
        return self


_S = TypeVar("_S", bound=KindSettings)


class SweepSettings(BaseModel):
    """What a sweep file says to its kinds: each kind's settings, and the generic ones a
    kind's tasks need."""

    model_config = ConfigDict(frozen=True)

    registry: str | None = None
    """Where the nodes share the images they build (the sweep's ``registry``)."""
    kinds: tuple[SerializeAsAny[KindSettings], ...] = ()
    """The kinds' settings (at most one of each model)."""

    @classmethod
    def holding(cls, *settings: KindSettings, registry: str | None = None) -> SweepSettings:
        """The settings of a sweep that gives these kinds' settings."""
        return cls(registry=registry, kinds=settings)

    def of(self, model: type[_S]) -> _S:
        """The settings of `model`'s kind (its defaults when the sweep gives none)."""
        for settings in self.kinds:
            if isinstance(settings, model):
                return settings
        return model()


class ViewSettings(BaseModel):
    """What the viewer knows beyond the store, for a kind's section of a trial page."""

    suites: dict[str, list[Path]] = Field(default_factory=dict)
    """Task folders given to the viewer, by kind name (e.g. knowledge gold sets)."""


class KindPage(NamedTuple):
    """A page of its own a kind adds to the viewer (a gold set's report, say)."""

    path: str
    """Its route (``/knowledge/{name}``)."""
    template: str
    """Its template, among the kind's (``knowledge/suite.html``)."""
    context: Callable[[dict[str, str], dict[str, str], ViewSettings], dict[str, Any]]
    """(path parameters, query parameters, settings) -> the template's context; raises
    LookupError for a page that does not exist, a HangarError for one that cannot be
    built."""
    action: Callable[[dict[str, str], dict[str, list[str]], ViewSettings], str] | None = None
    """What a form posted to the page does: (path parameters, the form's fields, settings)
    -> where to go next (a path of the viewer); raises a HangarError naming what to fix.
    The viewer checks the form came from its own page before calling it."""


class ReportSection(NamedTuple):
    """What a kind adds to a sweep's report (`hangar report`) about its own trials."""

    title: str
    """Its heading ("Rubric phases")."""
    lines: list[str]
    """Its lines, each a sentence or a row in words."""


class Failure(NamedTuple):
    """A failing step of a trial: a command and the end of what it printed."""

    what: str
    """The command (or step), in words, with how it ended."""
    output: str
    """The end of its output (stderr, then stdout)."""


class About(NamedTuple):
    """What a trial was asked to do, for the top of its page."""

    text: str
    """The task as the agent read it ('' when the evidence does not hold it)."""
    facts: list[tuple[str, str]]
    """(label, value): the repository and revision, the image, the task's source."""


class Kind(ABC):
    """One kind of work (see the module docstring); each package's ``KIND`` subclasses it.

    The defaults suit a kind whose tasks travel inside their trial spec and need no
    sandbox; a kind overrides what differs.
    """

    #: The kind's name: its tasks' and results' ``kind``.
    name: str
    #: Its tasks, for people ("decision cases").
    title: str
    #: Whether its trials take a node's sandbox slot.
    sandboxed: bool = False
    #: The viewer template of its section of a trial page, under the kind's name in its
    #: package's ``templates`` folder (``decision/view.html``; None: none).
    view_template: str | None = None

    def title_of(self, task: Task | None) -> str:
        """What `task` is called, for people (a kind whose sources differ names each;
        None: a file that did not load)."""
        return self.title

    #: What the viewer says of a trial of this kind that has no score yet.
    unscored_note: str = ""
    #: Its trials are scored by an LLM judge (their pages show the judge's usage).
    judged: bool = False
    #: Pages of its own in the viewer.
    pages: tuple[KindPage, ...] = ()
    #: Its own command groups: (name, the module whose ``app`` is its Typer group).
    cli: tuple[tuple[str, str], ...] = ()
    #: Former names of its groups, still accepted but not listed: (old name, module).
    cli_aliases: tuple[tuple[str, str], ...] = ()
    #: Its own fields of a sweep file (None: it has none).
    settings_model: type[KindSettings] | None = None

    @property
    def templates(self) -> Path:
        """The kind's own viewer templates (its package's ``templates`` folder)."""

        module = sys.modules[type(self).__module__]
        return Path(str(module.__file__)).parent / "templates"

    def recognizes(self, path: Path, data: Any) -> bool:
        """Whether the file `path` of a sweep's ``scenarios:`` (`data`: its parsed YAML)
        holds tasks of this kind."""
        return False

    def load(self, path: Path, data: Any, settings: SweepSettings) -> list[Task]:
        """The tasks of the file `path` (`data`: its parsed YAML) in a sweep that says
        `settings`."""
        raise NotImplementedError(f"{self.title} are not listed in sweep files")

    #: Formats its trials are exported in (`hangar export --format NAME`): (name, the
    #: ``module:function`` that writes them: (sweep id, latest results, the sweep's
    #: record, the output folder, a trial's evidence folder) -> departures in words).
    exports: tuple[tuple[str, str], ...] = ()
    #: The schemes of ``scenarios:`` entries it resolves (``registry`` for
    #: ``registry:terminal-bench@2.0``).
    schemes: tuple[str, ...] = ()

    def resolve(self, scheme: str, value: str) -> tuple[Path, dict[str, Any]]:
        """The folder a ``scheme:value`` entry of ``scenarios:`` names, and what the sweep
        records of it (a dataset's lock); errors say what to do."""
        raise NotImplementedError(f"{self.title} have no {scheme}: entries")

    def admit(self, settings: SweepSettings, ids: set[str]) -> None:
        """Refuse the whole sweep (`hangar.errors.AdmissionError`) when its `settings` for
        this kind do not fit the ids of its tasks (`ids`: every task's, of every kind,
        files that did not load included), e.g. a fixture registry's unknown case id."""
        return None

    def unready(self, tasks: list[Task], store: ResultsStore) -> dict[str, tuple[str, str]]:
        """This kind's tasks a sweep leaves out until they are ready, by task digest:
        (status, reason), e.g. an image task broken or never validated. None by default."""
        return {}

    def configure(self, task: Task, settings: SweepSettings) -> Task:
        """`task` with the sweep's `settings` that concern it (e.g. an ``image_map``)."""
        return task

    @abstractmethod
    def agents(self, matrix: Matrix) -> list[AgentSpec]:
        """The agents of the sweep that run this kind's tasks."""

    @abstractmethod
    def arms(self, task: Task | None, matrix: Matrix) -> list[Arm]:
        """The arms `task` runs in (None: a task file of this kind that did not load, whose
        trials are recorded as blocked_setup)."""

    @abstractmethod
    def spec(
        self, task: Task, agent: AgentSpec, arm: Arm, model: ModelSpec, repeat: int, m: Matrix
    ) -> TrialSpec:
        """The spec of one trial of `task`."""

    @abstractmethod
    def runner(self, spec: TrialSpec) -> TrialRun:
        """The runner of a trial of this kind."""

    def problems(self, task: Task, matrix: Matrix, *, deep: bool) -> list[str]:
        """What keeps `task` from running, found before any trial (`hangar sweep check`);
        `deep` also asks git and the container engine."""
        return []

    def image(self, task: Task) -> str | None:
        """The sandbox image `task`'s trials start (None: no sandbox)."""
        return None

    def host_services(self, task: Task) -> tuple[str, ...]:
        """Services of the worker itself (``ADDRESS:PORT``) `task`'s trials may reach, for
        the preflight to ask each node about."""
        return ()

    def token_guess(self, spec: TrialSpec) -> tuple[int, int] | None:
        """(input, output) tokens of a trial's model calls when the task alone tells them (a
        prompt trial's prompt and an answer's allowance), for the estimate of a model's
        first run (`hangar.scores.estimate`); None when it cannot (an agent's loop)."""
        return None

    def shipper(self, put: Put) -> Callable[[Task], Any]:
        """Driver side: what a trial of a task carries to the worker beside its spec."""
        return lambda task: None

    def localise(self, spec: TrialSpec, shipped: Any, fetch: Fetch, cache: Path) -> TrialSpec:
        """Worker side: `spec` made this node's from what the driver `shipped`."""
        return spec

    def view(self, result: TrialResult, evidence: Path | None, settings: ViewSettings) -> Any:
        """The data of its section of a trial page (`evidence`: the bundle's folder)."""
        return {}

    def about(self, evidence: Path) -> About:
        """The task the trial ran, from its evidence (the bundle's folder)."""
        return About(text="", facts=[])

    def report_sections(self, results: list[TrialResult]) -> list[ReportSection]:
        """Its own sections of a sweep's report, from its trials' results (latest
        attempts); none by default (the generic groups, metrics and comparisons cover it)."""
        return []

    def failures(self, evidence: Path) -> list[Failure]:
        """What failed, with its output, from a trial's evidence (the bundle's folder):
        shown first by `hangar trial show` and the trial page."""
        return []


@functools.cache
def registry() -> dict[str, str]:
    """Every kind: hangar's (`REGISTRY`) and installed packages' (entry points of
    ``hangar.kinds``, `hangar.plugins`)."""
    return {**REGISTRY, **plugin_targets("hangar.kinds", REGISTRY)}


#: Each kind's object by the entry point that names it (`kind_of`).
_LOADED: dict[str, Kind] = {}


def kind_of(name: str) -> Kind:
    """The kind called `name` (imported when first asked for: a worker loads only what
    its trials need)."""
    known = registry()
    name = FORMER_KINDS.get(name, name)
    try:
        package = known[name]
    except KeyError:
        raise KeyError(f"no kind {name!r}; known: {', '.join(known)}") from None
    kind = _LOADED.get(package)
    if kind is None:  # an import each time cost a sweep of 100,000 trials 1 s of its driver
        kind = _LOADED[package] = load_target(package, "KIND")
    if kind.name != name:
        raise KeyError(f"kind {name!r} ({package}) is called {kind.name!r}: name them alike")
    return kind


#: Task files whose data the kinds are shown (each kind knows its own by what it says:
#: ``kind: decision`` in a YAML or a JSON suite alike); others are recognised by name.
_DATA_SUFFIXES = (".yaml", ".yml", ".json")


def kind_of_file(file: Path, data: Any) -> Kind:
    """The kind whose task files `file` (`data`: its parsed content) is one of."""
    for kind in kinds():
        if kind.recognizes(file, data):
            return kind
    raise ConfigError(f"{file}: no kind of task reads this file")


def resolve_entry(entry: str) -> tuple[Path, dict[str, Any]] | None:
    """The folder and record of a ``scheme:value`` entry of a sweep's ``scenarios:`` (None:
    not such an entry: a path or a glob)."""
    scheme, sep, value = entry.partition(":")
    if not sep or "/" in scheme or not scheme.isidentifier():
        return None
    for kind in kinds():
        if scheme in kind.schemes:
            return kind.resolve(scheme, value)
    known = ", ".join(sorted({s for k in kinds() for s in k.schemes})) or "none"
    raise ConfigError(f"scenarios: {entry!r}: no kind reads {scheme}: entries (known: {known})")


def export_format(name: str) -> Callable[..., list[str]]:
    """The writer of the export format `name` (a kind's `Kind.exports`)."""
    for kind in kinds():
        for format_name, target in kind.exports:
            if format_name == name:
                return cast("Callable[..., list[str]]", load_target(target))
    known = ", ".join(["jsonl", *sorted(f for k in kinds() for f, _ in k.exports)])
    raise ConfigError(f"--format {name}: no such export format (known: {known})")


def tasks_in(file: Path, settings: SweepSettings | None = None) -> list[Task]:
    """A task file's tasks (a scenario, a decision suite's cases), read by its kind in a
    sweep that says `settings` (none: the kinds' defaults)."""
    data = read_data(file) if file.suffix in _DATA_SUFFIXES else None
    return kind_of_file(file, data).load(file, data, settings or SweepSettings())


def report_sections(results: list[TrialResult]) -> list[tuple[str, ReportSection]]:
    """Every kind's sections of a report on `results`: (kind name, section)."""
    found = []
    for kind in kinds():
        mine = [r for r in results if r.kind == kind.name]
        if mine:
            found += [(kind.name, s) for s in kind.report_sections(mine)]
    return found


def kinds() -> list[Kind]:
    """Every registered kind."""
    return [kind_of(name) for name in registry()]
