"""The network of a task image's build: the package registries, through the egress proxy.

A task's Dockerfile is written by a stranger, and its ``RUN`` steps ran with the worker's
own network: on a real worker that reaches the Ray dashboard (code execution on the
cluster), the results database, the relay and the cloud's metadata credentials. A build
here gets a network namespace of its own instead: that of a holder container with no
network (only loopback; an empty image, `holder_image`, running only hangar's helper),
whose one way out is hangar's forwarder to the audited egress proxy
(`hangar.sandbox.egress`): only the hosts the sweep allows for builds (`DEFAULT_BUILD_HOSTS`,
the package registries, unless the sweep's ``network: builds`` says otherwise), at public
addresses (or the sweep's ``host_services``), every attempt written to the image's
evidence (``<image>/network.jsonl``). The ``RUN`` steps find the proxy through
``HTTP_PROXY`` and the like, which docker passes as build arguments without keeping them
in the image's history.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from hangar.models.tunnel import RelayTunnel
from hangar.sandbox.base import SandboxSpec
from hangar.sandbox.docker import DockerSandbox, docker_client
from hangar.sandbox.egress import EgressProxy, proxy_env
from hangar.sandbox.helper import HELPER_USER
from hangar.sandbox.task_images import BuildNetwork, BuildNetworks

if TYPE_CHECKING:
    from hangar.kinds.execution.images.task import ImageTask

#: The holder's image: nothing in it runs (`holder_image`).
HOLDER = "hangar/build-network:1"
#: Where the forwarder listens in the build's network namespace.
PORT = 3128
#: What a build reaches unless the sweep says otherwise: the package registries of the
#: common base images and languages, and GitHub's release downloads (installers such as
#: uv's and rustup's fetch from there). Every name resolves to public addresses only.
DEFAULT_BUILD_HOSTS = (
    "deb.debian.org:80", "deb.debian.org", "security.debian.org:80", "security.debian.org",
    "archive.ubuntu.com:80", "security.ubuntu.com:80", "ports.ubuntu.com:80",
    "*.archive.ubuntu.com:80", "dl-cdn.alpinelinux.org", "dl-cdn.alpinelinux.org:80",
    "pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "registry.yarnpkg.com",
    "crates.io", "index.crates.io", "static.crates.io", "static.rust-lang.org",
    "proxy.golang.org", "sum.golang.org", "repo.anaconda.com", "conda.anaconda.org",
    "astral.sh", "github.com", "objects.githubusercontent.com",
    "release-assets.githubusercontent.com", "raw.githubusercontent.com",
)  # fmt: skip


def holder_image() -> str:
    """The image of a build network's holder: an empty file system (the holder runs only
    hangar's helper, mounted), made on the node when it has none, with no registry."""
    client = docker_client()
    try:
        client.images.get(HOLDER)
    except docker.errors.ImageNotFound:
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            info = tarfile.TarInfo("tmp")
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
        repository, _, tag = HOLDER.partition(":")
        client.api.import_image_from_data(layer.getvalue(), repository=repository, tag=tag)
    return HOLDER


@contextmanager
def build_network(
    hosts: tuple[str, ...], log: Path, host_services: tuple[str, ...] = ()
) -> Iterator[BuildNetwork]:
    """A network namespace for one build whose only way out is an egress proxy for
    `hosts` (its attempts written to `log` as they happen)."""
    image = holder_image()
    proxy = EgressProxy(hosts, "build", host_services=host_services, log=log).start()
    spec = SandboxSpec(
        image=image, sweep="builds", trial=f"build-network-{uuid.uuid4().hex[:8]}",
        user=HELPER_USER, workdir="/", home="/", ttl_s=24 * 3600,
    )  # fmt: skip
    try:
        with DockerSandbox(spec) as holder:
            tunnel = RelayTunnel.open(holder, PORT, proxy.socket_path)
            try:
                yield BuildNetwork(
                    mode=f"container:{holder.container_id}",
                    env=proxy_env(PORT),
                    refused=lambda: [
                        f"{a['host']}:{a['port']}"
                        for a in proxy.attempts
                        if a.get("allowed") is False
                    ],
                )
            finally:
                tunnel.close()
    finally:
        proxy.stop()


def build_networks(task: ImageTask, log: Path) -> BuildNetworks | None:
    """What opens the network of `task`'s build (None: no network at all)."""
    hosts = DEFAULT_BUILD_HOSTS if task.build_hosts is None else task.build_hosts
    if not hosts:
        return None
    return lambda: build_network(hosts, log, task.host_services)
