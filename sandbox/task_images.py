"""Task images: a task's own environment, built from its Dockerfile once per node.

A task in the field's formats brings its environment as a build context (Harbor's
``environment/``). `ensure_task_image` builds it with the docker SDK, tagged by the
digest of the context's bytes and of the Dockerfile as mapped, so a second trial of the
same task on the node finds it built (and two workers building it at once wait for one
another; on a cluster, nodes wait for the one building it: `hangar.sandbox.build_once`).
An image map rewrites ``FROM`` references (and a task's ``docker_image``) for mirrored
or offline registries. A task's Dockerfile is written by a stranger, so its ``RUN`` steps
never get the worker's network: a build runs with none, or with the network `network`
opens (the execution kind's: a netns whose only way out is the audited egress proxy, for
the package registries a sweep allows; `hangar.kinds.execution.images.build_network`). Its log
and its network audit are kept for the evidence.

`stock_image` is the variant of the base image that images like ``debian:*`` or
``python:*`` are mapped onto offline: root by default, ``/`` as its working directory,
as those images are (the base image itself runs as the sandbox user in /workspace).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import re
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from hangar.errors import ImageBuildError, ImageNotFound, RegistryError
from hangar.files import tree_digest
from hangar.paths import cache_dir
from hangar.sandbox.build_once import built_once
from hangar.sandbox.docker import docker_client
from hangar.sandbox.images import DEFAULT_BASE_TAG, ImageBuildOutcome
from hangar.sandbox.legacy_dockerfile import for_legacy_builder

if TYPE_CHECKING:
    from docker.models.images import Image

#: A ``RUN`` line: the only steps that reach a network.
_RUN = re.compile(r"^\s*RUN\b", re.IGNORECASE)
#: ``FROM [--flag=...] image [AS name]``.
_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)
LABEL_CONTEXT = "hangar.task-context"
STOCK_SUFFIX = "-stock"

Mapper = Callable[[str], str]


def map_dockerfile(text: str, mapped: Mapper) -> str:
    """The Dockerfile with each ``FROM`` image rewritten by `mapped` (names of earlier
    stages are left alone)."""
    out = []
    for line, image in _from_lines(text):
        match = _FROM.match(line) if image is not None else None
        if match is not None:
            head, _, tail = match.groups()
            line = f"{head}{mapped(image or '')}{tail}"
        out.append(line)
    return "\n".join(out) + "\n"


def base_images(text: str) -> list[str]:
    """The images a Dockerfile starts ``FROM`` (not its own stages, not ``scratch``)."""
    found = [image for _, image in _from_lines(text) if image is not None]
    return [image for image in dict.fromkeys(found) if image.lower() != "scratch"]


def _from_lines(text: str) -> Iterator[tuple[str, str | None]]:
    """Each line, with the image it starts ``FROM`` when that is not an earlier stage."""
    stages: set[str] = set()
    for line in text.splitlines():
        match = _FROM.match(line)
        image = None
        if match:
            _, named, tail = match.groups()
            image = named if named.lower() not in stages else None
            alias = re.search(r"\bAS\s+(\S+)", tail, re.IGNORECASE)
            if alias:
                stages.add(alias.group(1).lower())
        yield line, image


def context_tag(name: str, context: Path, dockerfile_text: str) -> str:
    """The tag of `context` built with `dockerfile_text`: the digest of both."""
    h = hashlib.sha256(tree_digest(context).encode() + b"\0" + dockerfile_text.encode())
    safe = re.sub(r"[^a-z0-9_.-]", "-", name.lower()).strip("-.") or "task"
    return f"hangar-task/{safe}:{h.hexdigest()[:24]}"


def _tar_context(context: Path, dockerfile: str, text: str) -> io.BytesIO:
    """The build context as a tar stream, its Dockerfile replaced by `text`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for child in sorted(context.iterdir()):
            if child.name != dockerfile:
                tar.add(child, arcname=child.name, recursive=True)
        data = text.encode()
        info = tarfile.TarInfo(dockerfile)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def find_image(tag: str) -> str | None:
    """The id of the local image `tag`, or None."""
    try:
        return str(docker_client().images.get(tag).id)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"cannot inspect image {tag!r}: {exc}") from exc


@dataclass(frozen=True)
class BuildNetwork:
    """The network a build's ``RUN`` steps get: a docker ``network_mode`` and the build
    arguments that point them at a proxy, with what that proxy refused."""

    mode: str
    """``none``, or ``container:ID`` (a netns whose only way out is the egress proxy)."""
    env: dict[str, str] = field(default_factory=dict)
    """``HTTP_PROXY`` and the like, given as build arguments (docker keeps them out of
    the image's history)."""
    refused: Callable[[], list[str]] = list
    """``host:port`` of each connection the proxy refused so far."""


