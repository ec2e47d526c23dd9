"""A benchmark folder loaded: its config, and each phase's samples ready to run.

Each sample becomes a *rubric* trial (`hangar.kinds.rubric.trial`): the phase's skill with the
sample's input, scored by the phase's rubric and the benchmark's judge. A `LoadedSample`
carries everything a worker needs (the skill's text, the rubric, the sample), and its
digest covers all of it and the judge, so a changed rubric, skill, sample or judge is a
new version, never compared with the old.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from hangar.errors import ConfigError
from hangar.kinds.rubric.formats import (
    Config,
    DatasetFile,
    Rubric,
    RubricFile,
    Sample,
    load,
    load_config,
    phase_name,
)
from hangar.models import ModelSpec
from hangar.trials.spec import Supplied, Task

#: The code that scores samples: its digest is part of every sample's version.
_SCORERS = ("checks.py", "judge.py", "scoring.py")


class LoadedSample(Task):
    """One sample of one phase, ready to run as a rubric trial."""

    model_config = ConfigDict(frozen=True)
    key_field: ClassVar[str] = "sample"

    kind: Literal["rubric"] = "rubric"
    """The kind of trial a sample is."""
    path: Path
    """Its samples.yaml."""
    suite: str
    """The benchmark and phase (``sdd-benchmark/propose``)."""
    phase: str
    """The phase (``propose``)."""
    sample: Sample
    """The sample."""
    rubric: Rubric
    """The phase's rubric."""
    skill: Supplied | None
    """The phase's skill (None when its file is missing: blocked_setup)."""
    skill_version: str
    """The skill's version: its front matter's ``version``, else its digest."""
    judge: ModelSpec
    """The judge model (fixed per benchmark)."""
    ci_judge: bool = False
    """Scored by a cheaper CI judge (``--judge-model``): never a baseline."""
    digest: str
    """The sample's version (sample, rubric, skill, judge and scoring code)."""

    @property
    def id(self) -> str:
        """The sample's id (the ``scenario_id`` of its results)."""
        return self.sample.id


class Benchmark(BaseModel):
    """A loaded benchmark folder."""

    folder: Path
    """The folder."""
    name: str
    """Its name (the folder's)."""
    config: Config
    """``config.yaml``."""
    judge: ModelSpec
    """The judge this run uses (the config's, or the CI override)."""
    ci_judge: bool
    """Whether `judge` is a CI override."""
    samples: dict[str, list[LoadedSample]]
    """Phase -> its samples, as they will run."""
    skipped: dict[str, int]
    """Phase -> samples left out by the cap or the subset."""

    @property
    def id(self) -> str:
        """The run's sweep id: one per benchmark, model and judge (resume keys on it)."""
        return f"{self.name}--{self.config.model.id}--judge-{self.judge.id}".replace("/", "-")


def scorer_digest() -> str:
    """sha256 of the code that scores samples."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in _SCORERS:
        h.update((here / name).read_bytes())
    return h.hexdigest()


def skill_version(text: str, sha256: str) -> str:
    """The version in the skill's YAML front matter, else its content digest."""
    if text.startswith("---"):
        head = text.split("---", 2)[1] if text.count("---") >= 2 else ""
        try:
            meta = yaml.safe_load(head) or {}
        except yaml.YAMLError:
            meta = {}
        if isinstance(meta, dict):
            version = meta.get("version") or (meta.get("metadata") or {}).get("version")
            if version is not None:
                return str(version)
    return sha256


def skill_path(folder: Path, config: Config, configured: str) -> str:
    """The SKILL.md a phase benchmarks, relative to the folder: the config's ``skills``
    entry, else ``skills/<phase>/SKILL.md`` or ``skills/sdd-<phase>/SKILL.md``. A named
    file that is missing makes its samples blocked_setup; no name and no file is an error
    now."""
    phase = phase_name(configured)
    for key in (configured, phase, f"sdd-{phase}"):
        if key in config.skills:
            return config.skills[key]
    defaults = [f"skills/{phase}/SKILL.md", f"skills/sdd-{phase}/SKILL.md"]
    for candidate in defaults:
        if (folder / candidate).is_file():
            return candidate
    raise ConfigError(
        f"{folder / 'config.yaml'}: phase {configured!r} names no skill: add "
        f"`skills: {{{configured}: path/to/SKILL.md}}` to the config, or put the skill at "
        f"{' or '.join(defaults)}"
    )


