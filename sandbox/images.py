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
