"""What only the docker backend can show: the container's settings and its cleanup."""

from __future__ import annotations

import http.client
import tarfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker
import pytest

from hangar.errors import ImageNotFound, SandboxError, SandboxUnavailable
from hangar.sandbox import Mount, SandboxLimits, SandboxSpec
from hangar.sandbox.config import DockerConfig
from hangar.sandbox.docker import DockerSandbox
from tests.conftest import BASE_IMAGE

pytestmark = pytest.mark.docker


def _ours(client: docker.DockerClient, trial: str) -> list[object]:
    return client.containers.list(
        all=True, ignore_removed=True, filters={"label": f"hangar.trial={trial}"}
    )


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
    mounts = [(m["Target"], m["ReadOnly"]) for m in host["Mounts"]]
    assert mounts == [("/run/hangar/lease", True), ("/run/hangar/helper", True), ("/trial", True)]
    # the keeper, hangar's helper as a user of its own; commands run as the sandbox user
    assert config["User"] == "65533:65533"
    assert config["Cmd"][:2] == ["/run/hangar/helper", "keeper"]
    labels = config["Labels"]
    assert labels["hangar.managed"] == "true"
    assert (labels["hangar.sweep"], labels["hangar.trial"]) == ("sw-1", "settings-check")
    expires = datetime.strptime(labels["hangar.expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(expires - (datetime.now(UTC) + timedelta(seconds=600))) < timedelta(seconds=60)
    assert "HOME=/home/agent" in config["Env"]
    assert not _ours(docker_client, "settings-check"), "close() left the container"


def test_read_only_root_leaves_only_mounts_writable(tmp_path: Path) -> None:
    scratch = tmp_path / "home"
    scratch.mkdir()
    spec = SandboxSpec(
        image=BASE_IMAGE,
        read_only_root=True,
        mounts=(Mount(source=scratch, target="/home/agent"),),
        trial="read-only-root",
    )
    with DockerSandbox(spec) as sb:
        sb.exec(["chmod", "777", "/home/agent"], user="root")
        assert sb.exec("echo hi > /home/agent/ok").ok
        assert sb.exec("echo hi > /workspace/no").returncode != 0
        res = sb.exec("echo hi > /etc/no", user="root")  # root owns /etc: only ro stops it
        assert res.returncode != 0 and "Read-only file system" in res.stderr
        sb.write_file("/home/agent/.hangar/task.md", "the task")  # the archive API too
    assert (scratch / "ok").read_text() == "hi\n"
    assert (scratch / ".hangar" / "task.md").read_text() == "the task"


def test_image_folder_is_read_once_and_cached(tmp_path: Path) -> None:
    archive = DockerSandbox.image_folder(BASE_IMAGE, "/home/agent", tmp_path)
    assert archive is not None
    with tarfile.open(archive) as tar:
        assert "agent/.bashrc" in tar.getnames()
    again = DockerSandbox.image_folder(BASE_IMAGE, "/home/agent", tmp_path)
    assert again == archive and again.stat().st_mtime_ns == archive.stat().st_mtime_ns
    assert DockerSandbox.image_folder(BASE_IMAGE, "/no/such/folder", tmp_path) is None
    with pytest.raises(ImageNotFound, match="hangar image build-base"):
        DockerSandbox.image_folder("hangar/does-not-exist:1", "/home/agent", tmp_path)


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


def test_output_that_comes_with_the_response_headers_is_kept(
    docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A busy client reads the exec's response headers only after a quick command has
    # written: its first frames arrive with the headers, in the HTTP reader's buffer. On
    # a loaded machine this lost a knowledge trial's `python3 --version` (an empty
    # stdout with exit 0). Here the client is made slow on purpose.
    with DockerSandbox(SandboxSpec(image=BASE_IMAGE, trial="quick-output")) as sb:
        begin = http.client.HTTPResponse.begin

        def late(response: http.client.HTTPResponse) -> None:
            time.sleep(0.5)
            begin(response)

        monkeypatch.setattr(http.client.HTTPResponse, "begin", late)
        res = sb.exec("echo out; echo err >&2", timeout=30)
        stream = sb.open_stream(["/bin/sh", "-c", "echo ready"])
        first = stream.recv()
        stream.close()
    assert (res.returncode, res.stdout, res.stderr) == (0, "out\n", "err\n")
    assert first == b"ready\n"


def test_close_after_container_vanished(docker_client: docker.DockerClient) -> None:
    sb = DockerSandbox(SandboxSpec(image=BASE_IMAGE, trial="vanished"))
    sb.start()
    docker_client.api.remove_container(sb.container_id, force=True)
    sb.close()  # nothing left to remove: no error
    assert not _ours(docker_client, "vanished")


def test_backend_settings_reach_the_container(docker_client: docker.DockerClient) -> None:
    """A sweep's `backend: {kind: docker, runtime: ..., labels: ...}`: the runtime and the
    labels are the container's; hangar's own labels cannot be displaced."""
    config = DockerConfig(runtime="runc", labels={"team": "evals", "cost-centre": "42"})
    spec = SandboxSpec(image=BASE_IMAGE, trial="configured")
    with DockerSandbox(spec, config=config) as sb:
        attrs = docker_client.api.inspect_container(sb.container_id)
    assert attrs["HostConfig"]["Runtime"] == "runc"
    labels = attrs["Config"]["Labels"]
    assert labels["team"] == "evals" and labels["cost-centre"] == "42"
    assert labels["hangar.trial"] == "configured"


def test_a_runtime_the_engine_lacks_is_named(docker_client: docker.DockerClient) -> None:
    spec = SandboxSpec(image=BASE_IMAGE, trial="no-runtime")
    box = DockerSandbox(spec, config=DockerConfig(runtime="hangar-no-such-runtime"))
    with pytest.raises(SandboxUnavailable, match="no runtime 'hangar-no-such-runtime'") as e:
        box.start()
    assert "docker info" in str(e.value)
    assert not _ours(docker_client, "no-runtime")


def test_timed_commands_are_found_in_the_path_the_container_was_given() -> None:
    """The helper's ``timeout`` reads no environment: the backend hands it the PATH the
    container was created with (or the command's own), and it looks nowhere else."""
    spec = SandboxSpec(
        image=BASE_IMAGE,
        sweep="sw-1",
        trial="path-check",
        env={"PATH": "/tmp/tools/bin:/usr/bin:/bin"},
    )
    with DockerSandbox(spec) as sb:
        assert sb.exec(["mkdir", "-p", "/tmp/other"], timeout=10).ok
        sb.write_file("/tmp/tools/bin/tool", "#!/bin/sh\necho tool\n", mode=0o755)
        sb.write_file("/tmp/other/tool", "#!/bin/sh\necho other\n", mode=0o755)
        assert sb.exec(["tool"], timeout=10).stdout == "tool\n"
        assert sb.exec(["tool"], timeout=10, env={"PATH": "/tmp/other"}).stdout == "other\n"
        assert sb.exec(["no-such-tool"], timeout=10).returncode == 127
