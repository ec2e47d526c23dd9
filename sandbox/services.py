"""A trial's service containers (a task's ``docker-compose.yaml`` services beside the
agent's sandbox) on a network of their own with no route out.

The network is a docker bridge network made per trial, ``internal`` (no gateway, no
masquerading) and with no IPv4 address of the host on its bridge
(``com.docker.network.bridge.inhibit_ipv4``): what joins it (the services, the agent's
sandbox, the verifier's) reaches the other members and nothing else, the host's own
services included. An engine that cannot make such a network (Docker < 26 ignores the
option, and its bridge holds an address of the host) is refused with that reason.

Services run their image's own entrypoint and command (they are the task's fixtures,
not the agent), with the engine's default capabilities less raw sockets and device
nodes, no new privileges, the trial's limits and labels (the reaper removes what a dead
worker left, `hangar.cluster.reaper`). A service's name is its address on the network.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.networks import Network

from hangar.errors import ImageNotFound, SandboxError
from hangar.sandbox.docker import docker_client
from hangar.sandbox.service_specs import ServiceHealth, ServiceSpec

#: Capabilities a service loses of the engine's defaults.
DROPPED_CAPS = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SYS_CHROOT"]
#: The most of a service's log kept.
LOG_LIMIT = 1 << 20
#: How long a service without a healthcheck of its own gets to be running.
START_TIMEOUT_S = 60.0


class ServiceNetwork:
    """A trial's network and its services (see the module docstring)."""

    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name = name
        self.labels = labels
        self.client = docker_client()
        self.network: Network | None = None
        self.containers: dict[str, Container] = {}

    def open(self) -> None:
        """Make the network (refused when the host would have an address on it)."""
        try:
            self.network = self.client.networks.create(
                self.name,
                driver="bridge",
                internal=True,
                labels=self.labels,
                options={"com.docker.network.bridge.inhibit_ipv4": "true"},
            )
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot make the services' network: {exc}") from exc
        bridge = "br-" + str(self.network.id)[:12]
        found = host_addresses(bridge)
        if found:
            self.close()
            raise SandboxError(
                f"this docker engine gives the host an address on a service network "
                f"({bridge}: {', '.join(found)}): services and agents could reach the "
                "host's own services. Docker 26 or later makes one without (option "
                "com.docker.network.bridge.inhibit_ipv4)"
            )

    def start(self, service: ServiceSpec) -> None:
        """Create and start one service on the network."""
        assert self.network is not None
        more: dict[str, Any] = {}
        if service.entrypoint is not None:
            more["entrypoint"] = list(service.entrypoint)
        if service.healthcheck is not None:
            more["healthcheck"] = service.healthcheck.docker()
        try:
            container = self.client.containers.create(
                service.image,
                command=list(service.command) if service.command is not None else None,
                environment=service.env,
                user=service.user or "",
                working_dir=service.workdir or "",
                hostname=service.name,
                network=self.name,
                networking_config=endpoint(self.client, self.name, service.name),
                cap_drop=DROPPED_CAPS,
                security_opt=["no-new-privileges"],
                init=True,
                pids_limit=service.pids,
                mem_limit=service.memory,
                memswap_limit=service.memory,
                nano_cpus=int(service.cpus * 1e9),
                labels={**self.labels, "hangar.service": service.name},
                **more,
            )
        except docker.errors.ImageNotFound as exc:
            raise ImageNotFound(f"service {service.name}: no image {service.image}") from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"service {service.name}: cannot create it: {exc}") from exc
        self.containers[service.name] = container
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise SandboxError(f"service {service.name}: cannot start it: {exc}") from exc

    def wait(self, name: str, check: ServiceHealth | None, healthy: bool) -> str:
        """Wait until service `name` runs (and, with `healthy`, its healthcheck `check`
        passes); '' when it does, else what went wrong."""
        container = self.containers[name]
        patience = check.patience_s() if healthy and check is not None else START_TIMEOUT_S
        deadline = time.monotonic() + patience
        while True:
            container.reload()
            state = container.attrs.get("State", {})
            health = (state.get("Health") or {}).get("Status")
            if state.get("Status") in ("exited", "dead"):
                return f"service {name} exited ({state.get('ExitCode')})"
            if not healthy or check is None:
                if state.get("Running"):
                    return ""
            elif health == "healthy":
                return ""
            elif health == "unhealthy":
                return f"service {name} is unhealthy"
            if time.monotonic() > deadline:
                what = "healthy" if healthy and check is not None else "running"
                return f"service {name} was not {what} within {patience:.0f} s"
            time.sleep(0.2)

    def addresses(self) -> dict[str, str]:
        """Each service's address on the network."""
        found = {}
        for name, container in self.containers.items():
            container.reload()
            networks = container.attrs.get("NetworkSettings", {}).get("Networks", {})
            address = (networks.get(self.name) or {}).get("IPAddress")
            if address:
                found[name] = address
        return found

    def logs(self) -> dict[str, bytes]:
        """Each service's output (the last `LOG_LIMIT` bytes)."""
        found = {}
        for name, container in self.containers.items():
            try:
                found[name] = container.logs(stdout=True, stderr=True)[-LOG_LIMIT:]
            except docker.errors.APIError as exc:
                found[name] = f"(no log: {exc})".encode()
        return found

    def stop(self) -> None:
        """Remove the services (every process of them is dead when this returns)."""
        for container in self.containers.values():
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True, v=True)
        self.containers.clear()

    def close(self) -> None:
        """Remove the services and the network (idempotent; the network once no sandbox
        is attached to it)."""
        self.stop()
        network, self.network = self.network, None
        if network is not None:
            with contextlib.suppress(docker.errors.NotFound):
                network.remove()


def endpoint(client: docker.DockerClient, network: str, *aliases: str) -> dict[str, Any]:
    """The ``networking_config`` that joins `network` with `aliases` (names others use)."""
    return {network: client.api.create_endpoint_config(aliases=list(aliases))}


def host_addresses(interface: str) -> list[str]:
    """The IPv4 addresses of `interface` on this machine ([] when it has none or the
    engine is another machine's: its bridge is not here)."""
    try:
        res = subprocess.run(
            ["ip", "-j", "-4", "addr", "show", "dev", interface],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if res.returncode != 0:
        return []
    try:
        entries = json.loads(res.stdout or "[]")
    except json.JSONDecodeError:
        return []
    return [a["local"] for e in entries for a in e.get("addr_info", []) if "local" in a]
