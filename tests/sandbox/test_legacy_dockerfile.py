"""BuildKit's heredocs and flags rewritten for the engine's legacy builder: the rewrite
itself, and a task whose Dockerfile uses them built and validated on real docker."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import docker
import pytest

from hangar.errors import ImageBuildError
from hangar.sandbox.legacy_dockerfile import for_legacy_builder

DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"

HEREDOCS = textwrap.dedent(
    """\
    FROM ubuntu:24.04
    WORKDIR /app
    RUN <<EOF
    set -e
    echo "first $((1 + 1))" > /app/one.txt
    mkdir -p /app/deep
    EOF
    RUN --mount=type=cache,target=/root/.cache cat <<-'DONE' > /app/two.txt
    \tkept $HOME literally
    \tDONE
    COPY <<EOF /app/conf/three.txt
    line 1
      line 2
    EOF
    RUN <<EOF
    #!/usr/bin/env python3
    open("/app/four.txt", "w").write("from python\\n")
    EOF
    COPY --link <<EOF /app/
    five
    EOF
    RUN echo 'not a <<heredoc'
    """
)


def test_plain_dockerfiles_are_left_alone() -> None:
    text = "FROM debian:12\nRUN apt-get update && \\\n    apt-get install -y curl\n"
    assert for_legacy_builder(text) == text


@pytest.mark.parametrize(
    ("line", "feature"),
    [
        ("RUN --mount=type=secret,id=key cat /run/secrets/key", "RUN --mount=type=secret"),
        ("RUN --mount=target=/src make", "RUN --mount=type=bind"),
        ("RUN --network=none make", "RUN --network"),
        ("COPY --chmod=755 run.sh /run.sh", "COPY --chmod"),
        ("ADD --checksum=sha256:00 https://x/y /y", "ADD --checksum"),
    ],
)
def test_what_has_no_rewrite_is_named(line: str, feature: str) -> None:
    with pytest.raises(ImageBuildError, match=rf"BuildKit's {feature} \(line 2\)"):
        for_legacy_builder(f"FROM debian:12\n{line}\n")


def test_a_heredoc_task_builds_and_validates(
    docker_client: docker.DockerClient, ray_local: None, tmp_path: Path
) -> None:
    """Heredocs in RUN (the shell's, a command's stdin with <<-, a #! script) and COPY, a
    cache mount and --link: the image holds what BuildKit would make, and `hangar dataset
    validate` finds the task valid (the oracle passes, nop fails)."""
    from typer.testing import CliRunner

    from hangar.cli import app

    task = tmp_path / "dataset" / "heredocs"
    shutil.copytree(DATASET / "hello-file", task)
    (task / "environment" / "Dockerfile").write_text(HEREDOCS)
    (task / "tests" / "test.sh").write_text(
        textwrap.dedent(
            """\
            #!/bin/bash
            ok=1
            [ "$(cat /app/one.txt)" = "first 2" ] || ok=0
            [ -d /app/deep ] || ok=0
            [ "$(cat /app/two.txt)" = 'kept $HOME literally' ] || ok=0
            [ "$(cat /app/conf/three.txt)" = "$(printf 'line 1\\n  line 2')" ] || ok=0
            [ "$(cat /app/four.txt)" = "from python" ] || ok=0
            [ "$(cat /app/EOF)" = "five" ] || ok=0
            [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ] || ok=0
            echo $ok > /logs/verifier/reward.txt
            """
        )
    )
    stock = "hangar/base:bookworm-stock"
    cli = CliRunner()
    out = cli.invoke(
        app,
        [
            "dataset", "validate", str(tmp_path / "dataset"), "--image-map", f"ubuntu:*={stock}",
            "--store", f"sqlite:///{tmp_path}/runs.db",
        ],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "1 valid, 0 broken" in out.output
