"""How a verifier command is started: tools the workspace cannot shadow (no sandbox needed:
the same shell runs on the host)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hangar.verifiers.commands import _WITH_OUT, VERIFIER_GIT_ENV


def started(workspace: Path, command: str, **env: str) -> str:
    out = subprocess.run(
        ["sh", "-c", _WITH_OUT, "hangar-verifier", command],
        cwd=workspace,
        env={"HANGAR_VERIFIER_OUT": str(workspace / "out"), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_system_folders_come_first_and_the_workspace_is_not_on_path(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    path = f"{ws}/bin:.::bin:/home/agent/.local/bin:/usr/bin:/bin:/tmp/tools:/usr/local/bin"
    seen = started(ws, 'echo "$PATH"', PATH=path, HOME="/home/agent")
    assert seen == "/usr/bin:/bin:/usr/local/bin:/home/agent/.local/bin:/tmp/tools"
    assert (ws / "out").is_dir()  # $HANGAR_VERIFIER_OUT is made first


def test_no_start_up_file_and_no_globbing_of_path(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "rc").write_text("echo PLANTED\n")
    env = {"PATH": "/usr/bin:/bin:/opt/*", "BASH_ENV": str(tmp_path / "rc"), "ENV": "x"}
    assert started(ws, 'echo "$PATH|$BASH_ENV|$ENV"', **env) == "/usr/bin:/bin:/opt/*||"


def test_git_ignores_the_agents_fsmonitor_and_hooks(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    marker = tmp_path / "fsmonitor-ran"
    subprocess.run(
        ["git", "-C", str(ws), "config", "core.fsmonitor", f"touch {marker}; false"], check=True
    )
    env = {"PATH": "/usr/bin:/bin", **VERIFIER_GIT_ENV}
    started(ws, "git status --porcelain >/dev/null", **env)
    assert not marker.exists()
    started(ws, "git status --porcelain >/dev/null; true", PATH="/usr/bin:/bin")
    assert marker.exists()  # the control: without hangar's settings git runs it
