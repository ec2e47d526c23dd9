"""Routing suites: which skills an agent loads by itself for a prompt, against a golden set.

A routing suite is one YAML file; a sweep names it under ``scenarios:`` like any task file:

```yaml
kind: routing
id: core-routing
image: hangar/base:bookworm        # the sandbox (it must hold the agent's CLI)
skills:                            # the catalog: name -> its folder (holding SKILL.md)
  tdd: skills/tdd
  code-review: skills/code-review
cases:
  - id: route:failing-bug-report   # stable: a case that changes meaning gets a new id
    prompt: "A bug report says parse() drops the last field. Fix it."
    expected: [tdd]                # the skills it must load, exactly
    forbidden: [code-review]       # skills it must not load (named apart when it does)
limits: {time_s: 300}
```

Every skill of the catalog is installed where the trial's agent finds skills natively
(`hangar.agents.skills`), the agent gets the prompt with the network off, and the route is
what its session shows it loaded (`grading`). `consistency` is the offline golden check of
``hangar routing check`` (every case names catalog skills, ids are unique, every skill
has a case with ``--require-all-fixtures``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hangar.agents.skills import front_matter
from hangar.errors import ConfigError
from hangar.files import read_yaml
from hangar.trials.limits import ScenarioLimits
from hangar.trials.spec import Task
from hangar.validation import CaseId, Name, validation_message

#: The most bytes a catalog may hold (every trial carries it to its worker).
CATALOG_CAP = 4 << 20
#: The arm every routing case runs in: the whole catalog installed.
CATALOG_ARM = "catalog"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoutingCase(_Strict):
    """One prompt and the skills an agent must and must not load for it."""

    id: CaseId
    """Stable id of the routing contract (a changed meaning gets a new id)."""
    prompt: str = Field(min_length=1)
    """What the agent is asked (never says which skill to use)."""
    expected: tuple[str, ...] = ()
    """The skills it must load: exactly these (none: it must load no skill)."""
    forbidden: tuple[str, ...] = ()
    """Skills it must not load (loading one is named apart from other extra skills)."""

    @model_validator(mode="after")
    def _sets(self) -> RoutingCase:
        for field in ("expected", "forbidden"):
            values = getattr(self, field)
            if len(set(values)) != len(values):
                raise ValueError(f"{field} lists a skill twice: {list(values)}")
        both = sorted(set(self.expected) & set(self.forbidden))
        if both:
            raise ValueError(f"a skill cannot be both expected and forbidden: {both}")
        return self


class RoutingSuite(_Strict):
    """A routing suite file (see the module docstring)."""

    kind: Literal["routing"]
    """Says what the file is."""
    id: Name
    """The suite's id (the ``suite`` of its results)."""
    image: str = "hangar/base:bookworm"
    """The sandbox image (it holds the agent's CLI: ``hangar image build-base --with``)."""
    skills: dict[Name, str] = Field(min_length=1)
    """The catalog: skill name -> its folder (holding ``SKILL.md``), relative to the file."""
    cases: tuple[RoutingCase, ...] = Field(min_length=1)
    """The cases."""
    limits: ScenarioLimits = Field(default_factory=lambda: ScenarioLimits(time_s=300))
    """Time and resources of one trial."""
    margin: float | None = Field(default=None, gt=0, le=100)
    """Points the suite's comparisons are about (the report's default ``--margin``)."""

    @model_validator(mode="after")
    def _ids(self) -> RoutingSuite:
        ids = [c.id for c in self.cases]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"case ids must be unique in a suite; repeated: {repeated}")
        return self


class SkillFile(_Strict):
    """One file of a catalog skill, as read on the driver."""

    path: str
    """Relative to the skill's folder (posix)."""
    b64: str
    """Its bytes, base64 (a skill's scripts and assets may not be text)."""
    sha256: str
    """sha256 of them."""

    @property
    def data(self) -> bytes:
        """Its bytes."""
        return base64.b64decode(self.b64)


