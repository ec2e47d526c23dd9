"""Seed 003's scoring: correctness from the raters' labels, citation validity, and the
raters' agreement.

- **Correctness**: the raters' majority on ``correct``; a tie counts as incorrect. An
  answer nobody labelled yet is *pending*: never scored. A question an arm did not answer
  is scored incorrect with invalid citations (``unanswered``).
- **Citations**, each in the seed's order: *fabricated* (its uri is not among the
  question's ``valid_sources``), *stale* (a listed source whose cited sha256 differs from
  the one at ``as_of``; a citation without a hash is stale; a ``repo://`` uri names its
  source by repository and path, its commit saying which version was read: the same file
  cited at another commit, as a retrieval server's older or newer snapshot does, is that
  source, stale unless its bytes are the same), *unsupported* (a rater lists
  its uri in ``unsupported``), else *valid*. An answer's citations are valid when it
  cites at least one source and every citation is valid.
- **Agreement**: Cohen's kappa between the first two raters of an arm's labels (in file
  order), over the answers both labelled.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Literal

from pydantic import BaseModel, Field

from hangar.kinds.knowledge.custody import Arm, Suite
from hangar.kinds.knowledge.formats import Answer, Key, Label

CitationKind = Literal["fabricated", "stale", "unsupported", "valid"]
KINDS: tuple[CitationKind, ...] = ("fabricated", "stale", "unsupported", "valid")


_AT = re.compile(r"^repo://(?P<repo>[^@/]+)@[0-9a-f]{40}/(?P<path>.+)$")


def source_of(uri: str) -> str:
    """The source a uri names: a ``repo://`` uri without its commit, else the uri."""
    match = _AT.match(uri)
    return f"repo://{match['repo']}/{match['path']}" if match else uri


def classify(uri: str, digest: str, key: Key, unsupported: set[str]) -> CitationKind:
    """One citation's kind (see the module docstring)."""
    sources = {source_of(s.uri): s for s in key.valid_sources}
    source = sources.get(source_of(uri))
    if source is None:
        return "fabricated"
    if not digest or digest != source.digest:
        return "stale"
    if uri in unsupported:
        return "unsupported"
    return "valid"


class CitationVerdict(BaseModel):
    """One citation and its kind."""

    uri: str
    kind: CitationKind


class QuestionScore(BaseModel):
    """One question of one arm."""

    id: str
    """The question."""
    status: Literal["scored", "pending", "unanswered"]
    """Scored (labelled, or not answered), or pending (answered, not labelled)."""
    correct: bool | None = None
    """The raters' majority (a tie: False); None while pending."""
    citation_valid: bool | None = None
    """At least one citation and every one valid; None while pending."""
    citations: list[CitationVerdict] = Field(default_factory=list)
    """Each citation's kind (known once labelled)."""
    votes: dict[str, bool] = Field(default_factory=dict)
    """Rater -> correct."""


def score_question(key: Key, answer: Answer | None, labels: list[Label]) -> QuestionScore:
    """Score one answer from its labels (see the module docstring)."""
    if answer is None:
        return QuestionScore(id=key.id, status="unanswered", correct=False, citation_valid=False)
    if not labels:
        return QuestionScore(id=key.id, status="pending")
    votes = {label.rater: label.correct for label in labels}
    yes = sum(votes.values())
    unsupported = {uri for label in labels for uri in label.unsupported}
    verdicts = [
        CitationVerdict(uri=c.uri, kind=classify(c.uri, c.digest, key, unsupported))
        for c in answer.citations
    ]
    return QuestionScore(
        id=key.id,
        status="scored",
        correct=yes > len(votes) - yes,
        citation_valid=bool(verdicts) and all(v.kind == "valid" for v in verdicts),
        citations=verdicts,
        votes=votes,
    )


def score_arm(suite: Suite, arm: Arm) -> list[QuestionScore]:
    """Every question of the suite, for one arm, in the suite's order."""
    by_id: dict[str, list[Label]] = defaultdict(list)
    for label in arm.labels:
        by_id[label.id].append(label)
    return [
        score_question(suite.keys[q.id], arm.answers.get(q.id), by_id.get(q.id, []))
        for q in suite.questions
    ]


def citation_counts(scores: list[QuestionScore]) -> dict[str, int]:
    """Citations of the scored answers by kind, and their total."""
    counts = Counter(c.kind for s in scores if s.status == "scored" for c in s.citations)
    return {kind: counts[kind] for kind in KINDS} | {"total": sum(counts.values())}


def cohen_kappa(a: list[bool], b: list[bool]) -> float | None:
    """Cohen's kappa of two raters' yes/no labels of the same items.

    kappa = (p_o - p_e) / (1 - p_e), p_o the share of agreement, p_e = p_a p_b +
    (1 - p_a)(1 - p_b) with p_a, p_b each rater's share of yes (Cohen 1960, "A
    coefficient of agreement for nominal scales", Educ. Psychol. Meas. 20:37). None when
    it is undefined (no item, or both raters always give the same one answer).
    """
    n = len(a)
    if n == 0 or n != len(b):
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return None if chance == 1 else (observed - chance) / (1 - chance)


class Agreement(BaseModel):
    """The first two raters' agreement on an arm's answers."""

    raters: list[str]
    """The first two raters, in file order (fewer when fewer rated)."""
    pairs: int
    """Answers both labelled."""
    kappa: float | None
    """Cohen's kappa (None: fewer than two raters, or undefined)."""


def agreement(labels: list[Label]) -> Agreement:
    """Cohen's kappa between the first two raters of `labels`."""
    raters = list(dict.fromkeys(label.rater for label in labels))[:2]
    if len(raters) < 2:
        return Agreement(raters=raters, pairs=0, kappa=None)
    first = {x.id: x.correct for x in labels if x.rater == raters[0]}
    second = {x.id: x.correct for x in labels if x.rater == raters[1]}
    both = [i for i in first if i in second]
    kappa = cohen_kappa([first[i] for i in both], [second[i] for i in both])
    return Agreement(raters=raters, pairs=len(both), kappa=kappa)
