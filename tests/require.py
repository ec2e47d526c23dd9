"""Which services a run requires, and skipping or failing when one is missing.

Infrastructure tests skip with a reason when their service is missing, except for
the services named in ``HANGAR_REQUIRE`` (comma-separated: docker, ray, postgres, s3,
prometheus, chromium, helm, k8s, disk: trial disks can be mounted, registry: Debian's
docker-registry, netns: network namespaces can be made, harbor: Harbor's package in
``.venv-harbor``, `make harbor`, machines: the multi-machine harness's image and wheels,
tests/machines.py), where the same condition
fails the test. CI sets it, so CI can never pass by skipping.
"""

from __future__ import annotations

import os

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
