"""What only the docker backend can show: the container's settings and its cleanup."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker
import pytest

from hangar.errors import ImageNotFound, SandboxError
from hangar.sandbox import Mount, SandboxLimits, SandboxSpec
from hangar.sandbox.docker import DockerSandbox
from tests.conftest import BASE_IMAGE

pytestmark = pytest.mark.docker


def _ours(client: docker.DockerClient, trial: str) -> list[object]:
    return client.containers.list(all=True, filters={"label": f"hangar.trial={trial}"})


def test_container_settings(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    spec = SandboxSpec(
        image=BASE_IMAGE,
        sweep="sw-1",
        trial="settings-check",
        ttl_s=600,
        limits=SandboxLimits(cpus=0.5, memory="256m", pids=100),
        mounts=(Mount(source=tmp_path, target="/trial", read_only=True),),
    )
    with DockerSandbox(spec) as sb:
        attrs = docker_client.api.inspect_container(sb.container_id)
    host, config = attrs["HostConfig"], attrs["Config"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidsLimit"] == 100
    assert host["Memory"] == host["MemorySwap"] == 256 * 1024 * 1024
    assert host["NanoCpus"] == 500_000_000
    assert host["Init"] is True and host["Privileged"] is False
    assert [(m["Target"], m["ReadOnly"]) for m in host["Mounts"]] == [("/trial", True)]
    assert config["User"] == "0"  # the keeper; commands run as the sandbox user
    labels = config["Labels"]
    assert labels["hangar.managed"] == "true"
    assert (labels["hangar.sweep"], labels["hangar.trial"]) == ("sw-1", "settings-check")
    expires = datetime.strptime(labels["hangar.expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(expires - (datetime.now(UTC) + timedelta(seconds=600))) < timedelta(seconds=60)
    assert "HOME=/home/agent" in config["Env"]
    assert not _ours(docker_client, "settings-check"), "close() left the container"


def test_missing_image_is_a_clear_error(docker_client: docker.DockerClient) -> None:
    spec = SandboxSpec(image="hangar/does-not-exist:1", trial="missing-image")
    with pytest.raises(ImageNotFound, match="hangar image build-base"), DockerSandbox(spec):
        pass
    assert not _ours(docker_client, "missing-image")


def test_failed_start_leaves_nothing(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    spec = SandboxSpec(
        image=BASE_IMAGE,
        trial="bad-mount",
        mounts=(Mount(source=tmp_path / "absent", target="/trial"),),
    )
    with pytest.raises(SandboxError, match="does not exist"), DockerSandbox(spec):
        pass
    assert not _ours(docker_client, "bad-mount")


def test_silent_command_outlives_client_timeout(docker_client: docker.DockerClient) -> None:
    # A client whose read timeout is shorter than the command's silence.
    impatient = docker.from_env(version="auto", timeout=2)
    with DockerSandbox(SandboxSpec(image=BASE_IMAGE, trial="silent"), client=impatient) as sb:
        res = sb.exec("sleep 4; echo done", timeout=30)
    assert res.ok and res.stdout == "done\n"


def test_close_after_container_vanished(docker_client: docker.DockerClient) -> None:
    sb = DockerSandbox(SandboxSpec(image=BASE_IMAGE, trial="vanished"))
    sb.start()
    docker_client.api.remove_container(sb.container_id, force=True)
    sb.close()  # nothing left to remove: no error
    assert not _ours(docker_client, "vanished")
