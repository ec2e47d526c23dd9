"""The CLI is thin, prints hangar errors without a traceback, and exits non-zero."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hangar import __version__
from hangar.cli import app

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0 and __version__ in result.stdout
    flag = runner.invoke(app, ["--version"])
    assert flag.exit_code == 0 and flag.stdout == f"hangar {__version__}\n"


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("version", "image", "sandbox"):
        assert command in result.stdout


def _hangar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hangar", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.docker
def test_hangar_error_is_one_clear_line(docker_client: object) -> None:
    proc = _hangar("sandbox", "exec", "--image", "hangar/nope:1", "--", "true")
    assert proc.returncode == 2
    assert "is not on the Docker engine" in proc.stderr and "hangar image build-base" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_backend_is_a_clear_error() -> None:
    proc = _hangar("sandbox", "exec", "--backend", "moon", "--", "true")
    assert proc.returncode == 2 and "unknown sandbox backend 'moon'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.docker
def test_sandbox_exec_runs_and_tears_down(docker_client: object) -> None:
    proc = _hangar("sandbox", "exec", "--", "sh", "-c", "id -un; exit 3")
    assert proc.returncode == 1 and proc.stdout == "agent\n" and "exit 3" in proc.stderr


TINY = Path(__file__).resolve().parent / "fixtures" / "tiny" / "scenario.yaml"


def test_trial_run_cli_local(tmp_path: Path) -> None:
    proc = _hangar(
        "trial",
        "run",
        str(TINY),
        "--backend",
        "local",
        "--agent-command",
        "true",
        "--evidence",
        (tmp_path / "ev").as_uri(),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert '"verdict": "pass"' in proc.stdout
    missing = _hangar(
        "trial",
        "run",
        str(TINY),
        "--backend",
        "local",
        "--agent-command",
        "true",
        "--model",
        "gpt-4o-mini",
        "--api-key-env",
        "HANGAR_NO_SUCH_KEY",
        "--evidence",
        (tmp_path / "ev").as_uri(),
        "--json",
    )
    # refused before any trial, as `hangar run` refuses it
    assert missing.returncode == 2 and not missing.stdout
    assert "HANGAR_NO_SUCH_KEY" in missing.stderr and "no trial was run" in missing.stderr


def test_trial_run_refuses_a_missing_model_key_before_any_trial(tmp_path: Path) -> None:
    """As `hangar run` does (exit 2, no trial): the variable it looked for is named, and
    for a --base-url server that needs no key, how to give it one."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    argv = [sys.executable, "-m", "hangar", "trial", "run", str(TINY), "--agent-command", "true"]
    argv += ["--backend", "local", "--model", "gpt-4o-mini", "--evidence", tmp_path.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "needs its key in OPENAI_API_KEY" in proc.stderr and "--api-key-env" in proc.stderr
    assert "no trial was run" in proc.stderr and not list(tmp_path.iterdir())
    argv += ["--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "MY_LOCAL_KEY"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "needs its key in MY_LOCAL_KEY" in proc.stderr
    assert "export MY_LOCAL_KEY=unused" in proc.stderr
