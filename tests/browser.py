"""Debian's chromium, headless, on a page hangar wrote: its DOM as the browser built it,
and the colours it painted (skips, or fails under HANGAR_REQUIRE, without chromium)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import skip_or_fail


def _chromium(profile: Path) -> list[str]:
    chromium = shutil.which("chromium")
    if chromium is None:
        skip_or_fail("chromium", "Debian's chromium is not installed")
    assert chromium is not None
    return [
        chromium,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ]


def dom(page: Path) -> str:
    """The page's DOM after chromium loaded it."""
    run = subprocess.run(
        [*_chromium(page.parent / "chromium-profile"), "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def painted(page: Path, size: str = "1300,2600") -> set[tuple[int, int, int]]:
    """The colours of a screenshot of the page (window `size`); no uncaught error."""
    from PIL import Image

    shot = page.parent / f"{page.stem}.png"
    run = subprocess.run(
        [
            *_chromium(page.parent / "chromium-profile"),
            f"--window-size={size}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "Uncaught" not in run.stderr, run.stderr[-2000:]
    with Image.open(shot) as image:
        return {c for _, c in image.convert("RGB").getcolors(maxcolors=1 << 20) or []}
