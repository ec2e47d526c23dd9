"""Seed 002's file formats, read as the seed writes them.

```
sdd-benchmark/
  config.yaml                 phases, model, judge_model, parallel, max_samples_per_phase,
                              output_dir (+ skills: phase -> SKILL.md, hangar's addition;
                              + store, evidence, budget_usd, seed)
  datasets/<phase>/samples.yaml   dataset: {phase, version, samples: [{id, name, difficulty,
                                  tags, input, reference_output, scores}]} (+ split)
  datasets/<phase>/rubric.yaml    rubric: {phase, version, scoring_model, dimensions:
                                  [{name, weight, description, scale, anchors, checks}]}
  baselines/<name>.yaml       baseline: {name, created, description, scores, sample_scores}
  reports/                    run-<id>.yaml, run-<id>.json, run-<id>.html, history.yaml
```

A malformed file is refused naming the file, the line and the field; a rubric's weights
must sum to 1. A phase is a folder name (``propose``); the files may call it
``sdd-propose``: both name the same phase.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from hangar.errors import ConfigError
from hangar.files import read_yaml
from hangar.models import ModelSpec
from hangar.scores.thresholds import Thresholds as RegressionThresholds
from hangar.validation import validation_message

M = TypeVar("M", bound=BaseModel)
#: Names of scores a sample gets besides its dimensions.
RESERVED = ("structural", "judge", "overall")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sample(_Strict):
    """One input with its human-written reference output and human scores."""

    id: str
    """Stable id (``BENCH-PROP-001``)."""
    name: str
    """What it is about."""
    difficulty: Literal["easy", "medium", "hard"]
    """The format's difficulty levels."""
    tags: tuple[str, ...] = ()
    """Domain, difficulty and pattern tags."""
    input: dict[str, Any]
    """What the skill gets (its fields, e.g. ``exploration``, and ``project_context``)."""
    reference_output: str
    """The known-good output, written by a person."""
    scores: dict[str, float] | None = None
    """Human scores per dimension (and ``overall``), when assigned."""
    split: Literal["train", "eval", "holdout"] = "eval"
    """Which split (hangar's addition): train samples tune prompts, holdout ones never do."""

    @field_validator("reference_output")
    @classmethod
    def _reference(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the reference output is empty (it must be written by a person)")
        return value


class Dataset(_Strict):
    """A phase's eval set."""

    phase: str
    """The phase (``sdd-propose``)."""
    version: str
    """The dataset's version."""
    samples: tuple[Sample, ...] = Field(min_length=1)
    """Its samples."""

    @model_validator(mode="after")
    def _unique(self) -> Dataset:
        ids = [s.id for s in self.samples]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"sample ids must be unique; repeated: {repeated}")
        return self


class DatasetFile(_Strict):
    """``samples.yaml``."""

    dataset: Dataset


class HasSection(_Strict):
    """The output has this markdown heading (a line that equals it)."""

    has_section: str


class MinCount(_Strict):
    """At least `min_count` lines match `pattern` (multiline regex)."""

    min_count: int = Field(ge=1)
    pattern: str


class MaxTokens(_Strict):
    """The output is at most this many tokens (`hangar.kinds.rubric.checks.count_tokens`)."""

    max_tokens: int = Field(ge=1)


class ReferencesPattern(_Strict):
    """The output contains a match of this regex (spec ids, ticket ids...)."""

    references_pattern: str


class NoPlaceholder(_Strict):
    """No match of this regex (``\\{TODO\\}``, ``\\[TBD\\]``) is left in the output."""

    no_placeholder: str


_CHECKS = {
    "has_section": HasSection,
    "min_count": MinCount,
    "max_tokens": MaxTokens,
    "references_pattern": ReferencesPattern,
    "no_placeholder": NoPlaceholder,
}


def _which_check(value: Any) -> str | None:
    """The kind of a check: the first of its keys that names one."""
    if isinstance(value, BaseModel):
        return next(k for k, v in _CHECKS.items() if isinstance(value, v))
    if isinstance(value, dict):
        return next((k for k in value if k in _CHECKS), None)
    return None


