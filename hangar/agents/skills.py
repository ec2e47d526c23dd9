"""Skills where an agent finds them natively, in the open agent-skills layout: a folder per
skill whose ``SKILL.md`` starts with YAML front matter naming it and saying when to use it.

Each agent looks in its own folder of its sandbox's HOME (`skills_dir`): Claude Code in
``~/.claude/skills``, Codex and hangar's chat agent in ``~/.agents/skills``. A routing
suite installs its catalog there and an execution scenario's plugin may target it; the
chat agent lists what it finds there in its system prompt (`native_skills`, `skills_note`)
and loads one by reading its ``SKILL.md``, as Codex does.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import yaml

from hangar.agents.command import CommandAgent
from hangar.agents.presets import presets
from hangar.sandbox.base import Sandbox

#: Where agents without a folder of their own look (the open standard's user scope).
DEFAULT_DIR = "~/.agents/skills"
#: The most of one ``SKILL.md`` read to find its front matter.
HEAD_BYTES = 4096
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|\Z)", re.S)


class SkillEntry(NamedTuple):
    """One installed skill, as its front matter describes it."""

    name: str
    """Its folder's name (how sessions name it)."""
    description: str
    """When to use it (its front matter's ``description``; '' when it has none)."""
    path: str
    """Its ``SKILL.md`` in the sandbox."""


def skills_dir(agent: Any) -> str:
    """The folder (``~`` for the sandbox HOME) where `agent` finds skills natively."""
    if isinstance(agent, CommandAgent) and agent.preset in presets():
        return presets()[agent.preset].skills
    return DEFAULT_DIR


def front_matter(text: str) -> dict[str, Any]:
    """The YAML front matter of a ``SKILL.md`` ({} when it has none or it is not a
    mapping)."""
    match = _FRONT.match(text)
    if not match:
        return {}
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def in_sandbox(sandbox: Sandbox, folder: str) -> str:
    """`folder` with ``~`` as the sandbox's HOME."""
    return sandbox.spec.home + folder[1:] if folder.startswith("~") else folder


def native_skills(sandbox: Sandbox, folder: str = DEFAULT_DIR) -> list[SkillEntry]:
    """The skills installed in `folder` of `sandbox` (one command; none when it is empty
    or missing)."""
    root = sandbox.command_path(in_sandbox(sandbox, folder))
    script = (
        'for f in "$1"/*/SKILL.md; do [ -f "$f" ] || continue; '
        f'printf "\\036%s\\037" "$f"; head -c {HEAD_BYTES} "$f"; done'
    )
    res = sandbox.exec(["sh", "-c", script, "sh", root], timeout=30)
    found = []
    for record in res.stdout.split("\x1e")[1:]:
        path, _, text = record.partition("\x1f")
        meta = front_matter(text)
        name = path.rstrip("/").split("/")[-2]
        description = " ".join(str(meta.get("description") or "").split())
        found.append(SkillEntry(name=name, description=description[:1024], path=path))
    return sorted(found)


def skills_note(skills: list[SkillEntry]) -> str:
    """What the chat agent's system prompt says of the installed skills ('' for none)."""
    if not skills:
        return ""
    lines = [
        "",
        "",
        "Skills are installed: each is a folder whose SKILL.md holds instructions for one "
        "kind of task. When the task matches a skill's description, read its SKILL.md "
        "before you act and follow it; do not read the skills the task does not need.",
    ]
    lines += [f"- {s.name}: {s.description or '(no description)'} ({s.path})" for s in skills]
    return "\n".join(lines)
