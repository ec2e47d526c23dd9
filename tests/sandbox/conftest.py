"""The conformance battery (`hangar.sandbox.conformance`) against every backend that can
run here: `test_conformance.py` takes the battery, `backend` names each backend in turn
with what `EXPECTED` says it cannot do by design."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.sandbox.conformance import expect
from tests.conftest import BASE_IMAGE, skip_or_fail
from tests.plugin_package import installed

_NO_ISOLATION = "LocalSandbox isolates nothing by design"
_UNSAFE_ON_HOST = "would run against the host itself: LocalSandbox has no isolation"

EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "docker": {},
    "local": {
        "test_exec_as_other_user": ("xfail", "LocalSandbox cannot switch users"),
        "test_network_has_only_loopback": ("xfail", _NO_ISOLATION),
        "test_host_loopback_server_unreachable": ("xfail", _NO_ISOLATION),
        "test_host_files_invisible": ("xfail", _NO_ISOLATION),
        "test_mounted_folder_is_shared": (
            "xfail",
            "LocalSandbox maps mount targets for the file API only; commands see host paths",
        ),
        "test_dns_fails": ("skip", "would resolve names through the host's real network"),
        "test_not_root_and_no_privileges": ("skip", "runs as whatever user the host runs"),
        "test_fork_bomb_hits_pids_limit": ("skip", _UNSAFE_ON_HOST),
        "test_agent_cannot_kill_the_sandbox": ("skip", _UNSAFE_ON_HOST),
        "test_ending_user_processes_leaves_nothing_of_the_user": ("skip", _UNSAFE_ON_HOST),
        "test_memory_hog_killed": ("skip", _UNSAFE_ON_HOST),
        "test_held_exec_ends_the_user_after_its_second_part": ("skip", _UNSAFE_ON_HOST),
        "test_ending_finds_what_hides_from_a_glance": ("skip", _UNSAFE_ON_HOST),
    },
    "kubernetes": {
        "test_exec_as_other_user": ("xfail", "a pod runs every command as its own user"),
        "test_not_root_and_no_privileges": ("xfail", "a pod runs every command as its own user"),
        "test_mounted_folder_is_shared": (
            "xfail",
            "a mount is copied in at start and back at stop, not shared live",
        ),
        "test_network_has_only_loopback": (
            "xfail",
            "a pod has its own interface; the NetworkPolicy cuts it off",
        ),
        "test_fork_bomb_hits_pids_limit": ("skip", "pids limits are the kubelet's, not the pod's"),
        "test_memory_hog_killed": ("xfail", "OOM kills are not read back over the exec API"),
    },
}

# A backend from an installed package (an entry point, `hangar.plugins`): the local
# backend's class under another package's name, held to the same battery.
EXPECTED["extras-local"] = EXPECTED["local"]

BACKENDS = ["local", "docker", "kubernetes", "extras-local"]


def _backend_ready(backend: str) -> None:
    if backend == "kubernetes":
        from hangar.errors import HangarError
        from hangar.sandbox.kubernetes import _api

        try:
            core, _ = _api()
            core.list_namespace(limit=1, _request_timeout=10)
        except (HangarError, Exception) as exc:
            skip_or_fail("k8s", f"no Kubernetes cluster reachable through KUBECONFIG ({exc})")
        return
    if backend == "docker":
        from hangar.errors import SandboxUnavailable
        from hangar.sandbox.docker import docker_client

        try:
            client = docker_client()
            client.images.get(BASE_IMAGE)
        except SandboxUnavailable as exc:
            skip_or_fail("docker", str(exc))
        except Exception as exc:
            skip_or_fail("docker", f"base image {BASE_IMAGE} missing ({exc}): make base-image")


@pytest.fixture(scope="module")
def extras_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An installed package with a backend of its own (`tests.plugin_package`), for this
    module's tests only: others see hangar as it ships."""
    with installed(tmp_path_factory.mktemp("site")) as site:
        yield site


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test; applies its expected failures to the current test."""
    name: str = request.param
    if name == "extras-local":
        request.getfixturevalue("extras_package")
    _backend_ready(name)
    return expect(request, name, EXPECTED[name])
