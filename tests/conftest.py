"""Shared test plumbing: which services are required, and the docker fixtures.

Infrastructure tests skip with a reason when their service is missing, except for
the services named in ``HANGAR_REQUIRE`` (comma-separated: docker, ray, postgres, s3,
prometheus, k8s), where the same condition fails the test. CI sets it, so CI can
never pass by skipping.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

BASE_IMAGE = os.environ.get("HANGAR_TEST_IMAGE", "hangar/base:bookworm")


def required_services() -> set[str]:
    """The services named in HANGAR_REQUIRE."""
    return {s.strip() for s in os.environ.get("HANGAR_REQUIRE", "").split(",") if s.strip()}


def skip_or_fail(service: str, reason: str) -> None:
    """Skip the test, or fail it when `service` is required."""
    if service in required_services():
        pytest.fail(f"{service} is required (HANGAR_REQUIRE) but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    """The docker client, with the base image present; skips (or fails) without them."""
    from hangar.errors import SandboxUnavailable
    from hangar.sandbox.docker import docker_client as client

    try:
        c = client()
    except SandboxUnavailable as exc:
        skip_or_fail("docker", f"no Docker daemon: {exc}")
    try:
        c.images.get(BASE_IMAGE)
    except Exception:
        skip_or_fail("docker", f"base image {BASE_IMAGE} missing: run `make base-image`")
    return c


@pytest.fixture
def host_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[os.PathLike[str]]:
    """A host folder outside every sandbox mount."""
    yield tmp_path_factory.mktemp("host")


from tests.services import postgres_url, ray_local, s3_endpoint  # noqa: E402

__all__ = ["postgres_url", "ray_local", "s3_endpoint"]
