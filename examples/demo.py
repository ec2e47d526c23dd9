"""`make demo`: a real job in a real sandbox.

Makes a small git repository on the host, copies it into a fresh docker sandbox (no
network, non-root, limits on), clones a pinned revision inside, runs the repository's
test there, prints what happened and removes the sandbox.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from rich.console import Console

from hangar.sandbox import SandboxSpec
from hangar.sandbox.docker import DockerSandbox

console = Console()


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` with a fixed identity, returning stdout."""
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=demo", "-c", "user.email=demo@hangar", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "calc"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (repo / "test_calc.py").write_text(
            "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
        )
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "add")
        pinned = git(repo, "rev-parse", "HEAD")
        (repo / "calc.py").write_text("def add(a, b):\n    return a - b  # later bug\n")
        git(repo, "commit", "-q", "-am", "break add")

        spec = SandboxSpec(image="hangar/base:bookworm", sweep="demo", trial="demo-1")
        with DockerSandbox(spec) as sandbox:
            console.print(f"sandbox {sandbox.container_id[:12]} up (network none, user agent)")
            sandbox.copy_in(repo, "/tmp/origin")
            steps = [
                f"git clone -q /tmp/origin work && cd work && git checkout -q {pinned}"
                " && git remote remove origin && git log --oneline -1",
                "cd work && python3 -m pytest -q 2>&1 | tail -1",
                "python3 -c \"import urllib.request as u; u.urlopen('http://example.com', "
                'timeout=3)" 2>&1 | tail -1',
            ]
            for step in steps:
                res = sandbox.exec(step, timeout=120)
                console.print(
                    f"[bold]$ {step}[/]\n{res.stdout.strip()}  [dim](exit {res.returncode})[/]"
                )
        left = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=hangar.trial=demo-1"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        console.print(f"sandbox removed: {'yes' if not left else 'NO: ' + left}")


if __name__ == "__main__":
    main()
