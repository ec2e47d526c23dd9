"""Sweeps with every real service: docker, S3 (moto), PostgreSQL, multi-node Ray.

- a docker sweep writing its evidence to S3 and its results to PostgreSQL;
- a head and a worker node; the worker is killed mid-sweep; every trial still ends
  with exactly one final verdict, and the dead worker's sandboxes stop and are removed
  by the reaper about a minute after the kill;
- the driver is killed mid-sweep; the same command finishes the sweep without running
  a finished trial again (agent runs are counted);
- a file:// evidence store is refused on a cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import docker
import psutil
import pytest
import yaml
from typer.testing import CliRunner

from hangar.cli import app
from hangar.cluster.reaper import REAP_EVERY_S
from hangar.sandbox.lease import CHECK_S, STALE_S
from hangar.scheduler.driver import SweepRunner
from hangar.scheduler.sweep import load_sweep
from hangar.store import ResultsStore
from tests.services import RayCluster, kill_processes, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny" / "scenario.yaml"
HANGAR = str(Path(sys.executable).parent / "hangar")


def fresh_db(url: str) -> str:
    """An empty results store on the shared PostgreSQL server."""
    store = ResultsStore(url)
    with store.engine.begin() as conn:
        for table in ("checks", "trials", "sweeps", "baselines"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    return url


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def final_rows(store: ResultsStore, sweep: str) -> Counter[str]:
    return Counter(r.trial_key for r in store.results(sweep, all_attempts=True) if r.verdict.final)


@pytest.mark.docker
@pytest.mark.s3
@pytest.mark.postgres
def test_docker_sweep_to_s3_and_postgres(
    ray_local: None,
    docker_client: docker.DockerClient,
    s3_endpoint: str,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "sweep.yaml",
        {
            "id": "s3pg",
            "scenarios": [str(ROOT / "examples" / "median" / "scenario.yaml")],
            "agents_file": str(ROOT / "examples" / "agents.yaml"),
            "repeats": 1,
            "store": fresh_db(postgres_url),
            "evidence": "s3://hangar-test/sweeps",
            "evidence_endpoint": s3_endpoint,
        },
    )
    sweep = load_sweep(path)
    store = ResultsStore(sweep.config.store)
    tally = SweepRunner(sweep, store).run()
    assert tally.verdicts == {"pass": 1, "fail": 1}
    results = {r.agent: r for r in store.results("s3pg")}
    assert results["gold"].verdict == "pass" and results["noop"].verdict == "fail"
    for r in results.values():
        assert r.evidence_uri and r.evidence_uri.startswith("s3://hangar-test/sweeps/s3pg/")
        assert "endpoint" not in r.evidence_uri  # the URI names the object, nothing more
        out = CliRunner().invoke(
            app,
            [
                "evidence",
                "verify",
                r.evidence_uri,
                "--sha256",
                str(r.evidence_sha256),
                "--endpoint",
                s3_endpoint,
            ],
        )
        assert out.exit_code == 0, out.output
        # and the trial itself, read from its bundle at that endpoint
        argv = ["trial", "show", r.trial_key, "--json", "--endpoint", s3_endpoint]
        shown = CliRunner().invoke(app, [*argv, "--store", sweep.config.store or ""])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["trial_key"] == r.trial_key


@pytest.mark.docker
@pytest.mark.s3
@pytest.mark.postgres
def test_worker_node_killed_mid_sweep(
    s3_endpoint: str,
    postgres_url: str,
    ray_cluster: RayCluster,
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    store = ResultsStore(fresh_db(postgres_url))
    driver, worker = _busy_on_the_worker("nodes", tmp_path, s3_endpoint, postgres_url, ray_cluster)
    assert ray_cluster.kill_worker() > 0
    killed = time.monotonic()
    worker_label = {"label": ["hangar.sweep=nodes", "hangar.node=" + _node_label(worker)]}
    orphans = {
        c.id
        for c in docker_client.containers.list(all=True, ignore_removed=True, filters=worker_label)
    }
    assert orphans, "the kill left no orphan: it did not hit a running trial"
    out, err = driver.communicate(timeout=600)
    reasons = sorted({r.reason for r in store.results("nodes") if r.verdict != "pass"})
    assert driver.returncode == 0, "\n".join(reasons) + out[-2000:] + err[-2000:]
    try:
        outcome = json.loads(out)
    except ValueError:
        pytest.fail(f"`hangar run --json` printed something else: {out[-2000:]!r}")
    assert outcome["verdicts"] == {"pass": 8}
    finals = final_rows(store, "nodes")
    assert len(finals) == 8 and set(finals.values()) == {1}, "a trial was lost or duplicated"
    nodes = {r.node.split("/")[-1] for r in store.results("nodes")}
    assert nodes and worker not in nodes, "results came from the dead worker"

    # The orphans end themselves: their keepers exit once the dead worker's leases go
    # stale, and the head's reaper removes them, about a minute after the kill (their
    # `hangar.expires` is the trial's whole budget later).
    def alive() -> set[str]:
        ours = docker_client.containers.list(
            all=True, ignore_removed=True, filters={"label": "hangar.sweep=nodes"}
        )
        return {c.id for c in ours} & orphans

    def running() -> set[str]:
        ours = docker_client.containers.list(
            ignore_removed=True, filters={"label": "hangar.sweep=nodes"}
        )
        return {c.id for c in ours} & orphans

    wait_for(lambda: not running(), STALE_S + 4 * CHECK_S, "the orphans' keepers to exit")
    stopped_after = time.monotonic() - killed
    wait_for(lambda: not alive(), STALE_S + 3 * REAP_EVERY_S, "the reaper to remove the orphans")
    removed_after = time.monotonic() - killed
    print(f"{len(orphans)} orphan(s): stopped {stopped_after:.0f} s, gone {removed_after:.0f} s")


@pytest.mark.docker
@pytest.mark.s3
@pytest.mark.postgres
def test_a_frozen_worker_does_not_stall_the_sweep_nor_overwrite_evidence(
    s3_endpoint: str,
    postgres_url: str,
    ray_cluster: RayCluster,
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    """A worker that freezes mid-sweep (a stalled VM, a partition): once Ray marks it dead
    the driver gives its trials up and runs them elsewhere; when it thaws and finishes
    them, nothing it writes replaces a bundle a result points at."""
    store = ResultsStore(fresh_db(postgres_url))
    driver, worker = _busy_on_the_worker("freeze", tmp_path, s3_endpoint, postgres_url, ray_cluster)
    assert ray_cluster.freeze_worker() > 0
    frozen = time.monotonic()
    try:
        out, err = driver.communicate(timeout=600)
        took = time.monotonic() - frozen
    finally:
        ray_cluster.thaw_worker()
    assert driver.returncode == 0, out[-2000:] + err[-3000:]
    assert json.loads(out)["verdicts"] == {"pass": 8}
    finals = final_rows(store, "freeze")
    assert len(finals) == 8 and set(finals.values()) == {1}, "a trial was lost or duplicated"
    given_up = [
        r for r in store.results("freeze", all_attempts=True) if "stopped answering" in r.reason
    ]
    assert given_up and all(worker in r.reason for r in given_up), "no trial was given up"
    assert all(r.node.endswith(worker) for r in given_up)  # the row names the lost node
    print(f"the sweep ended {took:.0f} s after the freeze")
    # The thawed worker may finish what it held and upload: never over a recorded bundle.
    time.sleep(20)
    for r in store.results("freeze", all_attempts=True):
        if r.evidence_uri is None:
            continue
        argv = ["evidence", "verify", r.evidence_uri, "--endpoint", s3_endpoint]
        check = CliRunner().invoke(app, [*argv, "--sha256", str(r.evidence_sha256)])
        assert check.exit_code == 0, (r.evidence_uri, check.output)


def _busy_on_the_worker(
    sweep: str, tmp_path: Path, s3_endpoint: str, postgres_url: str, cluster: RayCluster
) -> tuple[subprocess.Popen[str], str]:
    """A sweep of 8 six-second docker trials run by `hangar run --json` on `cluster`,
    returned once one runs on the worker node: the driver, the worker's node id prefix."""
    path = write(
        tmp_path / "sweep.yaml",
        {
            "id": sweep,
            "scenarios": [str(TINY)],
            "backend": "docker",
            "agents": {"slow": {"command": "sleep 6; echo done"}},
            "repeats": 8,
            "store": postgres_url,
            "evidence": f"s3://hangar-test/{sweep}",
            "evidence_endpoint": s3_endpoint,
        },
    )
    driver = subprocess.Popen(
        [HANGAR, "run", str(path), "--address", cluster.address, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = cluster.worker_node_id()[:12]
    labels = {"label": [f"hangar.sweep={sweep}", "hangar.node=" + _node_label(worker)]}
    engine = docker.from_env()
    wait_for(
        lambda: bool(engine.containers.list(ignore_removed=True, filters=labels)),
        180,
        "a trial on the worker node",
    )
    return driver, worker


def _node_label(node_id_prefix: str) -> str:
    import socket

    return f"{socket.gethostname()}/{node_id_prefix}"


@pytest.mark.s3
def test_local_evidence_is_refused_on_a_cluster(ray_cluster: RayCluster, tmp_path: Path) -> None:
    path = write(
        tmp_path / "sweep.yaml",
        {
            "id": "refuse",
            "scenarios": [str(TINY)],
            "backend": "local",
            "agents": {"ok": {"command": "true"}},
            "store": f"sqlite:///{tmp_path}/r.db",
            "evidence": (tmp_path / "ev").as_uri(),
        },
    )
    proc = subprocess.run(
        [HANGAR, "run", str(path), "--address", ray_cluster.address],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "use an s3:// evidence store" in proc.stderr and "Traceback" not in proc.stderr


def test_driver_killed_then_resumed(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    path = write(
        tmp_path / "sweep.yaml",
        {
            "id": "kill",
            "scenarios": [str(TINY)],
            "backend": "local",
            "repeats": 10,
            "agents": {"ok": {"command": f"echo $(pwd) >> {log}; sleep 1"}},
            "store": f"sqlite:///{tmp_path}/r.db",
            "evidence": (tmp_path / "ev").as_uri(),
            "concurrency": {"sandbox_slots": 2},
        },
    )
    ray_tmp = tempfile.mkdtemp(prefix="hrk-")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    store = ResultsStore(f"sqlite:///{tmp_path}/r.db")
    first = subprocess.Popen(
        [HANGAR, "run", str(path)], env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: len(list(store.results("kill"))) >= 3, 240, "three finished trials")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        kill_processes(ray_tmp)  # the embedded Ray the killed driver left behind
    done_before = {r.trial_key for r in store.results("kill")}
    assert 3 <= len(done_before) < 10
    second = subprocess.run(
        [HANGAR, "run", str(path), "--json"], env=env, capture_output=True, text=True, timeout=600
    )
    kill_processes(ray_tmp)
    assert second.returncode == 0, second.stderr[-3000:]
    outcome = json.loads(second.stdout)
    assert outcome["skipped"] == len(done_before) and outcome["done"] == 10 - len(done_before)
    runs = Counter(Path(line).parents[1].name[:20] for line in log.read_text().split())
    for key in done_before:
        assert runs[key[:20]] == 1, "a trial finished before the kill ran again"
    assert len(final_rows(store, "kill")) == 10


def test_run_attaches_to_a_warm_local_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hangar cluster start --head` leaves a head that `hangar run` attaches to (no Ray
    start-up of its own); once the head is gone, the record of it is dropped."""
    from hangar.cluster.nodes import local_head, start_argv, start_head
    from tests.services import free_port

    monkeypatch.setenv("HANGAR_CACHE_DIR", str(tmp_path / "cache"))
    ray_tmp = tempfile.mkdtemp(prefix="hrw-")
    port = free_port()
    argv = start_argv(
        head=True, port=port, metrics_port=free_port(), sandbox_slots=2, node_ip="127.0.0.1"
    )
    path = write(
        tmp_path / "sweep.yaml",
        {
            "id": "warm",
            "scenarios": [str(TINY)],
            "backend": "local",
            "repeats": 3,
            "agents": {"ok": {"command": "true"}},
            "store": f"sqlite:///{tmp_path}/r.db",
            "evidence": (tmp_path / "ev").as_uri(),
        },
    )
    try:
        start_head([*argv, f"--temp-dir={ray_tmp}"], port)
        assert local_head() == (f"127.0.0.1:{port}", "127.0.0.1")
        proc = subprocess.run(
            [HANGAR, "run", str(path), "--json"], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"attached to the local Ray head at 127.0.0.1:{port}" in proc.stderr
        assert json.loads(proc.stdout)["done"] == 3
    finally:
        kill_processes(ray_tmp)
    wait_for(lambda: local_head() is None, 30, "the stopped head to be forgotten")
    assert not (tmp_path / "cache" / "local-ray.json").exists()


def test_run_keeps_a_local_head_warm_and_stops_it_once_idle(tmp_path: Path) -> None:
    """The first `hangar run` starts a local head and keeps it warm; the next attaches to it
    (no Ray start-up); a run whose sweep needs a key the head's environment lacks restarts
    it; `hangar cluster status` shows it; once no run holds it for the idle time, it stops
    and its record is gone."""
    ray_tmp = tempfile.mkdtemp(prefix="hrv-")
    cache = Path(tempfile.mkdtemp(prefix="hcv-"))  # short: trial sockets live under it
    env = {**os.environ, "HANGAR_WARM_HEAD": "1", "HANGAR_WARM_IDLE_S": "6",
           "HANGAR_CACHE_DIR": str(cache), "RAY_TMPDIR": ray_tmp}  # fmt: skip
    env.pop("HANGAR_WARM_TEST_KEY", None)

    def sweep(name: str, **extra: Any) -> Path:
        return write(tmp_path / f"{name}.yaml", {
            "id": name, "scenarios": [str(TINY)], "backend": "local", "repeats": 2,
            "agents": {"ok": {"command": "true"}}, "store": f"sqlite:///{tmp_path}/r.db",
            "evidence": (tmp_path / "ev").as_uri(), **extra,
        })  # fmt: skip

    def run(path: Path, **more: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([HANGAR, "run", str(path), "--json"], capture_output=True,
                              text=True, timeout=300, env={**env, **more})  # fmt: skip
        assert proc.returncode == 0, (proc.stderr[-3000:], proc.stdout[-3000:])
        assert json.loads(proc.stdout)["done"] == 2
        return proc

    def status() -> dict[str, Any]:
        proc = subprocess.run([HANGAR, "cluster", "status", "--json"], capture_output=True,
                              text=True, timeout=60, env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return dict(json.loads(proc.stdout))

    try:
        assert status()["running"] is False
        first = run(sweep("warm-a"))
        assert "started now and kept warm for later runs" in first.stderr
        shown = status()
        assert shown["running"] and shown["started_by"] == "hangar run (kept warm)"
        assert shown["active_runs"] == [] and shown["sandbox_slots"] == 2
        keeper = json.loads((cache / "local-ray.json").read_text())["keeper"]
        second = run(sweep("warm-b"))
        assert "kept warm by an earlier `hangar run`" in second.stderr
        # a key the head was started without: an idle head is started again with it
        model = {
            "id": "m",
            "provider": "openai",
            "api_key_env": "HANGAR_WARM_TEST_KEY",
            "base_url": "http://127.0.0.1:9/v1",
            "price": {"input": 1, "output": 1},
        }
        third = run(sweep("warm-c", models=[model]), HANGAR_WARM_TEST_KEY="k1")
        assert "started now and kept warm" in third.stderr
        record = json.loads((cache / "local-ray.json").read_text())
        assert record["keeper"] != keeper and "k1" not in json.dumps(record)
        wait_for(lambda: not status()["running"], 90, "the idle warm head to stop")
        assert not (cache / "local-ray.json").exists()
        # the keeper exits once its head has drained (a zombie left to init counts as gone)
        proc_status = Path(f"/proc/{record['keeper']}/status")
        wait_for(lambda: not proc_status.exists() or "\tZ" in proc_status.read_text(),
                 90, "the keeper to exit")  # fmt: skip
        # no record of the stopped head is left for a later bare `ray.init()` to join
        currents = [
            Path("/tmp/ray/ray_current_cluster"),
            Path(ray_tmp, "ray", "ray_current_cluster"),
        ]
        port = f":{record['port']}"
        assert not [c for c in currents if c.exists() and c.read_text().strip().endswith(port)]
    finally:
        kill_processes(ray_tmp)
        shutil.rmtree(cache, ignore_errors=True)


def test_the_head_makes_its_token_and_a_worker_without_it_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ray start --head` does not make a token: `hangar cluster start --head` does (Ray's
    own generator), once; `hangar cluster join` on a machine without it says what to copy."""
    from hangar.cluster.nodes import ensure_token, need_token
    from hangar.errors import ClusterError

    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "head"))
    path = ensure_token()
    assert path == tmp_path / "head" / ".ray" / "auth_token"
    token = path.read_text()
    assert len(token.strip()) >= 32 and path.stat().st_mode & 0o777 == 0o600
    assert ensure_token() == path and path.read_text() == token  # kept, not replaced
    need_token()  # the head has it
    monkeypatch.setenv("HOME", str(tmp_path / "worker"))
    with pytest.raises(ClusterError, match=r"copy the head's ~/\.ray/auth_token"):
        need_token()
    monkeypatch.setenv("RAY_AUTH_TOKEN", token.strip())
    need_token()  # given in the environment instead


@pytest.mark.ray
def test_a_driver_on_a_machine_that_is_no_node_attaches(tmp_path: Path) -> None:
    """`hangar run --address` from a machine that is not a node of the cluster joins it as
    a node without CPUs or slots (on separate machines Ray otherwise fails the driver:
    "No node info found matching attributes"), runs the sweep on the cluster's nodes, and
    leaves at the end. The driver's machine is a network namespace with a host name of
    its own; it shares this machine's files, where Ray attaches even without the join, so
    this shows the join and the leave, not the failure they prevent."""
    from hangar.cluster.nodes import local_raylets, run_ray, start_argv
    from tests.services import free_port, other_machine

    ray_tmp = tempfile.mkdtemp(prefix="hrd-")
    port = free_port()
    path = write(
        tmp_path / "sweep.yaml",
        {
            "id": "remote-driver",
            "scenarios": [str(TINY)],
            "backend": "local",
            "repeats": 2,
            "agents": {"ok": {"command": "true"}},
            "store": f"sqlite:///{tmp_path}/r.db",
            "evidence": (tmp_path / "ev").as_uri(),
        },
    )
    with other_machine() as (namespace, here, there):
        head = start_argv(
            head=True, port=port, metrics_port=free_port(), sandbox_slots=2, node_ip=here
        )
        try:
            run_ray([*head, f"--temp-dir={ray_tmp}"])
            assert there not in local_raylets(f"{here}:{port}")
            # its own host name too (Ray matches a driver's node by address and name)
            box = ["unshare", "--uts", "sh", "-c", 'hostname driver-box && exec "$@"', "sh"]
            argv = ["ip", "netns", "exec", namespace, *box, HANGAR, "run", str(path)]
            proc = subprocess.run(
                [*argv, "--address", f"{here}:{port}", "--json"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
            assert f"joined the cluster at {here}:{port}" in proc.stderr
            assert json.loads(proc.stdout)["verdicts"] == {"pass": 2}
            nodes = {
                r.node for r in ResultsStore(f"sqlite:///{tmp_path}/r.db").results("remote-driver")
            }
            assert len(nodes) == 1  # the head's: the driver's node takes no trial
            wait_for(
                lambda: there not in local_raylets(f"{here}:{port}"),
                30,
                "the driver's node to leave",
            )
            # all of it: its log monitor and agents too, not only its raylet
            wait_for(
                lambda: not [p for p in psutil.process_iter(["cmdline"])
                             if f"--node-ip-address={there}" in (p.info["cmdline"] or [])],
                30,
                "every process of the driver's node to end",
            )  # fmt: skip
        finally:
            kill_processes(ray_tmp)
            kill_processes(f"--gcs-address={here}:{port}")
