"""What the benchmarks' hand-made trials do alike, with the standard library only (it is
imported by `overhead.py` and by `mswea_trials.py`, which runs in mini-swe-agent's own
virtualenv)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def clone_workspace(bundle: str, revision: str, ws: Path) -> None:
    """A private clone of `revision` at `ws`, with no remote, owned by the sandbox user."""
    subprocess.run(["git", "clone", "-q", "--no-checkout", bundle, str(ws)], check=True)
    subprocess.run(["git", "-C", str(ws), "checkout", "-q", revision], check=True)
    subprocess.run(["git", "-C", str(ws), "remote", "remove", "origin"], check=True)
    subprocess.run(["chown", "-R", "1000:1000", str(ws)], check=True)
