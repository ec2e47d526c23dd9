"""A sweep's preflight: every node is checked for what its trials will need there before
any trial starts; a node that lacks something stops the sweep with one error naming it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import docker
import pytest
import yaml

from hangar.sandbox.config import DockerConfig
from hangar.scheduler.preflight import Needs, check_node
from hangar.store import ResultsStore
from tests.conftest import BASE_IMAGE
from tests.services import RayCluster

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny" / "scenario.yaml"
HANGAR = str(Path(sys.executable).parent / "hangar")

#: No credentials anywhere boto3 looks, and never the instance metadata address.
NO_AWS = {
    "AWS_ACCESS_KEY_ID": None,
    "AWS_SECRET_ACCESS_KEY": None,
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/config",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def without_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # its credentials are cached
    for name, value in NO_AWS.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


@pytest.mark.docker
def test_a_ready_node_passes(tmp_path: Path, docker_client: docker.DockerClient) -> None:
    needs = Needs(
        backend=DockerConfig(),
        images=[BASE_IMAGE],
        evidence_url=(tmp_path / "ev").as_uri(),
        key_envs=["PATH"],
    )
    report = check_node(needs, "here/abc")
    assert report.problems == []
    assert (tmp_path / "ev" / "_preflight" / "here-abc.txt").read_text() == (
        "hangar preflight from here/abc\n"
    )


@pytest.mark.docker
@pytest.mark.s3
def test_each_missing_thing_is_named_with_its_fix(
    tmp_path: Path,
    s3_endpoint: str,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without_aws(monkeypatch)
    monkeypatch.delenv("HANGAR_PF_KEY", raising=False)
    needs = Needs(
        backend=DockerConfig(runtime="hangar-no-such-runtime"),
        images=[BASE_IMAGE],
        evidence_url=f"s3://hangar-test/pf?endpoint={s3_endpoint}",
        key_envs=["HANGAR_PF_KEY"],
    )
    problems = check_node(needs, "here/abc").problems
    assert len(problems) == 3, problems
    engine, evidence, key = problems
    assert "no runtime 'hangar-no-such-runtime'" in engine and "runc" in engine
    assert "refused a write or read" in evidence and "Unable to locate credentials" in evidence
    assert "hangar cluster join" in evidence
    assert key.startswith("HANGAR_PF_KEY is not set on this node")
    missing = check_node(
        needs.model_copy(
            update={"backend": DockerConfig(), "key_envs": [], "images": ["hangar/absent:1"]}
        ),
        "x/y",
    )
    assert not any("absent" in p for p in missing.problems)  # it blocks only its scenarios
    assert (
        "image 'hangar/absent:1' is not on the Docker engine" in missing.images["hangar/absent:1"]
    )


@pytest.mark.ray
@pytest.mark.s3
@pytest.mark.slow
def test_nodes_without_credentials_stop_the_sweep_before_any_trial(
    tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case a new user met: nodes started without S3 credentials and without the model
    key. Before, every trial ran to the end and was recorded as an infra_error."""
    log = tmp_path / "agent.log"
    path = tmp_path / "sweep.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "id": "preflight",
                "scenarios": [str(TINY)],
                "backend": "local",
                "repeats": 6,
                "agents": {"ok": {"command": f"echo ran >> {log}"}},
                "models": [{"id": "m", "provider": "openai", "api_key_env": "HANGAR_PF_KEY"}],
                "store": f"sqlite:///{tmp_path}/r.db",
                "evidence": "s3://hangar-test/preflight",
                "evidence_endpoint": s3_endpoint,
            }
        )
    )
    driver_env = {**os.environ, "HANGAR_PF_KEY": "sk-driver-only"}
    with monkeypatch.context() as m:  # the nodes start without credentials or the key
        without_aws(m)
        m.delenv("HANGAR_PF_KEY", raising=False)
        cluster = RayCluster(Path(tempfile.mkdtemp(prefix="hpf-")))
        cluster.start()
    try:
        proc = subprocess.run(
            [HANGAR, "run", str(path), "--address", cluster.address],
            capture_output=True,
            text=True,
            timeout=300,
            env=driver_env,
        )
    finally:
        cluster.stop()
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert "preflight failed on 2 of 2 node(s); no trial was started" in err, err[-3000:]
    assert err.count("Unable to locate credentials") == 2
    assert err.count("HANGAR_PF_KEY is not set on this node") == 2
    assert "sk-driver-only" not in err and "Traceback" not in err
    assert not log.exists(), "an agent ran"
    assert list(ResultsStore(f"sqlite:///{tmp_path}/r.db").results("preflight")) == []


