"""When a drop is a regression: one model for every kind's baselines.

Three levels, each a drop beyond which a change is a regression: a ``group`` (an agent ·
model · arm's rate or mean; a rubric benchmark's phase average), a ``task`` (a scenario,
a case, a rubric sample) and a ``part`` of a task (a checklist requirement, a rubric
dimension). The defaults are the rubric benchmark format's (0.3 / 1.0 / 0.5). How a drop
is measured is the baseline's: `hangar compare` measures a group's and a part's as
fractions of the metric's range and a task's in passing trials lost
(`hangar.scores.baseline`); a rubric benchmark measures each in points of its 1-5 scale.
A source format that names the levels its own way says so with aliases
(`hangar.kinds.rubric.formats.Thresholds`: phase, sample, dimension).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: The defaults: (group, task, part).
DEFAULTS = (0.3, 1.0, 0.5)


class Thresholds(BaseModel):
    """When a drop is a regression (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: float = Field(default=DEFAULTS[0], ge=0)
    """How far a group's score may drop (a rubric phase's average)."""
    task: float = Field(default=DEFAULTS[1], ge=0)
    """How far one task's may drop (a scenario's passing trials; a rubric sample's score)."""
    part: float = Field(default=DEFAULTS[2], ge=0)
    """How far a part of a task may drop (a checklist requirement; a rubric dimension)."""

    def changed(self) -> bool:
        """Whether these are not the defaults."""
        return (self.group, self.task, self.part) != DEFAULTS
