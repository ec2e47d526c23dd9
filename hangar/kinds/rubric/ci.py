"""Seed 002's CI benchmark: the ``ci_benchmark`` section of ``config.yaml``, and the
phases a change affects.

```yaml
ci_benchmark:
  trigger: on_skill_change     # what starts it (CI's business; recorded, not acted on)
  phases: all                  # or a list
  max_samples: 10              # the seeded subset per phase
  fail_on_regression: true     # exit 1 on a regression (false: report only)
  regression_threshold: 0.3    # the phase threshold (changed: give `reason`)
  judge_model: claude-haiku    # a cheaper CI judge: marked, never a baseline, never compared
  timeout_per_sample: 60s      # bounds each model call of a sample (the writer's and the judge's)
```

`hangar rubric run DIR --ci` applies it; ``--changed-since REV`` keeps the phases
whose skill, samples or rubric changed since the git revision REV (the seed's "detect
which SKILL.md files changed; load eval sets for affected phases only").
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hangar.errors import ConfigError
from hangar.files import read_yaml
from hangar.kinds.rubric.formats import Config, phase_name
from hangar.models import ModelSpec
from hangar.validation import validation_message


class CiConfig(BaseModel):
    """``ci_benchmark`` (the seed's fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trigger: str = "on_skill_change"
    """When CI runs it (recorded; CI decides)."""
    phases: Literal["all"] | tuple[str, ...] = "all"
    """The phases (``all``: the config's)."""
    max_samples: int | None = Field(default=None, gt=0)
    """The seeded subset per phase."""
    fail_on_regression: bool = True
    """Exit 1 on a regression (False: the report only)."""
    regression_threshold: float = Field(default=0.3, ge=0)
    """The phase threshold."""
    reason: str = ""
    """Why the threshold is not 0.3 (required then)."""
    judge_model: ModelSpec | None = None
    """A cheaper CI judge."""
    timeout_per_sample: float | None = None
    """Seconds each model call of a sample may take (``60s``, ``2m`` or a number)."""

    @field_validator("timeout_per_sample", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        if isinstance(value, str):
            m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min)?\s*", value)
            if m is None:
                raise ValueError(f"{value!r} is not a duration: write 60s, 2m or a number")
            return float(m.group(1)) * (60 if m.group(2) in ("m", "min") else 1)
        return value


def load_ci(folder: Path) -> CiConfig:
    """``config.yaml``'s ``ci_benchmark`` section (the defaults when there is none)."""
    path = folder / "config.yaml"
    data = read_yaml(path)
    section = data.get("ci_benchmark") if isinstance(data, dict) else None
    try:
        return CiConfig.model_validate(section or {})
    except ValidationError as exc:
        text = path.read_text(errors="replace")
        raise ConfigError(
            validation_message(str(path), "ci_benchmark section", exc, text, ("ci_benchmark",))
        ) from None


def changed_phases(
    folder: Path, config: Config, revision: str, skills: dict[str, str]
) -> list[str]:
    """The configured phases whose skill (`skills`: phase -> path relative to `folder`),
    samples or rubric differ from git revision `revision` (committed or not)."""

    def git(*args: str) -> str:
        run = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            raise ConfigError(
                f"--changed-since {revision}: git {' '.join(args)} failed in {folder}: "
                f"{run.stderr.strip() or run.stdout.strip()}"
            )
        return run.stdout

    top = Path(git("rev-parse", "--show-toplevel").strip())
    changed = {
        (top / line).resolve()
        for line in git("diff", "--name-only", revision, "--", ".").splitlines()
        + git("ls-files", "--others", "--exclude-standard", "--full-name", ".").splitlines()
        if line.strip()
    }
    affected = []
    for configured in config.phases:
        phase = phase_name(configured)
        data = folder / "datasets" / phase
        files = {(folder / skills[phase]).resolve(), data / "samples.yaml", data / "rubric.yaml"}
        if {f.resolve() for f in files} & changed:
            affected.append(configured)
    return affected
