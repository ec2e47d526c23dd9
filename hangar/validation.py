"""Validation shared by every config model: names, and errors people can act on."""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, get_args

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class Strict(BaseModel):
    """A frozen settings model that refuses unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def check_name(value: str) -> str:
    """`value` when it is a `Name`."""
    if not _NAME.match(value):
        raise ValueError(f"expected letters, digits, '_', '.', '-', got {value!r}")
    return value


#: An id or name (scenario, agent, arm, plugin, sweep): starts alphanumeric, then
#: letters, digits, '_', '.', '-'.
Name = Annotated[str, AfterValidator(check_name)]

_CASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")


def _check_case_id(value: str) -> str:
    parts = value.split("/")
    if not _CASE_ID.match(value) or any(p in ("", ".", "..") for p in parts):
        raise ValueError(
            "expected letters, digits, '_', '.', '-', ':' and '/' (no empty, '.' or '..' "
            f"part between slashes), got {value!r}"
        )
    return value


#: A case id as suites write them (``tdd:bug-report-first-step``, ``session-c/resume``):
#: a Name that may also hold ':' and '/'. No file name is made of one (evidence files of
#: a trial are named by what they hold; bundles by the trial key).
CaseId = Annotated[str, AfterValidator(_check_case_id)]


_ARM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


def _check_arm(value: str) -> str:
    if not _ARM.match(value):
        raise ValueError(
            f"expected letters, digits, '_', '.', '-', and one ':' between two names "
            f"(retrieval:handbook), got {value!r}"
        )
    return value


#: An arm's name: a Name, or two joined by one ':' (a knowledge gold set's
#: ``retrieval:<server>`` arm). Its files are named after it (``answers/<arm>.jsonl``).
ArmName = Annotated[str, AfterValidator(_check_arm)]


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
    where: str,
    what: str,
    exc: ValidationError,
    text: str = "",
    root: tuple[str, ...] = (),
    model: type[BaseModel] | None = None,
) -> str:
    """A pydantic error as lines naming the file (or place), each field (and its line,
    given the file's `text`), and the fix; `root` is where in the file the validated
    mapping sits (``benchmark_run.config``). Given the `model` validated, an unknown
    field is told the nearest known one."""
    lines = [f"{where}: not a valid {what}"]
    for err in exc.errors():
        loc = (*root, *err["loc"])
        kind, msg = err["type"], err["msg"].removeprefix("Value error, ")
        if kind == "union_tag_invalid":
            ctx = err.get("ctx", {})
            loc = (*loc, ctx.get("discriminator", "kind").strip("'"))
            msg = _bad_tag(str(ctx.get("tag", "")), str(ctx.get("expected_tags", "")))
        field = ".".join(str(p) for p in loc if p not in UNION_TAGS) or "(top level)"
        if text and (line := yaml_line(text, loc)) is not None:
            field += f"` (line {line})"
        else:
            field += "`"
        if kind == "extra_forbidden":
            near = _nearest(str(err["loc"][-1]), _known_fields(model, err["loc"][:-1]))
            msg = f"unknown field ({f'did you mean `{near}`?' if near else 'check its spelling'})"
        elif kind == "missing":
            msg = "required field is missing"
            if loc and loc[-1] == "sha256":
                msg += " (`hangar scenario pin FILE` writes the script's pin)"
        lines.append(f"  field `{field}: {msg}")
    return "\n".join(lines)


def _bad_tag(tag: str, expected: str) -> str:
    """A discriminated union's unknown tag, in words."""
    choices = [t.strip().strip("'") for t in expected.split(",") if t.strip()]
    near = _nearest(tag, choices)
    hint = f" (did you mean {near!r}?)" if near else ""
    return f"unknown value {tag!r}{hint}: use one of {', '.join(choices)}"


def _nearest(word: str, known: list[str]) -> str | None:
    """The known name closest to `word` (a misspelling, a missing plural), if any."""
    found = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return found[0] if found else None


def _known_fields(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model at `loc` inside `model` (empty when unknown)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        field = _fields(current).get(part)
        current = _model_in(field.annotation) if field is not None else None
    return list(_fields(current)) if current is not None else []


def _fields(model: Any) -> dict[str, Any]:
    """A model's fields by the names a file gives them (their aliases, where they have
    one)."""
    return {(f.alias or n): f for n, f in getattr(model, "model_fields", {}).items()}


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (itself, or inside a list, dict, Optional)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in reversed(get_args(annotation)):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