#: What a build gets without a network of its own: none at all.
NO_NETWORK = BuildNetwork(mode="none")
BuildNetworks = Callable[[], AbstractContextManager[BuildNetwork]]


def ensure_task_image(
    name: str,
    context: Path,
    *,
    dockerfile: str = "Dockerfile",
    mapped: Mapper = lambda ref: ref,
    timeout_s: float = 600,
    log: Path | None = None,
    registry: str | None = None,
    network: BuildNetworks | None = None,
) -> ImageBuildOutcome:
    """The image of `context` (built unless this node has it; see the module docstring).
    With a `registry` (``host:port/namespace``, for a cluster) a node first pulls what
    another node pushed, and pushes what it built itself. `network` opens the network a
    build's ``RUN`` steps get (only when a build happens; without one: none).

    Raises ImageBuildError with the log's tail when the build fails; the whole log is
    written to `log`.
    """
    source = context / dockerfile
    if not source.is_file():
        raise ImageBuildError(f"no {dockerfile} in {context}")
    text = for_legacy_builder(
        map_dockerfile(source.read_text(encoding="utf-8", errors="replace"), mapped)
    )
    tag = context_tag(name, context, text)
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"{tag.replace('/', '_').replace(':', '_')}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per tag on the node at a time
        existing = find_image(tag)
        if existing is not None:
            return ImageBuildOutcome(tag=tag, image_id=existing, built=False, seconds=0.0)

        def build() -> ImageBuildOutcome:
            fileobj = _tar_context(context, dockerfile, text)
            runs = any(_RUN.match(line) for line in text.splitlines())
            opened = network() if network is not None and runs else nullcontext(NO_NETWORK)
            with opened as net:
                try:
                    built = _build(tag, fileobj, dockerfile, timeout_s, log, net)
                except ImageBuildError as exc:
                    hint = _refused_hint(net.refused()) or _unpulled_hint(str(exc), text)
                    raise ImageBuildError(f"{exc}{hint}") from exc
            if registry:
                _push(registry, tag)
            return built

        if not registry:
            return build()

        def pull() -> ImageBuildOutcome | None:
            pulled = _pull(registry, tag)
            if pulled is None:
                return None
            return ImageBuildOutcome(tag=tag, image_id=pulled, built=False, seconds=0.0)

        return built_once(f"image:{tag}", pull, build, wait_s=timeout_s)


#: How a build says it could not fetch an image it starts FROM.
_UNPULLED = re.compile(
    r"no such host|pull access denied|failed to resolve|dial tcp|repository does not exist|"
    r"manifest unknown|connection refused|network is unreachable|i/o timeout",
    re.IGNORECASE,
)


def _refused_hint(refused: list[str]) -> str:
    """What to do when the build's network refused what a step wanted ('' if nothing)."""
    if not refused:
        return ""
    wanted = ", ".join(dict.fromkeys(refused))
    return (
        f"\nThe build's network refused {wanted}: a build reaches only the sweep's "
        "`network: builds` hosts (package registries by default); add what it needs there."
    )


def _unpulled_hint(error: str, dockerfile_text: str) -> str:
    """What to do when a build could not fetch its base image ('' otherwise)."""
    images = base_images(dockerfile_text)
    if not images or not _UNPULLED.search(error):
        return ""
    first = images[0]
    return (
        f"\nIt could not fetch the image it starts FROM ({', '.join(images)}): map it onto an "
        f"image this machine has, `--image-map '{first}=IMAGE'` (a sweep's `image_map:`), "
        "e.g. the stock Debian image `hangar/base:bookworm-stock`, or push it to a registry "
        "the machine reaches."
    )


def _pull(registry: str, tag: str) -> str | None:
    """The image `tag` pulled from `registry` and tagged locally, or None if it has none."""
    image = pull_ref(f"{registry.rstrip('/')}/{tag}")
    if image is None:
        return None
    image.tag(tag)
    return str(image.id)


def pull_ref(remote: str) -> Image | None:
    """The image `remote` (``host:port/namespace/name:tag``) pulled, or None if its
    registry has none. Raises `ImageBuildError` when the registry cannot be asked."""
    try:
        return docker_client().images.pull(remote)
    except (docker.errors.NotFound, docker.errors.ImageNotFound):
        return None
    except docker.errors.APIError as exc:
        if "not found" in str(exc).lower() or "unknown" in str(exc).lower():
            return None
        raise RegistryError(f"cannot pull {remote}: {exc}{_registry_hint(str(exc))}") from exc


