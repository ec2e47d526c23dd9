"""Where hangar keeps things on this machine, unless told otherwise.

- cache (``$HANGAR_CACHE_DIR`` or ``~/.cache/hangar``): repository mirrors, image builds
  and per-trial folders (removed after each trial);
- runs (``$HANGAR_RUNS_DIR``, else ``runs/`` beside the sweep file, else ``./runs``): the
  default evidence store and results store.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """hangar's node-local cache folder."""
    return Path(os.environ.get("HANGAR_CACHE_DIR") or Path.home() / ".cache" / "hangar")


def runs_dir(beside: Path | None = None) -> Path:
    """The folder of local runs (evidence and results by default): ``$HANGAR_RUNS_DIR``,
    else ``runs`` in `beside` (a sweep file's folder), else in the current folder."""
    return Path(os.environ.get("HANGAR_RUNS_DIR") or (beside or Path()) / "runs").resolve()


def default_evidence_url() -> str:
    """``file://`` URL of the default evidence store."""
    return (runs_dir() / "evidence").as_uri()
