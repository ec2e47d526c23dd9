"""Agent bundles shared through a registry (a real one, Debian's docker-registry, on
loopback): a node that has not got a bundle pulls the one another node pushed and runs
it, a bundle image that would write outside its folder is refused, and a Kubernetes pod
takes its bundle from the image through an init container (rendered and validated)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import docker
import pytest

from hangar.errors import ImageBuildError
from hangar.sandbox import SandboxSpec
from hangar.sandbox.bundle_images import (
    COPY_COMMAND,
    bundle_image,
    image_tag,
    pull_bundle,
    push_bundle,
    remote_ref,
)
from hangar.sandbox.bundles import MOUNT, bundle_mount, bundles_dir, ensure_bundle
from hangar.sandbox.config import KubernetesConfig
from hangar.sandbox.kubernetes import pod_manifest
from tests.models.cli_agents import bundle_or_skip, in_bundle

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = "opencode"  # a small one (its own native build, ~190 MB)


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry of `folder`: (size, permission bits), links as (-1, 0)."""
    return {
        str(p.relative_to(folder)): (-1, 0)
        if p.is_symlink()
        else (p.stat().st_size if p.is_file() else 0, p.stat().st_mode & 0o777)
        for p in folder.rglob("*")
    }


def test_a_node_without_the_bundle_pulls_what_another_pushed(
    registry: str,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = bundle_or_skip(NAME)  # this node's
    remote = push_bundle(registry, NAME, built.digest, built.folder)
    assert remote == remote_ref(registry, NAME, built.digest)
    with pytest.raises(docker.errors.ImageNotFound):  # not kept on the pushing node
        docker_client.images.get(remote)
    # another node: an empty cache; it pulls instead of building (no npm, no apt needed)
    monkeypatch.setenv("HANGAR_CACHE_DIR", str(tmp_path / "other-node"))
    said: list[str] = []
    pulled = ensure_bundle(NAME, registry=registry, progress=said.append)
    assert said == [f"{NAME}: pulled from {registry}"]
    assert pulled.folder.parent == bundles_dir() and pulled.folder != built.folder
    assert pulled.digest == built.digest
    assert _files(pulled.folder) == _files(built.folder)
    manifest = json.loads((pulled.folder / "manifest.json").read_text())
    assert manifest["digest"] == built.digest
    # and it runs, from the pulled folder, in a sandbox
    res = in_bundle(NAME, "HOME=/tmp opencode --version")
    assert res.returncode == 0 and "1.18.33" in res.stdout, res
    with pytest.raises(docker.errors.ImageNotFound):  # the folder stays, not the image
        docker_client.images.get(remote)


def test_a_registry_without_the_bundle_answers_none(registry: str, tmp_path: Path) -> None:
    assert not pull_bundle(registry, NAME, "0" * 64, tmp_path / "none")
    assert not (tmp_path / "none").exists()


def test_a_bundle_image_that_reaches_out_of_its_folder_is_refused(
    registry: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    digest = "e" * 64
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"digest": digest}))
    (folder / "passwd").symlink_to("/etc/passwd")  # a link out of the bundle
    remote = remote_ref(registry, "evil", digest)
    bundle_image("evil", digest, folder, tag=remote)
    subprocess.run(["docker", "push", remote], check=True, capture_output=True)
    docker_client.images.remove(remote)
    target = tmp_path / "cache" / "evil"
    target.parent.mkdir()
    with pytest.raises(ImageBuildError, match="passwd"):
        pull_bundle(registry, "evil", digest, target)
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_a_bundle_image_of_another_digest_is_refused(
    registry: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"digest": "a" * 64}))
    remote = remote_ref(registry, "other", "b" * 64)  # pushed under another digest's tag
    bundle_image("other", "b" * 64, folder, tag=remote)
    subprocess.run(["docker", "push", remote], check=True, capture_output=True)
    docker_client.images.remove(remote)
    with pytest.raises(ImageBuildError, match="remove it from the registry"):
        pull_bundle(registry, "other", "b" * 64, tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_the_bundle_image_copies_itself_with_its_own_busybox(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """What a pod's init container runs, run here with docker: the image's static busybox
    copies ``/bundle`` into a volume (the image has nothing else: no C library)."""
    built = bundle_or_skip(NAME)
    tag = bundle_image(NAME, built.digest, built.folder)
    assert tag == image_tag(NAME, built.digest)
    out = tmp_path / "volume"
    out.mkdir()
    try:
        docker_client.containers.run(
            tag,
            [*COPY_COMMAND, "/volume"],
            volumes={str(out): {"bind": "/volume", "mode": "rw"}},
            network_mode="none",
            remove=True,
        )
    finally:
        docker_client.images.remove(tag)
    assert _files(out) == _files(built.folder)


def test_a_kubernetes_pod_takes_its_bundle_from_the_image(tmp_path: Path) -> None:
    """The pod's init container copies the bundle into an emptyDir the sandbox container
    mounts read-only; the pod validates against the Kubernetes schema."""
    from tests.cluster.test_k8s import k8s_validate

    built = bundle_or_skip(NAME)
    registry = "registry.example:5000/hangar"
    spec = SandboxSpec(
        image="registry.example:5000/harbor/task:1",
        sweep="s",
        trial="ab" * 32,
        mounts=(bundle_mount(built, registry),),
    )
    config = KubernetesConfig(namespace="sb")
    pod = pod_manifest(spec, "hangar-bundle", config)
    k8s_validate(pod)
    (init,) = pod["spec"]["initContainers"]
    assert init["image"] == remote_ref(registry, NAME, built.digest)
    assert init["command"] == [*COPY_COMMAND, MOUNT]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (sandbox,) = pod["spec"]["containers"]
    (shared,) = [m for m in sandbox["volumeMounts"] if m["mountPath"] == MOUNT]
    assert shared["readOnly"] is True
    assert init["volumeMounts"] == [{"name": shared["name"], "mountPath": MOUNT}]
    # without a registry there is no image: the bundle is copied in when the pod runs
    plain = pod_manifest(
        spec.model_copy(update={"mounts": (bundle_mount(built),)}), "hangar-plain", config
    )
    assert "initContainers" not in plain["spec"]