@pytest.mark.ray
@pytest.mark.docker
@pytest.mark.slow
def test_a_missing_image_blocks_only_the_scenarios_that_use_it(
    ray_local: None, docker_client: object, tmp_path: Path
) -> None:
    from hangar.results import Verdict
    from hangar.scheduler.driver import SweepRunner
    from hangar.scheduler.sweep import load_sweep
    from hangar.store import ResultsStore

    scenario = yaml.safe_load(TINY.read_text())
    scenario["repository"] = str((TINY.parent / scenario["repository"]).resolve())
    scenario.pop("plugins")
    for name, image in (("present", BASE_IMAGE), ("absent", "hangar/absent:1")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "scenario.yaml").write_text(
            yaml.safe_dump({**scenario, "id": name, "image": image})
        )
    path = tmp_path / "sweep.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "id": "images",
                "scenarios": [str(tmp_path / "present"), str(tmp_path / "absent")],
                "agents": {"ok": {"command": "true"}},
                "repeats": 2,
                "store": f"sqlite:///{tmp_path}/r.db",
                "evidence": (tmp_path / "ev").as_uri(),
            }
        )
    )
    sweep = load_sweep(path)
    store = ResultsStore(sweep.config.store)
    tally = SweepRunner(sweep, store, poll_s=0.1).run()
    verdicts = {(r.scenario_id, r.verdict) for r in store.results("images")}
    assert verdicts == {("present", Verdict.PASS), ("absent", Verdict.BLOCKED_SETUP)}
    blocked = [r for r in store.results("images") if r.scenario_id == "absent"]
    assert len(blocked) == 2 and "image hangar/absent:1 is missing" in blocked[0].reason
    assert "hangar/absent:1' is not on the Docker engine" in blocked[0].reason
    assert tally.verdicts == {"pass": 2, "blocked_setup": 2} and tally.exit_code() == 3


def test_a_model_endpoint_must_answer_from_the_node(tmp_path: Path) -> None:
    """A model endpoint that takes no connection from a node is named with the node before
    any trial, and one on loopback is said to be each node's own (no request is sent: no
    key leaves)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listening:
        up = f"http://127.0.0.1:{listening.getsockname()[1]}/v1"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            down = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"  # bound, not listening
        needs = Needs(evidence_url=(tmp_path / "ev").as_uri(), endpoints=[up])
        ready = check_node(needs, "here/abc")
        assert ready.problems == [] and ready.warnings == []
        report = check_node(needs.model_copy(update={"endpoints": [down]}), "here/abc")
    warnings = report.warnings  # a warning: only trials that call the model meet it
    assert report.problems == [] and len(warnings) == 1
    assert warnings[0].startswith(f"the model endpoint {down} does not")
    assert "127.0.0.1 is each node's own loopback" in warnings[0]


def test_a_host_service_of_the_sweep_must_answer_on_each_node(tmp_path: Path) -> None:
    """The services of the node itself an image task's allowlist may reach (the sweep's
    `network: host_services`) are asked on each node: one that is not there is a warning
    saying it is each node's own."""
    import shutil
    import socket

    from hangar.scheduler.preflight import needs_of
    from hangar.scheduler.sweep import load_sweep

    examples = Path(__file__).resolve().parents[2] / "examples" / "harbor"
    shutil.copytree(examples / "dataset", tmp_path / "dataset")
    with socket.create_server(("127.0.0.1", 0)) as listening:
        up = f"127.0.0.1:{listening.getsockname()[1]}"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            down = f"127.0.0.1:{probe.getsockname()[1]}"  # bound, not listening
        sweep_file = tmp_path / "sweep.yaml"
        sweep_file.write_text(
            "id: services\nscenarios: [dataset/fix-median]\n"
            f"network: {{host_services: ['{up}', '{down}']}}\n"
            "agents: {oracle: {kind: reference, role: oracle}}\n"
        )
        needs = needs_of(load_sweep(sweep_file), (tmp_path / "ev").as_uri())
        assert needs.host_services == sorted([up, down])
        report = check_node(needs, "here/abc")
    assert report.problems == [] and len(report.warnings) == 1, report
    assert report.warnings[0].startswith(f"the host service {down} (the sweep's")
    assert "each node's own" in report.warnings[0]