#: A structural check, told by its key (``has_section: ...``).
Check = Annotated[
    Annotated[HasSection, Tag("has_section")]
    | Annotated[MinCount, Tag("min_count")]
    | Annotated[MaxTokens, Tag("max_tokens")]
    | Annotated[ReferencesPattern, Tag("references_pattern")]
    | Annotated[NoPlaceholder, Tag("no_placeholder")],
    Discriminator(
        _which_check,
        custom_error_type="unknown_check",
        custom_error_message="not a check: write one of has_section, min_count (with "
        "pattern), max_tokens, references_pattern, no_placeholder",
    ),
]


class Dimension(_Strict):
    """One quality dimension of a rubric."""

    name: str
    """Its name (a key of the samples' human ``scores``)."""
    weight: float = Field(gt=0, le=1)
    """Its weight (the rubric's weights sum to 1)."""
    description: str
    """What it means, for the judge."""
    scale: Literal["1-5"] = "1-5"
    """The scale (the format's 1-5)."""
    anchors: dict[int, str] = Field(default_factory=dict)
    """What scores mean (1, 3, 5...)."""
    checks: tuple[Check, ...] = ()
    """Structural checks of this dimension."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value in RESERVED:
            raise ValueError(
                f"{value!r} is the name of a sample score: name the dimension otherwise"
            )
        return value

    @field_validator("checks")
    @classmethod
    def _patterns(cls, value: tuple[Check, ...]) -> tuple[Check, ...]:
        for check in value:
            for pattern in (
                getattr(check, f, None) for f in ("pattern", "references_pattern", "no_placeholder")
            ):
                if pattern is not None:
                    try:
                        re.compile(pattern)
                    except re.error as exc:
                        raise ValueError(
                            f"{pattern!r} is not a regular expression: {exc}"
                        ) from None
        return value


class Rubric(_Strict):
    """A phase's scoring rubric."""

    phase: str
    """The phase."""
    version: str
    """The rubric's version."""
    scoring_model: Literal["llm-as-judge", "regex", "hybrid"] = "hybrid"
    """How samples are scored (see `hangar.kinds.rubric.scoring`)."""
    dimensions: tuple[Dimension, ...] = Field(min_length=1)
    """Its dimensions."""

    @model_validator(mode="after")
    def _weights(self) -> Rubric:
        total = sum(d.weight for d in self.dimensions)
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"the dimensions' weights must sum to 1, they sum to {total:g}")
        names = [d.name for d in self.dimensions]
        if len(set(names)) != len(names):
            raise ValueError(f"dimension names must be unique, got {names}")
        if self.scoring_model == "regex" and not any(d.checks for d in self.dimensions):
            raise ValueError("a regex rubric needs checks")
        return self


class RubricFile(_Strict):
    """``rubric.yaml``."""

    rubric: Rubric


#: The format's names of the levels of `hangar.scores.thresholds.Thresholds`.
_LEVELS = {"group": "phase", "task": "sample", "part": "dimension"}


class Thresholds(RegressionThresholds):
    """When a drop is a regression, in points (the format's defaults, under its names:
    ``phase`` a phase's average, ``sample`` a sample's score, ``dimension`` a phase's
    dimension average). Changed ones need a reason."""

    model_config = ConfigDict(
        alias_generator=lambda name: _LEVELS.get(name, name),
        validate_by_name=True,
        serialize_by_alias=True,
    )

    reason: str = ""
    """Why they differ from the defaults (required then: the format asks to document why)."""

    @model_validator(mode="after")
    def _reason(self) -> Thresholds:
        if self.changed() and not self.reason.strip():
            raise ValueError(
                "changed regression thresholds need a reason: the seed asks to document why "
                "a project departs from 0.3 / 1.0 / 0.5 points"
            )
        return self


