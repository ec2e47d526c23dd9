"""An image task's services (`hangar.kinds.execution.images.compose`) for one trial: their
images built, their network made, each started after what it depends on, and the agent
let in once the services it waits for are up (`hangar.sandbox.services`).

A service that does not build, start or become healthy is the task's problem (or the
machine's), never the agent's: the trial is blocked_setup, with the service's log. The
logs of every service are evidence (``services/<name>.log``); the services live until
the trial's tear-down, through every step and the verification.
"""

from __future__ import annotations

import secrets

from hangar.errors import ImageNotFound, SandboxError
from hangar.kinds.execution.images.task import Condition, Service
from hangar.kinds.execution.images.trial_view import ImageTrialView
from hangar.results import Verdict
from hangar.sandbox.service_specs import ServiceRun, ServiceSpec
from hangar.sandbox.services import ServiceNetwork
from hangar.trials.boundary import Outcome

#: The most of a service's log shown in a reason.
REASON_TAIL = 300


def build_services(trial: ImageTrialView) -> dict[str, str]:
    """Each service's image on this node (built once per context, as the task's is)."""
    return {s.name: trial.build(s.image, f"services/{s.name}/image") for s in trial.whole.services}


def start_services(trial: ImageTrialView, images: dict[str, str]) -> ServiceNetwork:
    """The trial's network with its services up, as the task's compose file orders."""
    labels = trial.sandbox_of(trial.image_ref, (), ttl_s=trial.budget() + 900).labels()
    network = ServiceNetwork(f"hangar-svc-{secrets.token_hex(6)}", labels)
    trial.services = network
    try:
        network.open()
    except SandboxError as exc:
        raise Outcome(Verdict.BLOCKED_SETUP, f"services: {exc}") from exc
    ready: dict[str, Condition] = {}
    by_name = {s.name: s for s in trial.whole.services}
    for service in trial.whole.services:
        for needed, condition in service.depends_on.items():
            _wait(network, by_name[needed], condition, ready)
        try:
            network.start(_spec(trial, service, images[service.name]))
        except (ImageNotFound, SandboxError) as exc:
            raise Outcome(Verdict.BLOCKED_SETUP, f"services: {exc}") from exc
    for needed, condition in trial.whole.service_waits.items():
        _wait(network, by_name[needed], condition, ready)
    trial.write("services/addresses.json", network.addresses())
    return network


def _wait(
    network: ServiceNetwork, service: Service, condition: Condition, ready: dict[str, Condition]
) -> None:
    """Wait for `service` to meet `condition` (once); an unmet one is blocked_setup."""
    if ready.get(service.name) in (condition, "healthy"):
        return
    problem = network.wait(service.name, service.healthcheck, healthy=condition == "healthy")
    if problem:
        log = network.logs().get(service.name, b"").decode("utf-8", errors="replace")
        tail = log.strip()[-REASON_TAIL:] or "no output"
        raise Outcome(Verdict.BLOCKED_SETUP, f"services: {problem} (its log: {tail})")
    ready[service.name] = condition


def _spec(trial: ImageTrialView, service: Service, image: str) -> ServiceSpec:
    return ServiceSpec(
        **service.model_dump(include=set(ServiceRun.model_fields)),
        name=service.name,
        image=image,
        cpus=service.cpus or trial.limits.cpus,
        memory=service.memory or trial.limits.memory,
        pids=trial.limits.pids,
    )


def save_service_logs(trial: ImageTrialView, network: ServiceNetwork) -> None:
    """Every service's output into the evidence."""
    for name, data in network.logs().items():
        path = trial.artifacts / "services" / f"{name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
