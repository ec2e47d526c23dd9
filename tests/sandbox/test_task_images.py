"""Task images: built from a task's context once per node, FROM mapped, and shared by the
nodes of a cluster through a registry (a real one, Debian's docker-registry, on loopback)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from hangar.sandbox.task_images import ensure_task_image, stock_image
from tests.require import skip_or_fail

DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """A registry on 127.0.0.1 (the docker engine trusts loopback registries over HTTP)."""
    binary = shutil.which("docker-registry")
    if binary is None:
        skip_or_fail("registry", "docker-registry is not installed (Debian: docker-registry)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [str(binary), "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"127.0.0.1:{port}/hangar-test"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_built_image_is_shared_through_the_registry(
    docker_client: docker.DockerClient, registry: str, tmp_path: Path
) -> None:
    stock_image()
    context = tmp_path / "environment"
    shutil.copytree(DATASET / "hello-file" / "environment", context)
    (context / "marker").write_text(str(time.time()))  # a context no node has built
    (context / "Dockerfile").write_text(
        (context / "Dockerfile").read_text() + "COPY marker /marker\n"
    )

    def mapped(ref: str) -> str:
        return "hangar/base:bookworm-stock" if ref.startswith("ubuntu:") else ref

    first = ensure_task_image("shared", context, mapped=mapped, registry=registry)
    assert first.built and first.tag.startswith("hangar-task/shared:")
    remote = f"{registry}/{first.tag}"
    # another node: it has not built the image, and finds it in the registry
    docker_client.images.remove(first.tag, force=True)
    docker_client.images.remove(remote, force=True)
    second = ensure_task_image("shared", context, mapped=mapped, registry=registry)
    assert not second.built and second.tag == first.tag
    assert docker_client.images.get(first.tag).id == docker_client.images.get(remote).id
    # and once it is here, nothing is pulled or built again
    assert not ensure_task_image("shared", context, mapped=mapped, registry=registry).built
    for tag in (first.tag, remote):
        docker_client.images.remove(tag, force=True)