class CatalogSkill(_Strict):
    """One skill of the catalog, read in (workers need none of the suite's files)."""

    name: str
    """Its name (its folder's name in the agent's skills folder)."""
    source: str
    """Its folder, as the suite names it."""
    files: tuple[SkillFile, ...] = ()
    """Its files."""
    description: str = ""
    """Its ``SKILL.md`` front matter's description."""
    problem: str = ""
    """Why it cannot be installed ('' when it can)."""

    @property
    def digest(self) -> str:
        """sha256 over its files' paths and bytes."""
        return _sha([[f.path, f.sha256] for f in self.files] or [self.problem])

    @property
    def skill_md(self) -> SkillFile | None:
        """Its ``SKILL.md``."""
        return next((f for f in self.files if f.path == "SKILL.md"), None)


class LoadedRoutingCase(Task):
    """One case of a loaded suite, its catalog read in, and its digests."""

    model_config = ConfigDict(frozen=True)
    key_field: ClassVar[str] = "case"

    kind: Literal["routing"] = "routing"
    """The kind of trial a case is."""
    path: Path
    """The suite file."""
    suite: str
    """The suite's id."""
    case: RoutingCase
    """The case."""
    image: str
    """The sandbox image."""
    limits: ScenarioLimits
    """Time and resources."""
    catalog: tuple[CatalogSkill, ...]
    """Every skill of the catalog (all are installed in every trial)."""
    catalog_digest: str
    """sha256 over the catalog's names and bytes (the arm's plugins in the trial key)."""
    problems: tuple[str, ...] = ()
    """What keeps the case from running (its trials are blocked_setup)."""
    digest: str
    """The case's version: the case, the catalog, the image, the limits, the grader."""
    margin: float | None = None
    """The suite's margin, in points."""

    @property
    def id(self) -> str:
        """The case's id (the ``scenario_id`` of its results)."""
        return self.case.id

    @property
    def skill_names(self) -> set[str]:
        """The catalog's skill names."""
        return {s.name for s in self.catalog}


def read_skill(name: str, source: str, folder: Path) -> CatalogSkill:
    """The skill `name` from `folder` (its regular files; links are refused)."""
    if not (folder / "SKILL.md").is_file():
        return CatalogSkill(
            name=name, source=source, problem=f"skill {name}: no SKILL.md in {folder}"
        )
    files, links = [], []
    for f in sorted(folder.rglob("*")):
        if f.is_symlink():
            links.append(f.relative_to(folder).as_posix())
        elif f.is_file():
            raw = f.read_bytes()
            files.append(
                SkillFile(
                    path=f.relative_to(folder).as_posix(),
                    b64=base64.b64encode(raw).decode("ascii"),
                    sha256=hashlib.sha256(raw).hexdigest(),
                )
            )
    if links:
        return CatalogSkill(
            name=name, source=source, problem=f"skill {name}: links are not installed: {links}"
        )
    skill_md = next(f for f in files if f.path == "SKILL.md")
    meta = front_matter(skill_md.data.decode("utf-8", errors="replace"))
    description = " ".join(str(meta.get("description") or "").split())
    return CatalogSkill(name=name, source=source, files=tuple(files), description=description)


