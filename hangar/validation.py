"""Validation shared by every config model: names, and errors people can act on."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, ValidationError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"expected letters, digits, '_', '.', '-', got {value!r}")
    return value


#: An id or name (scenario, agent, arm, plugin, sweep): starts alphanumeric, then
#: letters, digits, '_', '.', '-'.
Name = Annotated[str, AfterValidator(_check_name)]

#: Union tags of discriminated unions, left out of field paths in messages.
UNION_TAGS = {"builtin-verifier", "pinned-file"}


def validation_message(where: str, what: str, exc: ValidationError) -> str:
    """A pydantic error as lines naming the file (or place), each field, and the fix."""
    lines = [f"{where}: not a valid {what}"]
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"] if p not in UNION_TAGS) or "(top level)"
        kind, msg = err["type"], err["msg"].removeprefix("Value error, ")
        if kind == "extra_forbidden":
            msg = "unknown field (check its spelling against the README)"
        elif kind == "missing":
            msg = "required field is missing"
        lines.append(f"  field `{field}`: {msg}")
    return "\n".join(lines)
