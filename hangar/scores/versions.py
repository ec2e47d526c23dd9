"""Comparable means the same version: scenario, plugin and agent-settings digests.

A sweep can hold trials of more than one version of a scenario (its file changed between
two runs of the sweep) or of an agent (its settings changed); a baseline and a candidate
can differ the same way. Scores are only ever computed and compared within one version;
everything else is listed as not comparable, never mixed (seed 001: "Compare runs only
after their sources, cases, settings, and evidence match").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel

from hangar.results import TrialResult


class NotComparable(BaseModel):
    """Trials (or baseline subjects) of another version than the one compared: listed,
    never mixed into a score (seed 001: "Compare runs only after their sources, cases,
    settings, and evidence match")."""

    kind: Literal["scenario", "agent", "plugins"]
    """What differs: a scenario's digest, an agent's settings, an arm's plugin bytes."""
    subject: str
    """The scenario id, the agent name, or ``scenario · arm``."""
    kept: str
    """The version scored (the digest of the most recent trial; the candidate's, in a
    comparison with a baseline)."""
    other: list[str]
    """The other versions (digests)."""
    trials: int = 0
    """Trials set aside (0 in a comparison with a baseline)."""
    sentence: str
    """What happened, in words."""


def split_versions(
    results: Iterable[TrialResult],
) -> tuple[list[TrialResult], list[NotComparable]]:
    """Keep each scenario's and each agent's most recent version (a sweep whose scenario
    file or agent settings changed between runs holds both); the trials of older
    versions are set aside and listed, never mixed with the rest."""
    rows = list(results)
    aside: list[NotComparable] = []
    kinds: tuple[tuple[Literal["scenario", "agent"], str, str], ...] = (
        ("scenario", "scenario_id", "scenario_digest"),
        ("agent", "agent", "agent_digest"),
    )
    for kind, subject_field, version_field in kinds:
        latest: dict[str, TrialResult] = {}
        for r in rows:
            current = latest.get(getattr(r, subject_field))
            if current is None or r.finished_at > current.finished_at:
                latest[getattr(r, subject_field)] = r
        kept: list[TrialResult] = []
        older: dict[str, Counter[str]] = defaultdict(Counter)
        for r in rows:
            subject, version = getattr(r, subject_field), getattr(r, version_field)
            keep = getattr(latest[subject], version_field)
            if version == keep or not version or not keep:  # "": a row from before digests
                kept.append(r)
            else:
                older[subject][version] += 1
        for subject, versions in sorted(older.items()):
            keep, n = getattr(latest[subject], version_field), sum(versions.values())
            aside.append(
                NotComparable(
                    kind=kind,
                    subject=subject,
                    kept=keep,
                    other=sorted(versions),
                    trials=n,
                    sentence=f"{kind} {subject} changed during the sweep "
                    f"({', '.join(d[:12] for d in sorted(versions))} -> {keep[:12]}): "
                    f"{n} trial(s) of the older version set aside, not mixed",
                )
            )
        rows = kept
    return rows, aside
