"""Shared test plumbing: the docker fixtures and the service fixtures (tests/services.py).

See tests/require.py for how HANGAR_REQUIRE turns a skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.require import BASE_IMAGE, required_services, skip_or_fail
from tests.services import postgres_url, ray_cluster, ray_local, registry, s3_endpoint

# One trial of a private copy of the example scenario (`run`, `scenario_dir`, `cache_root`).
pytest_plugins = ["tests.trialkit"]

# Credentials for the local S3 server, set before any Ray worker starts: workers keep the
# environment they were started with. They are fake, and only ever sent to loopback.
for _name, _value in (
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
    ("HANGAR_SCRIPTED_KEY", "scripted"),  # the scripted model's fake key, sent to loopback only
):
    os.environ.setdefault(_name, _value)
# `hangar run` keeps a warm local Ray head by default; tests start their own Ray (or an
# embedded one per run), and the warm head's own test turns it on with a cache of its own.
os.environ.setdefault("HANGAR_WARM_HEAD", "0")


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


__all__ = [
    "BASE_IMAGE",
    "postgres_url",
    "ray_cluster",
    "ray_local",
    "registry",
    "required_services",
    "s3_endpoint",
    "skip_or_fail",
]
