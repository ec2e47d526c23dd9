"""The conformance battery's fixtures: one `make_sandbox` per backend.

Every test in `test_conformance.py` runs against every backend that can run here.
A backend that cannot do something by design lists the test in `EXPECTED` with the
reason: ``xfail`` (strict: if it starts passing, the list is wrong) or ``skip`` (the
test would be unsafe to run against it, e.g. a fork bomb on the host).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.sandbox import Sandbox, SandboxSpec, sandbox_class
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
        "test_killed_from_outside_raises_unavailable": ("skip", "there is no container to kill"),
        "test_held_exec_ends_the_user_after_its_second_part": ("skip", _UNSAFE_ON_HOST),
        "test_ending_finds_what_hides_from_a_glance": ("skip", _UNSAFE_ON_HOST),
        "test_held_exec_is_one_exec_on_docker": ("skip", "there is no container"),
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
        "test_killed_from_outside_raises_unavailable": ("skip", "uses the docker API"),
        "test_held_exec_is_one_exec_on_docker": ("skip", "uses the docker API"),
    },
}

# A backend from an installed package (an entry point, `hangar.plugins`): the local
# backend's class under another package's name, held to the same battery.
EXPECTED["extras-local"] = EXPECTED["local"]

BACKENDS = ["local", "docker", "kubernetes", "extras-local"]

MakeSandbox = Callable[..., Sandbox]


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
    expected = EXPECTED[name].get(request.node.originalname)
    if expected is not None:
        kind, reason = expected
        if kind == "skip":
            pytest.skip(f"{name}: {reason}")
        request.applymarker(pytest.mark.xfail(reason=f"{name}: {reason}", strict=True))
    return name


@pytest.fixture
def make_sandbox(backend: str) -> Iterator[MakeSandbox]:
    """Start sandboxes of the backend under test; all are closed after the test."""
    made: list[Sandbox] = []
    trial = f"test-{uuid.uuid4().hex[:12]}"

    def make(**overrides: Any) -> Sandbox:
        spec = SandboxSpec(image=BASE_IMAGE, sweep="conformance", trial=trial, **overrides)
        sandbox = sandbox_class(backend)(spec)
        made.append(sandbox)
        sandbox.start()
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()
    if backend == "docker":
        from hangar.sandbox.docker import docker_client

        left = docker_client().containers.list(
            all=True, ignore_removed=True, filters={"label": f"hangar.trial={trial}"}
        )
        assert not left, f"containers left behind: {[c.id for c in left]}"


@pytest.fixture
def sandbox(make_sandbox: MakeSandbox) -> Sandbox:
    """One started sandbox with the default spec."""
    return make_sandbox()
