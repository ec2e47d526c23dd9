"""Before the first trial: check on every sandbox node what its trials will need there.

A node without the evidence store's credentials, an engine, an image or a model key would
otherwise run every trial it is given to the end and record each as an ``infra_error``.
`preflight` sends one tiny Ray task to each alive node offering sandbox slots (pinned to
it); `check_node` looks at what a trial there will use: the sandbox engine answers (with
the sweep's backend settings: a docker runtime, a Kubernetes namespace), the sweep's
images are there, the evidence store takes a write and gives it back, the models' key
variables are set (the model relay runs on the node), and each endpoint the sweep's models
name (``base_url``) and each service of the node the tasks' allowlists may reach
(``network: host_services``) takes a connection from there (a warning naming the node when one does
not: only the trials that call that model meet it). Any problem but an image stops
the sweep before any trial with one error that names each node and what to fix. An image
missing on a node blocks only the scenarios that use it (`missing_images`: the driver
records their trials ``blocked_setup``, naming the image and the scenarios, and runs the
rest). The results store is the driver's alone and was reached before this runs.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel

from hangar.errors import HangarError, PreflightFailed
from hangar.evidence.stores import open_store
from hangar.models import ModelSpec
from hangar.sandbox import sandbox_class
from hangar.sandbox.config import BackendConfig
from hangar.scheduler.sweep import Sweep
from hangar.trials.kind import kind_of

#: How long a node may take to answer its preflight task.
TIMEOUT_S = 120.0
#: How long a model endpoint may take to accept a connection from a node.
ENDPOINT_TIMEOUT_S = 5.0


class Needs(BaseModel):
    """What the sweep's trials will use on a node."""

    backend: BackendConfig | None = None
    """The sandbox backend and its settings (None: no trial needs a sandbox)."""
    images: list[str] = []
    """Images the sandbox trials start."""
    evidence_url: str
    """Where every trial writes its bundle."""
    key_envs: list[str] = []
    """Variables that hold the models' keys."""
    endpoints: list[str] = []
    """The models' own endpoints (``base_url``): they must answer from the node, where
    the relay and the chat loop call them."""
    host_services: list[str] = []
    """Services of the node itself (``ADDRESS:PORT``) the tasks' allowlists may reach."""
    signed: list[ModelSpec] = []
    """Models whose calls carry the node's own cloud credentials (Bedrock, Vertex AI;
    Azure OpenAI: its key, else an Entra ID token)."""


class NodeReport(BaseModel):
    """What one node's preflight found."""

    node: str
    """Host name and Ray node id (as in results)."""
    problems: list[str]
    """Each problem with what to do; empty when the node is ready."""
    images: dict[str, str] = {}
    """Images missing on this node, and what to do about each."""
    warnings: list[str] = []
    """What may fail some trials here (a model endpoint that takes no connection: only
    trials that call the model meet it, so the sweep goes on)."""


def needs_of(sweep: Sweep, evidence_url: str) -> Needs:
    """What the trials of `sweep` will need on the nodes that run them."""
    config = sweep.config
    found = {kind_of(task.kind).image(task) for task in sweep.tasks}
    images = sorted(image for image in found if image is not None)
    sandboxed = bool(images)
    clouds = [m for m in config.models if m.provider in ("bedrock", "vertex", "azure")]
    return Needs(
        backend=config.backend if sandboxed else None,
        images=images if sandboxed else [],
        evidence_url=evidence_url,
        key_envs=sorted({m.key_env for m in config.models if m.key_env and m not in clouds}),
        signed=clouds,
        endpoints=sorted({m.base_url for m in config.models if m.base_url}),
        host_services=sorted(
            {s for task in sweep.tasks for s in kind_of(task.kind).host_services(task)}
        ),
    )


def check_node(needs: Needs, node: str) -> NodeReport:
    """The preflight of this node (runs there, in a Ray task)."""
    problems = []
    images: dict[str, str] = {}
    if needs.backend is not None:
        cls = sandbox_class(needs.backend.kind)
        engine = cls.engine_problem(needs.backend)
        if engine is not None:
            problems.append(f"sandbox engine: {engine}")
        else:
            for image in needs.images:
                try:
                    missing = cls.image_problem(image)
                except HangarError as exc:
                    missing = str(exc)
                if missing:
                    images[image] = missing
    evidence = _evidence_problem(needs.evidence_url, node)
    if evidence:
        problems.append(evidence)
    for env in needs.key_envs:
        if not os.environ.get(env):
            problems.append(
                f"{env} is not set on this node (the model relay runs here): set it in the "
                "environment of `hangar cluster start` / `hangar cluster join` (or the "
                "workers' Secret) and restart the node"
            )
    for model in needs.signed:
        try:
            model.api_key()  # the node's credentials and region, as the relay will sign
        except HangarError as exc:
            problems.append(str(exc))
    warnings = [p for url in needs.endpoints if (p := _endpoint_problem(url))]
    warnings += [p for service in needs.host_services if (p := _host_service_problem(service))]
    return NodeReport(node=node, problems=problems, images=images, warnings=warnings)


