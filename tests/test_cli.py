"""The CLI is thin, prints hangar errors without a traceback, and exits non-zero."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hangar import __version__
from hangar.cli import app

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0 and __version__ in result.stdout


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
