"""Seed 002's structural checks: fast, deterministic, offline.

| check | passes when |
| --- | --- |
| ``has_section: "## Intent"`` | a line of the output is that heading (trailing spaces aside) |
| ``min_count: 3, pattern: "^\\d+\\."`` | at least 3 matches, the pattern in multiline mode |
| ``max_tokens: 800`` | the output is at most 800 tokens |
| ``references_pattern: "SPEC-\\d+"`` | the output matches the pattern at least once |
| ``no_placeholder: "\\{TODO\\}|\\[TBD\\]"`` | no match of the pattern is left |

Tokens are counted with OpenAI's ``o200k_base`` encoding through ``bpe-openai`` (the
Rust ``bpe`` crate, whose vocabularies are compiled in): it needs no network, where
tiktoken downloads its vocabulary at first use.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from hangar.kinds.rubric.formats import (
    Check,
    HasSection,
    MaxTokens,
    MinCount,
    NoPlaceholder,
    ReferencesPattern,
)
from hangar.models.tokens import count_tokens


class CheckResult(BaseModel):
    """One check on one output."""

    dimension: str
    """The dimension it belongs to."""
    check: str
    """The check as written (``has_section: ## Intent``)."""
    passed: bool
    """Whether it passed."""
    detail: str
    """What was found."""


def run_check(check: Check, output: str) -> tuple[bool, str]:
    """Whether `output` passes `check`, and what was found."""
    if isinstance(check, HasSection):
        wanted = check.has_section.strip()
        found = any(line.rstrip() == wanted for line in output.splitlines())
        return found, "present" if found else "missing"
    if isinstance(check, MinCount):
        n = len(re.findall(check.pattern, output, flags=re.MULTILINE))
        return n >= check.min_count, f"{n} match(es), {check.min_count} needed"
    if isinstance(check, MaxTokens):
        n = count_tokens(output)
        return n <= check.max_tokens, f"{n} tokens, at most {check.max_tokens}"
    if isinstance(check, ReferencesPattern):
        match = re.search(check.references_pattern, output, flags=re.MULTILINE)
        return match is not None, f"found {match.group(0)!r}" if match else "no reference"
    assert isinstance(check, NoPlaceholder)
    left = re.findall(check.no_placeholder, output, flags=re.MULTILINE)
    return not left, f"left: {left[:5]}" if left else "none left"


def describe(check: Check) -> str:
    """The check as a rubric writes it."""
    return ", ".join(f"{k}: {v}" for k, v in check.model_dump().items())


def run_checks(dimensions: Any, output: str) -> list[CheckResult]:
    """Every check of every dimension, on `output`."""
    results = []
    for dimension in dimensions:
        for check in dimension.checks:
            passed, detail = run_check(check, output)
            results.append(
                CheckResult(
                    dimension=dimension.name, check=describe(check), passed=passed, detail=detail
                )
            )
    return results