def _endpoint_problem(url: str) -> str | None:
    """Whether a model endpoint takes a connection from this node (no request is sent:
    no key leaves the node here); what is wrong, or None."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=ENDPOINT_TIMEOUT_S):
            return None
    except OSError as exc:
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        hint = (
            f"{host} is each node's own loopback: give the model an address every node "
            "reaches (or run a relay of the endpoint on every node)"
            if loopback
            else "check the address, and that this node's network reaches it"
        )
        return f"the model endpoint {url} does not answer from this node ({exc}): {hint}"


def _host_service_problem(service: str) -> str | None:
    """Whether a service of the node itself (the sweep's `network: host_services`) takes
    a connection here; what is wrong, or None."""
    host, _, port = service.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=ENDPOINT_TIMEOUT_S):
            return None
    except OSError as exc:
        return (
            f"the host service {service} (the sweep's `network: host_services`) does not "
            f"answer on this node ({exc}): it is each node's own, so run it on every node "
            "that runs image tasks (only the trials whose allowlist reaches it meet this)"
        )


def _evidence_problem(url: str, node: str) -> str | None:
    """Write a probe to the evidence store and read it back; what went wrong, or None."""
    key = "_preflight/" + node.replace("/", "-") + ".txt"
    probe = f"hangar preflight from {node}\n".encode()
    try:
        store = open_store(url)
        with tempfile.TemporaryDirectory(prefix="hangar-preflight-") as tmp:
            sent, back = Path(tmp) / "sent", Path(tmp) / "back"
            sent.write_bytes(probe)
            store.put(key, sent)
            store.get(key, back)
            if back.read_bytes() != probe:
                return f"the evidence store {url} gave back other bytes than were written"
    except Exception as exc:
        return (
            f"the evidence store {url} refused a write or read from this node: {exc}. "
            "Give the node access (for S3: AWS credentials or a profile in the environment "
            "of `hangar cluster start` / `hangar cluster join`, or an instance role; the "
            "endpoint in the sweep's `evidence_endpoint`)"
        )
    return None


def _remote_check(needs: Needs) -> NodeReport:
    from hangar.scheduler.board import this_node

    return check_node(needs, this_node())


def start_preflight(
    sweep: Sweep, evidence_url: str, nodes: list[dict[str, Any]]
) -> Callable[[], list[NodeReport]]:
    """Send the preflight to every node of `nodes` (Ray's node records) at once; returns
    the wait for their reports, which raises `PreflightFailed` naming each node with a
    problem (the caller starts what it can meanwhile)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    needs = needs_of(sweep, evidence_url)
    task = ray.remote(_remote_check)
    refs = [
        task.options(
            num_cpus=0,
            max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
        ).remote(needs)
        for n in nodes
    ]
    return lambda: _reports(ray, nodes, refs)


def _reports(ray: Any, nodes: list[dict[str, Any]], refs: list[Any]) -> list[NodeReport]:
    reports: list[NodeReport] = []
    for n, ref in zip(nodes, refs, strict=True):
        try:
            reports.append(ray.get(ref, timeout=TIMEOUT_S))
        except Exception as exc:
            where = f"{n.get('NodeManagerAddress', '?')}/{n['NodeID'][:12]}"
            reports.append(NodeReport(node=where, problems=[f"the preflight task failed: {exc}"]))
    failed = [r for r in reports if r.problems]
    if failed:
        lines = [f"node {r.node}:\n" + "\n".join(f"  - {p}" for p in r.problems) for r in failed]
        raise PreflightFailed(
            f"preflight failed on {len(failed)} of {len(reports)} node(s); no trial was "
            "started:\n" + "\n".join(lines)
        )
    return reports


def missing_images(reports: list[NodeReport]) -> dict[str, str]:
    """Each image some node lacks, and what was found (the first node's words, and how
    many nodes lack it)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for r in reports:
        for image, problem in r.images.items():
            found.setdefault(image, []).append((r.node, problem))
    return {
        image: f"{where[0][1]} (on {len(where)} of {len(reports)} node(s))"
        for image, where in found.items()
    }
