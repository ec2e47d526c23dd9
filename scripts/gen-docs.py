"""Write the generated pages of the documentation site: the command-line reference (from
the Typer app), the file schemas (from the pydantic models) and the tutorial (from the
README), so none can drift from its source. `make docs` runs it before `mkdocs build --strict`."""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "reference"


# -- the command line ---------------------------------------------------------------------------


def _param_row(p: Any) -> str:
    if getattr(p, "param_type_name", "") == "argument":
        name = f"`{str(p.name).upper()}`"
    else:
        name = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    help_text = getattr(p, "help", "") or ""
    default = p.default
    shown = "" if default in (None, (), [], False) or callable(default) else f"`{default}`"
    return f"| {name} | {help_text.replace('|', '/')} | {shown} |"


def _command_md(path: list[str], cmd: Any) -> list[str]:
    lines = [f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`", ""]
    if cmd.help:
        lines += [inspect.cleandoc(cmd.help), ""]
    params = [p for p in cmd.params if p.name not in ("help",) and not getattr(p, "hidden", False)]
    params = [p for p in params if p.name not in ("install_completion", "show_completion")]
    if params:
        lines += ["| argument / option | what | default |", "| --- | --- | --- |"]
        lines += [_param_row(p) for p in params]
        lines.append("")
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):  # a group's commands
        lines += _command_md([*path, name], sub)
    return lines


def cli_reference() -> str:
    """Every command of `hangar`, its help and its options."""
    from hangar.cli import app

    root = typer.main.get_command(app)
    head = [
        "# Command-line reference",
        "",
        "Generated from the command line itself (`scripts/gen-docs.py`); `hangar COMMAND "
        "--help` says the same. A configuration error exits 2 with one message that says "
        "what to fix.",
        "",
    ]
    return "\n".join(head + _command_md(["hangar"], root)) + "\n"


# -- the file schemas ---------------------------------------------------------------------------


def _field_docs(model: type[BaseModel]) -> dict[str, str]:
    """A model's field docstrings (the string right after each field), from its source and
    its bases'."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, after in zip(body.body, body.body[1:], strict=False):
            named = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            if named and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                assert isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


def _type(annotation: Any) -> str:
    """An annotation for people: `tuple[Plugin, ...]`, `str or None`."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = re.sub(r"\b(?:[a-z_]+\.)+([A-Za-z_]+)", r"\1", text)  # module paths out
    text = re.sub(r"Annotated\[([^,\[\]]+(?:\[[^\]]*\])?), [^\]]*\]", r"\1", text)
    return text.replace("NoneType", "None").replace(" | ", " or ").replace("|", " or ")


def _model_md(title: str, model: type[BaseModel], seen: set[type[BaseModel]]) -> list[str]:
    seen.add(model)
    lines = [f"## {title}", ""]
    if model.__doc__:
        lines += [inspect.cleandoc(model.__doc__).splitlines()[0], ""]
    lines += ["| field | type | default | what |", "| --- | --- | --- | --- |"]
    docs = _field_docs(model)
    nested: list[type[BaseModel]] = []
    for name, info in model.model_fields.items():
        default = (
            "required"
            if info.is_required()
            else f"`{info.get_default(call_default_factory=True)!r}`"
        )
        lines.append(
            f"| `{info.alias or name}` | {_type(info.annotation)} | {default.replace('|', '/')} | "
            f"{docs.get(name, '').replace('|', '/')} |"
        )
        for arg in (*getattr(info.annotation, "__args__", ()), info.annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel) and arg not in seen:
                nested.append(arg)
    lines.append("")
    for sub in nested:
        if sub not in seen:
            lines += _model_md(f"`{sub.__name__}`", sub, seen)
    return lines


def schemas() -> str:
    """The fields of every file hangar reads."""
    from hangar.agents import ChatAgent, CommandAgent, PromptAgent
    from hangar.kinds.decision.cases import DecisionSuite
    from hangar.kinds.execution.scenarios.scenario import Scenario
    from hangar.kinds.knowledge.formats import Answer, Key, Label, Question
    from hangar.kinds.rubric.formats import Config, DatasetFile, RubricFile
    from hangar.models import ModelSpec
    from hangar.scheduler.sweep import SweepFile
    from hangar.trials.kind import kinds

    seen: set[type[BaseModel]] = set()
    lines = [
        "# File schemas",
        "",
        "Generated (by `scripts/gen-docs.py`) from the models hangar validates its files with: "
        "a field here is a field there. Unknown fields are refused with the file and the "
        "field named.",
        "",
    ]
    for title, model in (
        ("Scenario file", Scenario),
        ("Sweep file", SweepFile),
        ("Model (in a sweep's `models:`)", ModelSpec),
        ("Command agent (`kind: command`, the default)", CommandAgent),
        ("Chat agent (`kind: chat`)", ChatAgent),
        ("Prompt agent (`kind: prompt`)", PromptAgent),
        ("Decision suite file (`kind: decision`)", DecisionSuite),
        ("Rubric benchmark: `config.yaml`", Config),
        ("Rubric benchmark: `datasets/<phase>/samples.yaml`", DatasetFile),
        ("Rubric benchmark: `datasets/<phase>/rubric.yaml`", RubricFile),
        ("Knowledge gold set: a line of `questions.jsonl`", Question),
        ("Knowledge gold set: a line of `keys.jsonl`", Key),
        ("Knowledge gold set: a line of `answers/<arm>.jsonl`", Answer),
        ("Knowledge gold set: a line of `labels/<arm>.jsonl`", Label),
    ):
        lines += _model_md(title, model, seen)
    for kind in kinds():
        if kind.settings_model is not None:
            title = f"Sweep file: fields for {kind.title} (beside the fields above)"
            lines += _model_md(title, kind.settings_model, seen)
    return "\n".join(lines) + "\n"


# -- the tutorial ------------------------------------------------------------------------------


def tutorial() -> str:
    """The README's tutorial as a page of the site (one text, links made relative to it)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("\n## Tutorial")
    end = readme.index("\n## ", start + 1)
    section = readme[start:end].strip().replace("## Tutorial", "# Tutorial", 1)
    section = re.sub(r"\]\(docs/", "](", section)
    return (
        "<!-- generated from the README by scripts/gen-docs.py: edit the README -->\n\n"
        + section
        + "\n"
    )


def phase_table() -> str:
    """The phases of a sandboxed trial, from their table (`hangar.trials.phases`)."""
    from hangar.trials.phases import markdown

    return markdown()


def api_reference() -> str:
    """The public API (`hangar.api`): each name with its docstring's first paragraph."""
    import inspect

    import hangar.api as api

    lines = [
        "<!-- generated by scripts/gen-docs.py from hangar/api.py -->",
        "",
        "# Public API",
        "",
        *(inspect.getdoc(api) or "").split("\n"),
        "",
        "| Name | What it is |",
        "| --- | --- |",
    ]
    for name in api.__all__:
        doc = api.ABOUT.get(name) or inspect.getdoc(getattr(api, name)) or ""
        first = " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")
        lines.append(f"| `{name}` | {first} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "api.md").write_text(api_reference())
    (OUT / "cli.md").write_text(cli_reference())
    (OUT / "schemas.md").write_text(schemas())
    (OUT / "phases.md").write_text(phase_table())
    (ROOT / "docs" / "tutorial.md").write_text(tutorial())
    return 0


if __name__ == "__main__":
    sys.exit(main())
