"""Rewards: what an image task's test script wrote, read as scores and a verdict.

The script writes ``/logs/verifier/reward.txt`` (one number) or ``reward.json`` (named
numbers). Each number must lie in 0..1; it becomes a score on the points scale
(``reward``, and each name of a ``reward.json``). The trial's ``reward`` is the file's
one number, or the json's ``reward`` entry, or else the mean of its entries; it passes
when the reward reaches the task's threshold (1 unless the sweep says otherwise). The
files are read from the host folder the script wrote through, written by code the agent
may have touched: regular files only (no link is followed), at most `MAX_BYTES`.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import NamedTuple

from hangar.results import Score

MAX_BYTES = 64 * 1024
TEXT, JSON = "reward.txt", "reward.json"


class Reward(NamedTuple):
    """A reward as read: its scores and overall value, or the problem that made it
    unreadable (then `value` is None)."""

    value: float | None
    scores: tuple[Score, ...] = ()
    problem: str = ""


def _read(path: Path) -> str | None:
    """The text of `path` if it is a regular file (never through a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = f"{exc.strerror}; a link is not read"
        raise ValueError(f"{path.name} cannot be read ({why})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path.name} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is {value!r}, not a number")
    number = float(value)
    if not math.isfinite(number) or not 0 <= number <= 1:
        raise ValueError(f"{what} is {number:g}, outside 0..1")
    return number


def _score(metric: str, value: float) -> Score:
    return Score(metric=metric, value=value, scale="points", low=0.0, high=1.0)


def read_reward(folder: Path) -> Reward:
    """The reward in `folder` (the verifier's logs), or why there is none."""
    try:
        text, named = _read(folder / TEXT), _read(folder / JSON)
        if named is not None:
            try:
                data = json.loads(named)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{JSON} is not JSON ({exc.msg})") from None
            if not isinstance(data, dict) or not data:
                raise ValueError(f"{JSON} must map names to numbers")
            values = {str(k): _number(v, f"{JSON} {k!r}") for k, v in data.items()}
            overall = values.get("reward", sum(values.values()) / len(values))
            scores = [_score("reward", overall)]
            scores += [_score(k, v) for k, v in values.items() if k != "reward"]
            return Reward(overall, tuple(scores))
        if text is not None:
            try:
                number = float(text.strip())
            except ValueError:
                raise ValueError(f"{TEXT} holds {text.strip()[:40]!r}, not one number") from None
            value = _number(number, TEXT)
            return Reward(value, (_score("reward", value),))
    except ValueError as exc:
        return Reward(None, problem=str(exc))
    return Reward(None, problem=f"the test script wrote neither {TEXT} nor {JSON}")


#: pytest's summary line (``=== 1 failed, 2 passed in 0.12s ===``, or -q's bare form).
_PYTEST_SUMMARY = re.compile(r"^[= ]*((?:\d+ \w+(?:, )?)+) in [\d.]+s(?: \([^)]*\))?[= ]*$")
#: unittest's (``FAILED (failures=1, errors=2)``).
_UNITTEST_SUMMARY = re.compile(r"^FAILED \(((?:\w+=\d+(?:, )?)+)\)$")
#: Bytes of a log read from its end.
LOG_TAIL = 1 << 20


def reported_failures(texts: list[str]) -> str:
    """The failed or errored tests that a test log reports in its summary line, in words
    ('' when none does): a reward of 1 beside them is not a pass (code the tests import can
    force the runner's exit status to 0 while the log says what happened)."""
    for text in texts:
        for line in reversed(text.splitlines()):
            line = line.strip()
            if match := _PYTEST_SUMMARY.match(line):
                counts = dict(
                    (word, int(n))
                    for n, word in (p.split(" ", 1) for p in match.group(1).split(", "))
                )
                bad = {w: n for w, n in counts.items() if w in ("failed", "error", "errors") and n}
            elif match := _UNITTEST_SUMMARY.match(line):
                pairs = (p.split("=") for p in match.group(1).split(", "))
                bad = {w: int(n) for w, n in pairs if w in ("failures", "errors") and int(n)}
            else:
                continue
            if bad:
                return ", ".join(f"{n} {w}" for w, n in bad.items())
    return ""


def log_texts(folder: Path, *more: str) -> list[str]:
    """The ends of the text logs in `folder` (regular files, never through a link; the
    reward files left out), and `more`."""
    texts = list(more)
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.name in (TEXT, JSON) or path.is_symlink() or not path.is_file():
            continue
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - LOG_TAIL))
            texts.append(f.read().decode("utf-8", errors="replace"))
    return texts
