"""Agent CLIs as bundles: built once per node, self-contained, run in any x86-64 image.

Each bundle is checked in an image with no C library of its own but busybox (a stand-in
for Alpine, whose musl is not glibc) and in hangar's base image; an image without
``/bin/sh`` is refused before any model call, with the reason, and the answer is kept.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from hangar.agents import parse_agent
from hangar.models import ModelSpec
from hangar.results import Verdict
from hangar.sandbox import SandboxSpec
from hangar.sandbox.bundles import (
    AGENT_CLIS,
    LOADER,
    MOUNT,
    bundle_id,
    bundle_problem,
    bundles_dir,
    ensure_bundle,
    patchelf,
)
from hangar.testing.scripted import ScriptedServer
from tests.models.cli_agents import bundle_or_skip, fix_the_example, in_bundle
from tests.require import BASE_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NO_LIBC = "hangar-test/no-libc:1"
NO_SH = "hangar-test/no-sh:1"


def _image(tag: str, files: dict[str, Path], links: dict[str, str], tmp: Path) -> str:
    """An image of just `files` (and links), imported with docker (no registry)."""
    root = tmp / tag.replace("/", "_")
    for target, source in files.items():
        (root / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, root / target)
    for link, target in links.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)
    for folder in ("tmp", "root", "app", "workspace", "home/agent"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "passwd").write_text(
        "root:x:0:0::/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n"
    )
    (root / "etc" / "group").write_text("root:x:0:\nagent:x:1000:\n")
    (root / "tmp").chmod(0o1777)
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        ["docker", "import", "-c", "ENV PATH=/bin", "-c", "WORKDIR /app", "-", tag],
        stdin=tar.stdout, check=True, capture_output=True,
    )  # fmt: skip
    return tag


@pytest.fixture(scope="module")
def images(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Two images made here: busybox with no C library (Alpine's shape, no glibc), and
    one with no /bin/sh."""
    from hangar.sandbox.debian import runtime_root
    from hangar.sandbox.helper import helper_binary

    busybox = runtime_root("bookworm", ("busybox-static",)) / "bin" / "busybox"
    tmp = tmp_path_factory.mktemp("images")
    applets = ("sh", "ls", "cat", "echo", "id", "mkdir", "env", "sleep", "rm")
    bash = tmp / "bash"  # busybox's shell under bash's name (command agents run bash -c)
    bash.write_text('#!/bin/sh\nexec /bin/sh "$@"\n')
    bash.chmod(0o755)
    files = {"bin/busybox": busybox, "bin/bash": bash}
    _image(NO_LIBC, files, {f"bin/{a}": "busybox" for a in applets}, tmp)
    _image(NO_SH, {"bin/hangar-helper": helper_binary()}, {}, tmp)
    yield {"no-libc": NO_LIBC, "no-sh": NO_SH}
    for tag in (NO_LIBC, NO_SH):
        docker_client.images.remove(tag, force=True)


def test_a_bundle_is_self_contained_and_built_once() -> None:
    bundle = bundle_or_skip("gemini")
    assert ensure_bundle("gemini") == bundle  # the second call finds it
    manifest = json.loads((bundle.folder / "manifest.json").read_text())
    assert manifest["pins"] == list(AGENT_CLIS["gemini"].pins)
    assert manifest["digest"] == bundle.digest == AGENT_CLIS["gemini"].digest()
    assert any(deb.startswith("libc6_") for deb in manifest["debian"])
    assert bundle_id("gemini") == f"gemini@{bundle.digest[:16]}"
    launcher = (bundle.folder / "bin" / "gemini").read_text()
    assert f"B={MOUNT}" in launcher and "LD_LIBRARY_PATH" not in launcher
    node = bundle.folder / "node" / "bin" / "node"
    interpreter = subprocess.run(
        [patchelf(), "--print-interpreter", str(node)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert interpreter == LOADER  # the bundle's own loader, whatever the image's
    assert (bundle.folder / "lib" / "ld-linux-x86-64.so.2").is_file()


@pytest.mark.parametrize(
    ("name", "command", "said"),
    [
        ("codex", "codex --version", "codex-cli 0.171.0"),
        ("gemini", "gemini --version", "0.61.0"),
        ("claude", "claude --version", "2.1.332 (Claude Code)"),
        ("mini-swe-agent", "MSWEA_SILENT_STARTUP=1 mini --help", "--task"),
    ],
)
def test_a_bundle_runs_in_an_image_without_glibc(
    images: dict[str, str], name: str, command: str, said: str
) -> None:
    res = in_bundle(name, f"HOME=/tmp {command}", images["no-libc"])
    assert res.returncode == 0 and said in res.stdout, res
    ldd = in_bundle(name, "ls /lib /lib64 /usr/lib 2>&1", images["no-libc"])
    assert "libc.so" not in ldd.stdout  # the image itself has no C library


def test_an_image_without_a_shell_is_refused_with_the_reason_once(images: dict[str, str]) -> None:
    bundle = bundle_or_skip("codex")
    spec = SandboxSpec(image=images["no-sh"], user="0", home="/root", workdir="/app")
    for kept in (bundles_dir() / "checks").glob("*.json"):
        if json.loads(kept.read_text())["image"] == images["no-sh"]:
            kept.unlink()
    problem = bundle_problem(bundle, spec, "docker", None)
    assert f"does not run in image {images['no-sh']!r}" in problem and "/bin/sh" in problem
    kept = [
        json.loads(p.read_text())
        for p in (bundles_dir() / "checks").glob("*.json")
        if json.loads(p.read_text())["image"] == images["no-sh"]
    ]
    assert [k["problem"] for k in kept] == [problem]  # kept for the next trial on this node
    assert bundle_problem(bundle, spec, "docker", None) == problem
    ok = SandboxSpec(image=BASE_IMAGE)
    assert bundle_problem(bundle, ok, "docker", None) == ""


def test_a_trial_in_an_image_its_bundle_cannot_run_in_is_blocked_before_any_call(
    images: dict[str, str],
    scripted_server: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle_or_skip("codex")
    monkeypatch.setenv("HANGAR_TEST_CODEX_KEY", "sk-codex-test")
    model = ModelSpec(
        id="scripted-codex",
        provider="openai",
        base_url=f"{scripted_server.url}/v1",
        api_key_env="HANGAR_TEST_CODEX_KEY",
    )
    result = fix_the_example(images["no-sh"], "codex", model, tmp_path)
    assert result.verdict is Verdict.BLOCKED_SETUP
    assert "bundle does not run in image" in result.reason and "/bin/sh" in result.reason
    assert scripted_server.requests == []  # no model was paid
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        assert "agent/bundle.json" in tar.getnames()


def test_the_agents_digest_includes_its_bundle() -> None:
    agent = parse_agent("codex", {"preset": "codex"}, "test")
    assert agent.settings()["bundle"] == bundle_id("codex")  # type: ignore[union-attr]
    other = agent.model_copy(update={"bundle": "codex@0000000000000000"})
    assert other.digest() != agent.digest()
