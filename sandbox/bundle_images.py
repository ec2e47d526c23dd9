"""Agent bundles as images: how the nodes of a cluster share them, and how a pod gets one.

A bundle (`hangar.sandbox.bundles`) is a folder of the node that built it. To share it the
node packs it as an image ``FROM scratch`` (`bundle_image`): the folder at ``/bundle`` and
a static busybox (Debian's ``busybox-static``) at ``/bin/busybox``, tagged
``hangar-bundle/<name>:<digest>`` and pushed to the sweep's ``registry:`` as task images
are. A node that has not got the bundle pulls the image and copies ``/bundle`` out of it
(`pull_bundle`: extracted as untrusted, nothing may leave the folder) before
building it itself; what it builds it pushes (`push_bundle`).

On Kubernetes no worker's folder can be bound into a pod: the pod's spec names the bundle's
image, and an init container of that image copies ``/bundle`` into an emptyDir with its
busybox; the sandbox container mounts that emptyDir read-only where the bundle goes
(`hangar.sandbox.kubernetes.pod_manifest`). No shell or tool of the task's image is used.
"""

from __future__ import annotations

import contextlib
import json
import tarfile
import tempfile
from pathlib import Path

import docker
import docker.errors

from hangar.errors import ImageBuildError, SandboxError
from hangar.sandbox.archive import extract_untrusted
from hangar.sandbox.base import Mount
from hangar.sandbox.debian import runtime_root
from hangar.sandbox.docker import docker_client
from hangar.sandbox.helper import POD_FOLDER, helper_binary
from hangar.sandbox.task_images import pull_ref, push_ref

REPOSITORY = "hangar-bundle"
"""The repository of bundle images, under the registry's namespace."""
INSIDE = "bundle"
"""The folder of a bundle image that holds the bundle."""
BUSYBOX = ("bookworm", ("busybox-static",))
"""Where the init container's copier comes from (a static binary: no C library needed)."""
LIMIT = 8 * 1024**3
"""The most a bundle pulled from a registry may unpack to (the largest is under 1 GiB)."""
COPY_COMMAND = ("/bin/busybox", "cp", "-a", f"/{INSIDE}/.")
"""The init container's command, before the target folder."""


def image_tag(name: str, digest: str) -> str:
    """The local tag of bundle `name`'s image (``hangar-bundle/<name>:<digest>``)."""
    return f"{REPOSITORY}/{name}:{digest[:16]}"


def remote_ref(registry: str, name: str, digest: str) -> str:
    """Where bundle `name`'s image is in `registry` (``host:port/namespace``)."""
    return f"{registry.rstrip('/')}/{image_tag(name, digest)}"


def bundle_image(name: str, digest: str, folder: Path, tag: str | None = None) -> str:
    """Pack `folder` as bundle `name`'s image (see the module docstring); its local tag."""
    tag = tag or image_tag(name, digest)
    busybox = runtime_root(*BUSYBOX) / "bin" / "busybox"
    if not busybox.is_file():
        raise ImageBuildError(f"Debian's busybox-static has no bin/busybox in {busybox.parent}")
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{name}-image-") as work:
        layer = Path(work) / "layer.tar"
        with tarfile.open(layer, "w") as tar:
            tar.add(busybox, arcname="bin/busybox")
            tar.add(folder, arcname=INSIDE)
        repository, _, version = tag.rpartition(":")
        try:
            docker_client().api.import_image_from_file(
                str(layer), repository=repository, tag=version
            )
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"cannot make bundle image {tag}: {exc}") from exc
    return tag


def push_bundle(registry: str, name: str, digest: str, folder: Path) -> str:
    """Pack and push bundle `name` to `registry`, for the other nodes; its remote reference.
    The local copy of the image is removed after (the node has the folder)."""
    remote = remote_ref(registry, name, digest)
    bundle_image(name, digest, folder, tag=remote)
    try:
        push_ref(remote)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            docker_client().images.remove(remote, noprune=False)
    return remote


#: Helper images known to be in their registry (this process pushed or found them).
_HELPERS: set[str] = set()


def helper_mount(registry: str) -> Mount:
    """hangar's helper for a Kubernetes pod: its folder as an image in `registry` (pushed
    there by the first node that needs it, as a bundle is), mounted read-only at
    `POD_FOLDER` by the pod's init container. The pod then runs hangar's own programs
    (the tar a folder is copied out with) by absolute path, never the image's."""
    binary = helper_binary()
    digest = binary.parent.name
    remote = remote_ref(registry, "hangar-helper", digest)
    if remote not in _HELPERS:
        if pull_ref(remote) is None:
            push_bundle(registry, "hangar-helper", digest, binary.parent)
        _HELPERS.add(remote)
    return Mount(source=binary.parent, target=POD_FOLDER, read_only=True, image=remote)


def pull_bundle(registry: str, name: str, digest: str, target: Path) -> bool:
    """Bundle `name` from `registry` into the new folder `target` (whole or not at all);
    False when the registry has none. Raises `ImageBuildError` for an unreachable registry
    or an image that is not a bundle of that digest."""
    remote = remote_ref(registry, name, digest)
    if pull_ref(remote) is None:
        return False
    try:
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-pull-") as work:
            folder = Path(work) / INSIDE
            _copy_out(remote, folder)
            manifest = folder / "manifest.json"
            found = json.loads(manifest.read_text()).get("digest") if manifest.is_file() else None
            if found != digest:
                raise ImageBuildError(
                    f"{remote} holds bundle {str(found)[:16]}, not {digest[:16]}: remove it from "
                    "the registry"
                )
            folder.chmod(0o755)
            try:
                folder.replace(target)
            except OSError:
                if not (target / "manifest.json").is_file():
                    raise
    finally:
        with contextlib.suppress(docker.errors.APIError):
            docker_client().images.remove(remote, noprune=False)
    return True


def _copy_out(image: str, folder: Path) -> None:
    """``/bundle`` of `image` into `folder`, through a created (never started) container;
    extracted as untrusted (`extract_untrusted`: nothing may leave the folder)."""
    client = docker_client()
    container = client.containers.create(image, command=["/bin/busybox", "true"])
    try:
        stream, _ = container.get_archive(f"/{INSIDE}")
        with tempfile.TemporaryFile() as archive:
            for chunk in stream:
                archive.write(chunk)
            archive.seek(0)
            extract_untrusted(archive, folder, strip=1, limit=LIMIT)
    except (docker.errors.APIError, SandboxError) as exc:
        raise ImageBuildError(f"cannot copy the bundle out of {image}: {exc}") from exc
    finally:
        container.remove(force=True)