def load_routing_suite(path: Path, data: Any | None = None) -> list[LoadedRoutingCase]:
    """Load, validate and digest a routing suite; errors name the file and field. A case
    naming a skill the catalog lacks, or a catalog skill that cannot be read, makes its
    trials blocked_setup (``hangar routing check`` says so before any trial)."""
    from hangar.kinds.routing import grading

    path = path.resolve()
    suite = parse_suite(path, data)
    catalog = tuple(
        read_skill(name, source, (path.parent / source).resolve())
        for name, source in sorted(suite.skills.items())
    )
    size = sum(len(f.b64) * 3 // 4 for s in catalog for f in s.files)
    too_big = [f"the catalog holds {size} bytes, more than {CATALOG_CAP}"] * (size > CATALOG_CAP)
    catalog_digest = _sha([[s.name, s.digest] for s in catalog])
    grader = grading.digest()
    loaded = []
    for case in suite.cases:
        unknown = sorted(set(case.expected + case.forbidden) - set(suite.skills))
        problems = [s.problem for s in catalog if s.problem] + too_big
        if unknown:
            problems.append(f"the case names skills the catalog lacks: {', '.join(unknown)}")
        version = {
            "case": case.model_dump(mode="json"),
            "catalog": catalog_digest,
            "image": suite.image,
            "limits": suite.limits.model_dump(mode="json"),
            "grader": grader,
        }
        loaded.append(
            LoadedRoutingCase(
                path=path,
                suite=suite.id,
                case=case,
                image=suite.image,
                limits=suite.limits,
                catalog=catalog,
                catalog_digest=catalog_digest,
                problems=tuple(problems),
                digest=_sha(version),
                margin=suite.margin,
            )
        )
    return loaded


def parse_suite(path: Path, data: Any | None = None) -> RoutingSuite:
    """The suite file, validated (a clear error naming the field when it is not one)."""
    data = read_yaml(path) if data is None else data
    try:
        return RoutingSuite.model_validate(data)
    except ValidationError as exc:
        text = path.read_text(errors="replace") if path.is_file() else ""
        raise ConfigError(
            validation_message(str(path), "routing suite", exc, text, model=RoutingSuite)
        ) from None


def is_routing_suite(data: Any) -> bool:
    """Whether parsed YAML is a routing suite (``kind: routing``)."""
    return isinstance(data, dict) and data.get("kind") == "routing"


class Consistency(BaseModel):
    """What the offline golden-consistency check found."""

    suite: str
    cases: int
    skills: dict[str, int]
    """Each catalog skill -> how many cases expect it."""
    problems: list[str] = Field(default_factory=list)
    """What must be fixed (the check fails)."""
    warnings: list[str] = Field(default_factory=list)
    """What is worth a look."""

    @property
    def ok(self) -> bool:
        """Whether nothing must be fixed."""
        return not self.problems


def consistency(path: Path, *, require_all: bool) -> Consistency:
    """The golden check of a suite, offline: its file validates (unique ids, no skill both
    expected and forbidden), every case names catalog skills, every skill's folder holds a
    ``SKILL.md`` whose front matter has a description (how agents route to it) and a name
    that is its folder's, and, with `require_all`, every skill is expected by a case."""
    cases = load_routing_suite(path)
    catalog = cases[0].catalog
    problems: list[str] = []
    warnings: list[str] = []
    for skill in catalog:
        if skill.problem:
            problems.append(skill.problem)
            continue
        md = skill.skill_md
        assert md is not None
        meta = front_matter(md.data.decode("utf-8", errors="replace"))
        if not skill.description:
            problems.append(
                f"skill {skill.name}: its SKILL.md has no `description` in its front matter "
                "(agents route by it)"
            )
        named = meta.get("name")
        if named is not None and str(named) != skill.name:
            problems.append(
                f"skill {skill.name}: its SKILL.md names it {named!r}; the folder it is "
                f"installed as is {skill.name!r} (make them equal)"
            )
    for case in cases:
        unknown = sorted(set(case.case.expected + case.case.forbidden) - case.skill_names)
        if unknown:
            known = ", ".join(sorted(case.skill_names))
            problems.append(
                f"case {case.id}: names skills the catalog lacks: {', '.join(unknown)} "
                f"(the catalog: {known})"
            )
        if not case.case.expected and not case.case.forbidden:
            warnings.append(f"case {case.id}: expects no skill and forbids none")
    counts = {s.name: sum(s.name in c.case.expected for c in cases) for s in catalog}
    uncovered = [name for name, n in counts.items() if n == 0]
    if uncovered:
        said = f"skills no case expects: {', '.join(uncovered)}"
        (problems if require_all else warnings).append(
            said + ("" if require_all else " (--require-all-fixtures makes this an error)")
        )
    return Consistency(
        suite=cases[0].suite,
        cases=len(cases),
        skills=counts,
        problems=problems,
        warnings=warnings,
    )


def _sha(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
