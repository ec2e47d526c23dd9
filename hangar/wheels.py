"""Python packages from PyPI for a sandbox's Python, resolved with pip on the host.

A sandbox image's Python (Debian bookworm's 3.11) is not the host's, and the sandbox has
no network: pip runs here, for the sandbox's interpreter (`platform_args`: binary wheels
of CPython ``python`` on x86-64 Linux only, so nothing is built), and the result is copied
or mounted in. MCP servers (`hangar.agents.mcp`) and agent CLIs published on PyPI
(`sandbox.images`, mini-swe-agent, Aider) are installed this way; `console_script` finds
the function a package's command runs, since pip's own launchers name the host's Python.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hangar.errors import HangarError

#: The platforms a wheel may be built for (newest first).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "linux_x86_64")


def platform_args(python: str) -> list[str]:
    """pip's options that resolve binary wheels for CPython `python` (``3.11``) on
    x86-64 Linux."""
    tag = python.replace(".", "")
    return [
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        f"cp{tag}",
        *[x for p in PLATFORMS for x in ("--platform", p)],
    ]


def pip(args: list[str], what: str, error: type[HangarError] = HangarError) -> None:
    """Run pip with `args` (quietly); a failure is an `error` saying `what` failed and
    pip's last words."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
        raise error(f"{what} failed: {' '.join(lines[-3:]) or f'pip exited {proc.returncode}'}")


def install_target(
    requirements: list[str],
    python: str,
    wheels: Path,
    site: Path,
    error: type[HangarError] = HangarError,
    *,
    sdists: tuple[str, ...] = (),
) -> None:
    """`requirements` downloaded into `wheels` and installed into the folder `site` (a
    ``--target``, for ``PYTHONPATH``), for CPython `python`. `sdists` are pure-Python
    packages PyPI has only as sources: built into wheels here first (for any Python)."""
    platform = platform_args(python)
    said = ", ".join(requirements)
    if sdists:
        pip(
            ["wheel", "--no-deps", "-w", str(wheels), *sdists],
            f"building {', '.join(sdists)}",
            error,
        )
    pip(["download", *platform, "--find-links", str(wheels), "-d", str(wheels), *requirements],
        f"resolving {said}", error)  # fmt: skip
    pip(["install", "--no-index", "--find-links", str(wheels), *platform,
         "--target", str(site), *requirements], f"installing {said}", error)  # fmt: skip


def normal_name(name: str) -> str:
    """A distribution's name as wheels and metadata folders spell it."""
    return re.sub(r"[-_.]+", "_", name).lower()


def console_script(
    site: Path, package: str, command: str | None, error: type[HangarError] = HangarError
) -> str:
    """The ``module:function`` of the console script `command` of `package` (installed in
    `site`); without `command`, its only one."""
    dist = normal_name(package.split("==")[0])
    scripts: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        if normal_name(info.name.split("-")[0]) != dist:
            continue
        if not (info / "entry_points.txt").is_file():
            continue
        section = ""
        for line in (info / "entry_points.txt").read_text().splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]")
            elif section == "console_scripts" and "=" in line:
                key, value = (x.strip() for x in line.split("=", 1))
                scripts[key] = value
    if command is not None:
        if command not in scripts:
            raise error(f"{package} has no console script {command!r} ({sorted(scripts)})")
        return scripts[command]
    if len(scripts) != 1:
        raise error(
            f"{package} has {len(scripts)} console scripts ({sorted(scripts)}): name one "
            "with `command:`"
        )
    return next(iter(scripts.values()))


def launcher(entry: str, command: str = "") -> str:
    """The Python code that runs the ``module:function`` `entry` as its `command` would
    (named so in ``sys.argv[0]``, where a CLI reads its own name)."""
    module, _, function = entry.partition(":")
    head, _, rest = function.partition(".")
    call = f"f.{rest}()" if rest else "f()"
    name = f"sys.argv[0] = {command!r}; " if command else ""
    return f"import sys; {name}from {module} import {head} as f; sys.exit({call})"