class Config(_Strict):
    """``config.yaml`` (the benchmark format's ``benchmark_run.config``, and hangar's additions)."""

    phases: tuple[str, ...] = Field(min_length=1)
    """The phases to benchmark (folders under ``datasets/``)."""
    model: ModelSpec
    """The model that runs the skills (an id, or a full model spec)."""
    judge_model: ModelSpec
    """The judge, fixed for the benchmark: results scored by another are not comparable."""
    parallel: bool = True
    """Run samples in parallel (False: one at a time)."""
    max_samples_per_phase: int | None = Field(default=None, gt=0)
    """Cap for cost control (a seeded subset beyond it)."""
    output_dir: str = "reports/"
    """Where reports and ``history.yaml`` go (relative to the benchmark folder)."""
    skills: dict[str, str] = Field(default_factory=dict)
    """hangar's addition: phase -> the SKILL.md it benchmarks (relative to the folder);
    a phase not named here uses ``skills/<phase>/SKILL.md`` or ``skills/sdd-<phase>/SKILL.md``."""
    store: str | None = None
    """Results store URL (default: the local store)."""
    evidence: str | None = None
    """Evidence store URL (default: the local folder)."""
    budget_usd: float | None = Field(default=None, gt=0)
    """Stop scheduling new samples once a run spent this much (model and judge)."""
    seed: int = 0
    """Seed of the subsets."""
    regression: Thresholds = Field(default_factory=lambda: Thresholds())
    """hangar's addition: when a drop is a regression (changed: with a reason)."""


class Baseline(_Strict):
    """``baselines/<name>.yaml``: an immutable snapshot of a run's scores."""

    name: str
    """Its name (``baseline-v1``); a new version is a new file."""
    created: str
    """When (ISO 8601)."""
    description: str = ""
    """What it is."""
    scores: dict[str, float]
    """Phase -> average sample score."""
    sample_scores: dict[str, float] = Field(default_factory=dict)
    """Sample id -> its score."""
    dimension_scores: dict[str, dict[str, float]] = Field(default_factory=dict)
    """hangar's addition: phase -> dimension -> average (for dimension regressions)."""
    sample_dimension_scores: dict[str, dict[str, float]] = Field(default_factory=dict)
    """hangar's addition: sample id -> dimension -> score (names a sample's fallen dimension)."""
    judge_model: str | None = None
    """hangar's addition: the judge that scored it (a different judge is not comparable)."""
    run_id: str | None = None
    """hangar's addition: the run it was taken from."""
    skill_versions: dict[str, str] = Field(default_factory=dict)
    """hangar's addition: phase -> the skill version it measured (a regression names a
    skill changed since)."""


class BaselineFile(_Strict):
    """``baselines/<name>.yaml``."""

    baseline: Baseline


def phase_name(phase: str) -> str:
    """``sdd-propose`` and ``propose`` name the same phase."""
    return phase.removeprefix("sdd-")


def load(path: Path, model: type[M], what: str) -> M:
    """Read and validate one of the benchmark's files; errors name file, line and field."""
    data = read_yaml(path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        text = path.read_text(errors="replace")
        raise ConfigError(validation_message(str(path), what, exc, text, model=model)) from None


def load_config(folder: Path) -> Config:
    """``config.yaml``: the config under ``benchmark_run.config`` as the seed shows it,
    under ``config``, or at the top level."""
    path = folder / "config.yaml"
    data = read_yaml(path)
    root: tuple[str, ...] = ()
    for key in ("benchmark_run", "config"):
        if isinstance(data, dict) and key in data:
            data, root = data[key], (*root, key)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        text = path.read_text(errors="replace")
        raise ConfigError(
            validation_message(str(path), "benchmark config", exc, text, root)
        ) from None


def yaml_text(data: Any) -> str:
    """YAML as people read it (keys in order, block style)."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def write_yaml(path: Path, data: Any) -> None:
    """Write YAML as people read it (keys in order, block style)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml_text(data))