def load_benchmark(
    folder: Path,
    *,
    phases: list[str] | None = None,
    max_samples: int | None = None,
    judge_model: str | dict[str, Any] | None = None,
    split: str | None = None,
    model: str | dict[str, Any] | None = None,
    timeout_s: float | None = None,
) -> Benchmark:
    """Load a benchmark folder (all its configured phases, or `phases`); `max_samples`
    takes a seeded subset per phase (the seed's CI subset), under the config's cap;
    `judge_model` is a cheaper CI judge; `split` keeps one split (``train`` for tuning:
    holdout samples never run there); `model` replaces the config's model; `timeout_s`
    bounds each call of the model and the judge."""
    folder = folder.resolve()
    config = load_config(folder)
    if model is not None:
        config = config.model_copy(update={"model": ModelSpec.model_validate(model)})
    if timeout_s is not None:
        config = config.model_copy(
            update={"model": config.model.model_copy(update={"timeout_s": timeout_s})}
        )
    wanted = [phase_name(p) for p in (phases or config.phases)]
    configured = {phase_name(p): p for p in config.phases}
    unknown = [p for p in wanted if p not in configured]
    if unknown:
        raise ConfigError(
            f"{folder}: phases {unknown} are not in config.yaml (it has {list(configured)})"
        )
    judge = ModelSpec.model_validate(judge_model) if judge_model else config.judge_model
    ci = judge_model is not None and judge.id != config.judge_model.id
    if timeout_s is not None:
        judge = judge.model_copy(update={"timeout_s": timeout_s})
    scorer = scorer_digest()
    samples: dict[str, list[LoadedSample]] = {}
    skipped: dict[str, int] = {}
    for phase in wanted:
        chosen, left = _phase(
            folder, config, configured[phase], phase, judge, ci, scorer, max_samples, split
        )
        samples[phase], skipped[phase] = chosen, left
    return Benchmark(
        folder=folder,
        name=folder.name,
        config=config,
        judge=judge,
        ci_judge=ci,
        samples=samples,
        skipped=skipped,
    )


def _phase(
    folder: Path,
    config: Config,
    configured: str,
    phase: str,
    judge: ModelSpec,
    ci: bool,
    scorer: str,
    max_samples: int | None,
    split: str | None,
) -> tuple[list[LoadedSample], int]:
    base = folder / "datasets" / phase
    dataset = load(base / "samples.yaml", DatasetFile, "dataset").dataset
    rubric = load(base / "rubric.yaml", RubricFile, "rubric").rubric
    for what, name in (("dataset", dataset.phase), ("rubric", rubric.phase)):
        if phase_name(name) != phase:
            raise ConfigError(f"{base}: the {what} is for phase {name!r}, not {phase!r}")
    where = skill_path(folder, config, configured)
    skill = None
    if (folder / where).is_file():
        raw = (folder / where).read_bytes()
        sha = f"sha256:{hashlib.sha256(raw).hexdigest()}"
        skill = Supplied(path=where, sha256=sha, text=raw.decode(errors="replace"))
    version = skill_version(skill.text, skill.sha256) if skill else "missing"
    pool = [s for s in dataset.samples if split is None or s.split == split]
    cap = min(x for x in (max_samples, config.max_samples_per_phase, len(pool)) if x is not None)
    rng = random.Random(f"{config.seed}:{phase}")  # noqa: S311 - a seeded subset, no secret
    chosen = pool if cap >= len(pool) else sorted(rng.sample(pool, cap), key=pool.index)
    loaded = []
    for sample in chosen:
        version_of = {
            "sample": sample.model_dump(mode="json"),
            "rubric": rubric.model_dump(mode="json"),
            "skill": skill.sha256 if skill else "missing",
            "judge": judge.model_dump(mode="json", exclude={"price", "timeout_s"}),
            "scorer": scorer,
        }
        loaded.append(
            LoadedSample(
                path=base / "samples.yaml",
                suite=f"{folder.name}/{phase}",
                phase=phase,
                sample=sample,
                rubric=rubric,
                skill=skill,
                skill_version=version,
                judge=judge,
                ci_judge=ci,
                digest=hashlib.sha256(json.dumps(version_of, sort_keys=True).encode()).hexdigest(),
            )
        )
    return loaded, len(dataset.samples) - len(chosen)