def _push(registry: str, tag: str) -> None:
    """Push the local image `tag` to `registry`, for the other nodes."""
    remote = f"{registry.rstrip('/')}/{tag}"
    docker_client().images.get(tag).tag(remote)
    push_ref(remote)


def push_ref(remote: str) -> None:
    """Push the local image tagged `remote` to its registry."""
    repository, _, version = remote.rpartition(":")
    try:
        for event in docker_client().api.push(repository, tag=version, stream=True, decode=True):
            if "error" in event:
                hint = _registry_hint(str(event["error"]))
                raise RegistryError(f"cannot push {remote}: {event['error']}{hint}")
    except docker.errors.APIError as exc:
        raise RegistryError(f"cannot push {remote}: {exc}{_registry_hint(str(exc))}") from exc


def _registry_hint(error: str) -> str:
    """What to do when the engine would not talk to a registry over plain HTTP."""
    if "http response to https client" not in error.lower():
        return ""
    return (
        "\nThe registry speaks plain HTTP: give it TLS, or add its address to "
        "`insecure-registries` in /etc/docker/daemon.json on every node and restart the engine."
    )


def _build(
    tag: str,
    fileobj: io.BytesIO,
    dockerfile: str,
    timeout_s: float,
    log: Path | None,
    network: BuildNetwork = NO_NETWORK,
) -> ImageBuildOutcome:
    started = time.monotonic()
    lines: list[str] = []

    def failed(what: str) -> ImageBuildError:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("\n".join(lines) + "\n")
        tail = "\n".join(lines[-15:])
        return ImageBuildError(f"building {tag} failed: {what}\n{tail}".rstrip())

    try:
        for event in docker_client().api.build(
            fileobj=fileobj,
            custom_context=True,
            dockerfile=dockerfile,
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode=network.mode,
            buildargs=network.env or None,
            labels={LABEL_CONTEXT: tag},
            decode=True,
        ):
            if "stream" in event and event["stream"].strip():
                lines.append(event["stream"].rstrip())
            if "error" in event:
                raise failed(str(event["error"]).strip())
            if time.monotonic() - started > timeout_s:
                raise failed(f"it took longer than its {timeout_s:g} s build time limit")
    except docker.errors.APIError as exc:
        raise failed(str(exc)) from exc
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("\n".join(lines) + "\n")
    image_id = find_image(tag)
    if image_id is None:
        raise failed("the engine reported no image")
    return ImageBuildOutcome(
        tag=tag, image_id=image_id, built=True, seconds=time.monotonic() - started
    )


def stock_image(base_tag: str = DEFAULT_BASE_TAG) -> ImageBuildOutcome:
    """``<base_tag>-stock``: the base image as stock Debian images are (root, ``/``)."""
    base_id = find_image(base_tag)
    if base_id is None:
        raise ImageBuildError(f"build the base image {base_tag} first (`hangar image build-base`)")
    text = f"FROM {base_tag}\nUSER root\nWORKDIR /\nENV HOME=/root\n"
    context = cache_dir() / "images" / "context-stock"
    context.mkdir(parents=True, exist_ok=True)
    (context / "Dockerfile").write_text(text)
    (context / "base-id").write_text(base_id)  # a new base image is a new stock image
    outcome = ensure_task_image("stock", context)
    docker_client().images.get(outcome.image_id).tag(base_tag + STOCK_SUFFIX)
    return outcome.model_copy(update={"tag": base_tag + STOCK_SUFFIX})


def image_settings(reference: str) -> dict[str, str]:
    """The working directory, user, PATH and PYTHONPATH of the local image `reference`."""
    try:
        config = docker_client().images.get(reference).attrs.get("Config") or {}
    except docker.errors.ImageNotFound as exc:
        raise ImageNotFound(
            f"image {reference!r} is not on this node: build it or load it "
            "(`docker load`), or map it onto one that is (the sweep's image_map)"
        ) from exc
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"cannot inspect image {reference!r}: {exc}") from exc
    env = dict(str(e).partition("=")[::2] for e in config.get("Env") or [])
    return {
        "workdir": str(config.get("WorkingDir") or ""),
        "user": str(config.get("User") or ""),
        "path": env.get("PATH", ""),
        "pythonpath": env.get("PYTHONPATH", ""),
    }
