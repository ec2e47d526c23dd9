"""The README's tutorial, run as it is written: its shell blocks in an empty folder, with
hangar on PATH, then the viewer it ends with. A change to the README that breaks a step
fails here."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTED_PORT = "8765"


def tutorial_blocks() -> list[str]:
    """The ```sh blocks of the README's tutorial section, in order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("\n## Tutorial")
    section = readme[start : readme.index("\n## ", start + 1)]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_tutorial_has_its_steps() -> None:
    """The section the test runs is the one users read: six steps, ending with the viewer."""
    blocks = tutorial_blocks()
    assert len(blocks) == 6
    assert blocks[-1].strip() == "hangar view"
    script = "".join(blocks)
    for step in ("hangar scenario check", "hangar trial run", "hangar model serve", "hangar run"):
        assert step in script
    assert "hangar report sweep.yaml" in script


@pytest.mark.docker
@pytest.mark.ray
@pytest.mark.slow
def test_the_tutorial_runs_as_written(docker_client: object, tmp_path: Path) -> None:
    *steps, view = tutorial_blocks()
    port = str(_free_port())  # the README's port may be taken on a test machine
    script = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + "".join(steps)
    script = script.replace(SCRIPTED_PORT, port)
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k != "HANGAR_RUNS_DIR"}  # its own ./runs
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]

    assert "ok calc-add sha256:" in out  # scenario check
    assert "calc-add agent=command arm=control -> pass" in out  # the fix
    assert "calc-add agent=command arm=control -> fail" in out  # the agent that does nothing
    assert "exit 1: fail" in out
    assert "hidden test tests/hidden/test_add.py::test_add failed" in out
    # the report's comparison: one scenario shows nothing yet, and says why
    assert "fixer is not shown to beat idler by 5 points" in out
    assert "no interval (2 or more scenarios are needed)" in out
    html = (tmp_path / "report.html").read_text()
    assert "calc-add" in html and "<script" not in html

    from hangar.store import ResultsStore

    results = ResultsStore(f"sqlite:///{tmp_path / 'runs' / 'hangar.db'}").results("calc")
    verdicts = sorted((r.model, r.agent, r.verdict) for r in results)
    assert verdicts == sorted(
        (model, agent, verdict)
        for model, verdict in (("fixer", "pass"), ("idler", "fail"))
        for agent in ("chat", "chat-brief")
        for _ in range(2)
    )

    viewer_port = _free_port()
    argv = [str(bin_dir / "hangar"), *view.split()[1:], "--port", str(viewer_port)]
    server = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL)
    try:
        page = _get_when_up(f"http://127.0.0.1:{viewer_port}/")
        assert "calc" in page
        sweep = _get_when_up(f"http://127.0.0.1:{viewer_port}/sweeps/calc")
        assert "fixer" in sweep and "idler" in sweep
    finally:
        server.terminate()
        server.wait(timeout=30)


def _get_when_up(url: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            response = httpx.get(url, timeout=10)
            response.raise_for_status()
            return response.text
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
