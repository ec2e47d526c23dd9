"""An image task's skills (Harbor's ``[environment] skills_dir``), installed where the
agent finds skills natively before its turn.

The skills ship in the task's image, a folder per skill with its ``SKILL.md``, at
``skills_dir``. As Harbor does, each is copied into the agent's own skills folder
(`hangar.agents.skills.skills_dir`: ``~/.claude/skills`` for Claude Code,
``~/.agents/skills`` for Codex and hangar's chat agent), owned by the agent's user.
``skills.json`` records where from, where to, and each file's sha256. A task that names a
skills folder its image lacks is the task's problem: blocked_setup.
"""

from __future__ import annotations

import hashlib
import posixpath
import tempfile
from pathlib import Path
from typing import Any

from hangar.agents.skills import in_sandbox, skills_dir
from hangar.errors import SandboxError, SandboxUnavailable
from hangar.results import Verdict
from hangar.sandbox import Sandbox
from hangar.trials.boundary import Outcome


def install_task_skills(sandbox: Sandbox, source: str, agent: Any) -> dict[str, Any]:
    """Copy the skills at `source` in `sandbox` (relative to its working directory) to
    where `agent` finds skills; what was installed, for ``skills.json``."""
    source = posixpath.join(sandbox.spec.workdir, source)
    target = in_sandbox(sandbox, skills_dir(agent))
    with tempfile.TemporaryDirectory(prefix="hangar-skills-") as tmp:
        try:
            sandbox.copy_out(source, Path(tmp))
        except SandboxUnavailable:
            raise
        except SandboxError as exc:
            raise Outcome(
                Verdict.BLOCKED_SETUP,
                f"the task's skills_dir {source} is not a folder of its image ({exc}): "
                "build the skills into the image there, or remove skills_dir from [environment]",
            ) from None
        skills = {
            folder.name: _digests(folder)
            for folder in sorted(Path(tmp).iterdir())
            if folder.is_dir() and (folder / "SKILL.md").is_file()
        }
        sandbox.copy_in(Path(tmp), target)
    return {"from": source, "folder": target, "skills": skills}


def _digests(folder: Path) -> dict[str, str]:
    return {
        f.relative_to(folder).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(folder.rglob("*"))
        if f.is_file()
    }
