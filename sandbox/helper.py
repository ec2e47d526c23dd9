"""hangar's own programs inside a sandbox: one static binary, built on the node, mounted
read-only into every docker sandbox.

Whatever hangar itself runs in a sandbox (the keeper, the relay's and the egress proxy's
forwarders, the ``timeout`` around a command, the folders it makes, the files it removes
before a verifier runs) is this program (`helper.c`), by absolute path (`PATH`): never the
image's shell, coreutils, python3 or dynamic loader, which an agent running as root can
replace, wrap or preload (`/etc/ld.so.preload`, a ``.pth`` file, a ``sitecustomize``). A
static binary loads no library and reads no environment variable. The keeper and the
forwarders run as `HELPER_UID`, a user no image has: an agent, even as root, has no
capability to signal another user's processes, so it cannot end its own sandbox or its
tunnels.

The binary is compiled from `helper.c` once per node and source (``cc -static``; `CC` or
``HANGAR_CC`` name another compiler; ``zig cc`` from PyPI's ``ziglang`` where no C
compiler is installed) into the node's cache, under the source's digest.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from hangar.errors import SandboxUnavailable
from hangar.paths import cache_dir

SOURCE = Path(__file__).with_name("helper.c")
#: Every file of its source (`helper.c` includes the observer, `observe.c`, and the tar
#: writer, `tarout.c`).
SOURCES = (SOURCE, SOURCE.with_name("observe.c"), SOURCE.with_name("tarout.c"))
#: Where the binary is in a sandbox (a read-only bind mount of the one file).
PATH = "/run/hangar/helper"
#: Where a Kubernetes pod has the helper (an emptyDir filled from the helper's image by
#: an init container, `hangar.sandbox.bundle_images.helper_mount`), and its path there.
POD_FOLDER = "/run/hangar/bin"
POD_PATH = f"{POD_FOLDER}/hangar-helper"
#: The user the keeper and the forwarders run as: not root, not the agent's user.
HELPER_UID = 65533
#: ``docker exec``'s user for them.
HELPER_USER = f"{HELPER_UID}:{HELPER_UID}"


def helper_argv(command: str, *args: str) -> list[str]:
    """The argv of one of the helper's commands in a sandbox."""
    return [PATH, command, *args]


def _compilers() -> list[list[str]]:
    """C compilers to try, in order: the named one, the system's, zig's from PyPI."""
    named = os.environ.get("HANGAR_CC") or os.environ.get("CC")
    found: list[list[str]] = [shlex.split(named)] if named else []
    found += [[name] for name in ("cc", "gcc", "clang") if shutil.which(name)]
    try:
        import ziglang  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        target = f"{platform.machine()}-linux-musl"
        found.append([sys.executable, "-m", "ziglang", "cc", "-target", target])
    return found


@cache
def helper_binary() -> Path:
    """The node's helper binary (built on first use). Raises `SandboxUnavailable` with
    what to install when no compiler can build it."""
    source = b"".join(path.read_bytes() for path in SOURCES)
    digest = hashlib.sha256(source + platform.machine().encode()).hexdigest()[:16]
    target = cache_dir() / "helpers" / digest / "hangar-helper"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for compiler in _compilers():
        with tempfile.TemporaryDirectory(dir=target.parent) as work:
            out = Path(work) / "hangar-helper"
            argv = [*compiler, "-static", "-O2", "-o", str(out), str(SOURCE)]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as exc:
                failures.append(f"{shlex.join(compiler)}: {exc}")
                continue
            if proc.returncode != 0 or not _works(out):
                failures.append(f"{shlex.join(compiler)}: {proc.stderr.strip()[-300:]}")
                continue
            out.chmod(0o755)
            out.replace(target)  # whole or not at all, also with two builders
            return target
    tried = "; ".join(failures) or "no C compiler was found"
    raise SandboxUnavailable(
        "cannot build hangar's sandbox helper (a static C program, sandbox/helper.c): "
        f"{tried}. Install a C compiler with a static C library (Debian: `sudo apt-get "
        "install gcc libc6-dev`), or `pip install ziglang`, or name one in HANGAR_CC"
    )


def _works(binary: Path) -> bool:
    """Whether a built binary runs here and is static (it will run in any image)."""
    try:
        proc = subprocess.run([str(binary), "ids"], capture_output=True, timeout=30)
    except OSError:
        return False
    return proc.returncode == 0 and not _interpreter(binary.read_bytes())


def _interpreter(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF file names a dynamic loader (PT_INTERP)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return True  # not what this node runs: refuse it
    phoff = int.from_bytes(elf[32:40], "little")
    size, count = int.from_bytes(elf[54:56], "little"), int.from_bytes(elf[56:58], "little")
    types = (
        int.from_bytes(elf[phoff + i * size : phoff + i * size + 4], "little") for i in range(count)
    )
    return 3 in types
