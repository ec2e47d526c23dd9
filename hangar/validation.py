"""Validation shared by every config model: names, and errors people can act on."""

from __future__ import annotations

import re
from typing import Annotated

import yaml
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


def yaml_line(text: str, loc: tuple[int | str, ...]) -> int | None:
    """The line of `text` (YAML) where the value at `loc` (a pydantic error's path) is,
    or its nearest parent's; None when the text does not parse."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            node = None
    return node.start_mark.line + 1 if node is not None else line


def validation_message(
    where: str, what: str, exc: ValidationError, text: str = "", root: tuple[str, ...] = ()
) -> str:
    """A pydantic error as lines naming the file (or place), each field (and its line,
    given the file's `text`), and the fix; `root` is where in the file the validated
    mapping sits (``benchmark_run.config``)."""
    lines = [f"{where}: not a valid {what}"]
    for err in exc.errors():
        loc = (*root, *err["loc"])
        field = ".".join(str(p) for p in loc if p not in UNION_TAGS) or "(top level)"
        if text and (line := yaml_line(text, loc)) is not None:
            field += f"` (line {line})"
        else:
            field += "`"
        kind, msg = err["type"], err["msg"].removeprefix("Value error, ")
        if kind == "extra_forbidden":
            msg = "unknown field (check its spelling against the README)"
        elif kind == "missing":
            msg = "required field is missing"
        lines.append(f"  field `{field}: {msg}")
    return "\n".join(lines)
