"""A folder copied out of a pod is written by hangar's helper, never by the image's tools.

With no cluster here, each part is run for real where it can be: the helper's image is
pushed to a real registry (Debian's docker-registry on loopback) and its own busybox
copies the helper into a volume, as the pod's init container does; the pod that mounts
it validates against the Kubernetes schema; and the backend's copy-out runs the copied
helper against a folder whose `sh`, `env`, `tar` and `base64` an agent replaced.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import docker
import pytest

from hangar.errors import SandboxError
from hangar.sandbox import SandboxSpec
from hangar.sandbox.base import ExecStream
from hangar.sandbox.bundle_images import COPY_COMMAND, helper_mount
from hangar.sandbox.config import KubernetesConfig
from hangar.sandbox.helper import POD_FOLDER, POD_PATH
from hangar.sandbox.kubernetes import KubernetesSandbox, pod_manifest

pytestmark = pytest.mark.docker


class _Local(ExecStream):
    """The exec API's stream, with the command run on this machine (the pod's end)."""

    def __init__(self, argv: list[str], helper: Path) -> None:
        super().__init__()
        assert argv[0] == POD_PATH, argv  # hangar's helper by absolute path, nothing else
        self.proc = subprocess.run([str(helper), *argv[1:]], capture_output=True, timeout=60)
        self.out = [self.proc.stdout[i : i + 4096] for i in range(0, len(self.proc.stdout), 4096)]
        self.errors.write(self.proc.stderr)

    def recv(self) -> bytes:
        return self.out.pop(0) if self.out else b""

    def send(self, data: bytes) -> None:
        raise AssertionError("nothing is sent")

    def close(self) -> None:
        pass

    def exit_code(self) -> int | None:
        return self.proc.returncode


@pytest.fixture
def copied_helper(
    registry: str, docker_client: docker.DockerClient, tmp_path: Path
) -> tuple[str, Path]:
    """(the helper's image in the registry, the helper as the init container copied it)."""
    mount = helper_mount(registry)
    assert mount.target == POD_FOLDER and mount.read_only and mount.image
    volume = tmp_path / "volume"
    volume.mkdir()
    docker_client.containers.run(
        mount.image,
        [*COPY_COMMAND, "/volume"],
        volumes={str(volume): {"bind": "/volume", "mode": "rw"}},
        network_mode="none",
        remove=True,
    )
    helper = volume / "hangar-helper"
    assert helper.is_file()
    assert helper_mount(registry).image == mount.image  # pushed once, then found
    return mount.image, helper


def test_a_pod_gets_the_helper_from_its_image(copied_helper: tuple[str, Path]) -> None:
    from tests.cluster.test_k8s import k8s_validate

    image, _ = copied_helper
    registry = image.split("/hangar-bundle/")[0]
    spec = SandboxSpec(image="task:1", sweep="s", trial="ab" * 32, mounts=(helper_mount(registry),))
    pod = pod_manifest(spec, "hangar-helper-pod", KubernetesConfig(namespace="sb"))
    k8s_validate(pod)
    (init,) = pod["spec"]["initContainers"]
    assert init["image"] == image and init["command"] == [*COPY_COMMAND, POD_FOLDER]
    (sandbox,) = pod["spec"]["containers"]
    (mounted,) = [m for m in sandbox["volumeMounts"] if m["mountPath"] == POD_FOLDER]
    assert mounted["readOnly"] is True


def test_copy_out_runs_only_the_helper_however_the_image_was_changed(
    copied_helper: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image, helper = copied_helper
    registry = image.split("/hangar-bundle/")[0]
    workspace = tmp_path / "pod" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "fix.py").write_text("print('fixed')\n")
    (workspace / "secret").symlink_to("/etc/shadow")  # a link out: left behind
    tools = tmp_path / "pod" / "bin"  # what a root agent leaves for the image's copy-out
    tools.mkdir()
    for name in ("sh", "env", "tar", "base64"):
        (tools / name).write_text("#!/bin/sh\necho forged\n")
        (tools / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")

    spec = SandboxSpec(image="task:1", sweep="s", trial="cd" * 32, mounts=(helper_mount(registry),))
    box = KubernetesSandbox(spec)
    monkeypatch.setattr(box, "resolve", lambda path: str(workspace))
    monkeypatch.setattr(
        box, "open_stream", lambda argv, user=None: _Local(argv, helper)
    )  # the exec API
    skipped: list[str] = []
    box._copy_out("/workspace", tmp_path / "out", skipped)
    assert (tmp_path / "out" / "fix.py").read_text() == "print('fixed')\n"
    assert not (tmp_path / "out" / "secret").exists()
    assert [s.split(":")[0] for s in skipped] == ["secret"]

    # without the helper in the pod (no registry), nothing is copied with the image's tools
    bare = KubernetesSandbox(spec.model_copy(update={"mounts": ()}))
    with pytest.raises(SandboxError, match="registry"):
        bare.copy_out("/workspace", tmp_path / "none")
    assert not (tmp_path / "none").exists()
