"""What a test log says about why it failed, for people: the first failing test's own
section (pytest's ``FAILURES``/``ERRORS`` blocks, unittest's ``FAIL:``/``ERROR:`` blocks)
and the first line that names an error (an import that failed, a syntax error), so a
failed trial shows the cause before the rest of the output.

Only for showing: nothing here decides a verdict (the reward and the graders do).
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: The most lines of one test's section shown.
SECTION_LINES = 60

# pytest: "____ test_name ____" (or "____ ERROR collecting tests/x.py ____") headers.
_PYTEST_HEADER = re.compile(r"^_{3,} (?P<name>.+?) _{3,}$")
_PYTEST_RULE = re.compile(r"^={3,}( .* )?={3,}$")
_PYTEST_SECTIONS = re.compile(r"^={3,} (FAILURES|ERRORS) ={3,}$")
# unittest (Django's runner too): "=====" then "FAIL: test_x (mod.Class)" then "-----".
_UNITTEST_HEADER = re.compile(r"^(?P<how>FAIL|ERROR): (?P<name>\S.*)$")
_UNITTEST_RULE = re.compile(r"^(=|-){20,}$")
# A line that names an error, in order of what explains most.
_ERRORS = (
    re.compile(r"\b(ModuleNotFoundError|ImportError|SyntaxError|IndentationError): .*"),
    re.compile(r"\b(ModuleNotFoundError|ImportError|SyntaxError|IndentationError)\b.*"),
    re.compile(r"^E\s+\w*(Error|Exception)\b.*"),
    re.compile(r"\b\w+(Error|Exception): .*"),
    re.compile(r"^(error|fatal)(\[[^]]*\])?: .*", re.IGNORECASE),
)


class FailingTest(NamedTuple):
    """The first failing test of a log and its section."""

    name: str
    """As the runner names it (``test_x``, ``ERROR collecting tests/x.py``)."""
    section: str
    """Its lines (at most `SECTION_LINES`)."""


def first_failing_test(text: str) -> FailingTest | None:
    """The first failing (or erroring) test's section in a pytest or unittest log."""
    lines = text.splitlines()
    return _pytest(lines) or _unittest(lines)


def _pytest(lines: list[str]) -> FailingTest | None:
    inside = False
    for i, line in enumerate(lines):
        if _PYTEST_SECTIONS.match(line.strip()):
            inside = True
            continue
        header = _PYTEST_HEADER.match(line.strip()) if inside else None
        if header is None:
            continue
        body = []
        for following in lines[i + 1 :]:
            stripped = following.strip()
            if _PYTEST_HEADER.match(stripped) or _PYTEST_RULE.match(stripped):
                break
            body.append(following)
        return FailingTest(header.group("name"), _cap([line, *body]))
    return None


def _unittest(lines: list[str]) -> FailingTest | None:
    for i, line in enumerate(lines):
        header = _UNITTEST_HEADER.match(line.strip())
        if header is None or i == 0 or not _UNITTEST_RULE.match(lines[i - 1].strip()):
            continue
        body = []
        rest = lines[i + 1 :]
        if rest and _UNITTEST_RULE.match(rest[0].strip()):
            rest = rest[1:]  # the rule under the header
        for following in rest:  # the traceback, up to the next rule
            if _UNITTEST_RULE.match(following.strip()) or _UNITTEST_HEADER.match(following):
                break
            body.append(following)
        return FailingTest(f"{header.group('how')}: {header.group('name')}", _cap([line, *body]))
    return None


def _cap(lines: list[str]) -> str:
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) > SECTION_LINES:
        cut = len(lines) - SECTION_LINES
        lines = [
            *lines[: SECTION_LINES // 2],
            f"... {cut} lines ...",
            *lines[-SECTION_LINES // 2 :],
        ]
    return "\n".join(lines)


def first_error(text: str) -> str | None:
    """The first line of `text` naming an error, most telling first (an import or syntax
    error before an assertion), stripped and at most 300 characters."""
    lines = [line.strip() for line in text.splitlines()]
    for pattern in _ERRORS:
        for line in lines:
            if match := pattern.search(line):
                return match.group(0)[:300]
    return None
