"""A container's changes read from its overlay layer are the engine's own listing."""

from __future__ import annotations

import pytest

from hangar.sandbox import SandboxSpec
from hangar.sandbox.docker import DockerSandbox

pytestmark = pytest.mark.docker

CHANGES = (
    "echo x > /etc/newfile && rm /etc/issue && echo y >> /etc/hostname.tmp && "
    "mkdir -p /opt/a/b && touch /opt/a/b/c && echo z >> /etc/passwd && "
    "ln -s /etc/passwd /opt/link && rm -rf /usr/share/doc/bash && "
    "touch \"$(printf '/tmp/bad-\\377-name')\" && mkfifo /tmp/fifo && "
    "mkdir /usr/share/doc/bash && touch /usr/share/doc/bash/new"
)


def test_the_layer_reads_as_the_engine_lists(docker_client: object) -> None:
    spec = SandboxSpec(image="hangar/base:bookworm", user="root", home="/root", workdir="/tmp")
    with DockerSandbox(spec) as box:
        assert box.exec(["bash", "-c", CHANGES]).ok
        box.stop()
        engine = {(c.kind, c.path) for c in box.engine_changes()}
        layer = {(c.kind, c.path) for c in box.changes()}
    assert ("A", "/tmp/bad-\ufffd-name") in engine
    assert ("D", "/etc/issue") in engine and ("C", "/etc/passwd") in engine
    assert layer == engine, (sorted(layer - engine), sorted(engine - layer))
