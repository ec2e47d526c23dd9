"""Images: the offline base image is cached; Dockerfiles build offline from local images."""

from __future__ import annotations

import uuid
from pathlib import Path

import docker
import pytest
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import ImageBuildError
from hangar.sandbox import SandboxSpec
from hangar.sandbox.docker import DockerSandbox
from hangar.sandbox.images import (
    BaseImageRecipe,
    build_dockerfile_image,
    debian_mirror,
    find_base_image,
)
from tests.conftest import BASE_IMAGE

runner = CliRunner()


def test_recipe_digest_tracks_inputs() -> None:
    base = BaseImageRecipe(mirror="http://mirror.invalid/debian")
    assert base.digest() == BaseImageRecipe(mirror="http://mirror.invalid/debian").digest()
    # Where the packages come from is not what they are.
    assert base.digest() == BaseImageRecipe(mirror="http://other.invalid/debian").digest()
    assert base.digest() != base.model_copy(update={"extra_packages": ("jq",)}).digest()
    assert base.digest() != base.model_copy(update={"uid": 1001}).digest()


def test_mirror_defaults_to_the_machines_apt_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without $HANGAR_DEBIAN_MIRROR, debootstrap uses what apt-get uses for the suite."""
    fake = tmp_path / "apt-get"
    fake.write_text(
        "#!/bin/sh\n"
        'test "$1" = indextargets || exit 3\n'
        "echo 'http://security.mirror.invalid/debian-security/ bookworm-security Packages'\n"
        "echo 'http://apt.mirror.invalid/debian/ bookworm Translations'\n"
        "echo 'http://apt.mirror.invalid/debian/ bookworm Packages'\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("HANGAR_DEBIAN_MIRROR", raising=False)
    assert debian_mirror("bookworm") == "http://apt.mirror.invalid/debian"
    assert BaseImageRecipe().source() == "http://apt.mirror.invalid/debian"
    assert debian_mirror("trixie") == "http://deb.debian.org/debian"  # apt has no such suite
    monkeypatch.setenv("HANGAR_DEBIAN_MIRROR", "http://chosen.invalid/debian")
    assert debian_mirror("bookworm") == "http://chosen.invalid/debian"
    assert BaseImageRecipe(mirror="http://flag.invalid/debian").source() == (
        "http://flag.invalid/debian"
    )


@pytest.mark.docker
def test_base_image_is_cached(docker_client: docker.DockerClient) -> None:
    if find_base_image(BASE_IMAGE, BaseImageRecipe()) is None:
        pytest.skip(f"{BASE_IMAGE} was not built by this recipe (HANGAR_TEST_IMAGE is custom)")
    result = runner.invoke(app, ["image", "build-base", "--tag", BASE_IMAGE])
    assert (
        result.exit_code == 0 and "up to date" in result.stdout and "nothing to do" in result.stdout
    )


@pytest.mark.docker
def test_base_image_contents(docker_client: docker.DockerClient) -> None:
    with DockerSandbox(SandboxSpec(image=BASE_IMAGE, trial="base-contents")) as sb:
        res = sb.exec(
            "id -un; id -u; echo $HOME; pwd; git --version >/dev/null && python3 -c 'print(1)' "
            "&& bash -c 'echo bash' && test -d /etc/ssl/certs && echo certs; "
            "find / -xdev -perm /6000 -type f 2>/dev/null | wc -l"
        )
    assert res.stdout.split() == [
        "agent",
        "1000",
        "/home/agent",
        "/workspace",
        "1",
        "bash",
        "certs",
        "0",
    ], res.stdout + res.stderr


@pytest.mark.docker
def test_dockerfile_from_local_image_builds_offline(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    tag = f"hangar-test/custom:{uuid.uuid4().hex[:8]}"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nUSER root\nRUN echo built-offline > /etc/custom-marker\nUSER agent\n"
    )
    try:
        result = runner.invoke(app, ["image", "build", str(tmp_path), "--tag", tag])
        assert result.exit_code == 0, result.output
        with DockerSandbox(SandboxSpec(image=tag, trial="custom-image")) as sb:
            assert sb.exec(["cat", "/etc/custom-marker"]).stdout == "built-offline\n"
    finally:
        docker_client.images.remove(tag, force=True)


@pytest.mark.docker
def test_failing_dockerfile_is_a_clear_error(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN exit 7\n")
    with pytest.raises(ImageBuildError, match="failed"):
        build_dockerfile_image(tmp_path, f"hangar-test/broken:{uuid.uuid4().hex[:8]}")
    with pytest.raises(ImageBuildError, match="no Dockerfile"):
        build_dockerfile_image(tmp_path / "nowhere", "hangar-test/x:1")
