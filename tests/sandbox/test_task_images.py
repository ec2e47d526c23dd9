"""Task images: built from a task's context once per node, FROM mapped, and shared by the
nodes of a cluster through a registry (a real one, Debian's docker-registry, on loopback)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import docker
import pytest

from hangar.sandbox.task_images import ensure_task_image, stock_image

DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"


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


def test_a_base_image_that_cannot_be_fetched_says_to_map_it(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """Offline, a task's FROM image is not on the machine and no registry is reachable:
    the error names the image and the --image-map that fixes it."""
    from hangar.errors import ImageBuildError

    context = tmp_path / "environment"
    context.mkdir()
    (context / "Dockerfile").write_text(
        "FROM hangar-test/absent:1 AS build\nFROM build\nRUN true\n"
    )
    with pytest.raises(ImageBuildError) as caught:
        ensure_task_image("unfetchable", context)
    said = str(caught.value)
    assert "could not fetch the image it starts FROM (hangar-test/absent:1)" in said, said
    assert "--image-map 'hangar-test/absent:1=IMAGE'" in said


def test_a_registry_that_does_not_answer_is_the_nodes_problem_not_the_tasks(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """A pull from a registry that cannot be asked is a `RegistryError` (the trial is an
    infra_error, run again; a task is never judged broken for it), and an engine that
    will not speak plain HTTP to it is told how to trust it."""
    import socket

    from hangar.errors import RegistryError
    from hangar.sandbox.task_images import _registry_hint

    stock_image()
    context = tmp_path / "environment"
    shutil.copytree(DATASET / "hello-file" / "environment", context)
    (context / "marker").write_text(str(time.time()))  # a context no node has built
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}/h"  # bound, not listening
        with pytest.raises(RegistryError, match=f"cannot pull {dead}/hangar-task/unreached"):
            ensure_task_image("unreached", context, registry=dead)
    seen = 'Get "https://services:5000/v2/": http: server gave HTTP response to HTTPS client'
    assert "`insecure-registries` in /etc/docker/daemon.json on every node" in _registry_hint(seen)
    assert _registry_hint("connection refused") == ""
