"""Machines that share nothing but a network, on one host: the multi-machine harness.

Each machine is a container with its own file system, host name, address and (for a
node) its own docker engine, on a bridge network of its own; they reach each other by
name. The machine image (`machine_image`) is stock Debian bookworm with what the
clusters guide asks of a machine: python3-venv, git, the docker engine, gcc and
libc6-dev (and, for the machine holding the services, PostgreSQL and Debian's registry).
What a machine does not have is hangar: the harness follows `docs/guides/clusters.md`
to the letter (`guide_steps` reads its first block: each command runs as written, on the
machines its comment names, with HEAD, THIS_MACHINE and REPOSITORY filled in).

Two things differ from real machines, both outside what the guide covers: the machines
have no package mirror (pip's configuration points at a wheelhouse made on this host,
as a company mirror would be; `PIP_NO_INDEX`), and the base image `hangar image
build-base` would make from Debian's mirror is loaded from this host first (the guide's
`hangar image build-base` then finds it up to date, and makes the stock variant and the
sandbox helper as written).

A machine is killed with `docker kill` (everything in it dies, its sandboxes too) and
frozen with `docker pause` (the cgroup freezer: a stalled VM; the inner engine's
containers are under the machine's cgroup, so they freeze with it).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "clusters.md"
EXAMPLES = ROOT / "examples"

MACHINE_DOCKERFILE = """\
FROM {base}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \\
      --no-install-recommends python3-venv python3-pip git docker.io gcc libc6-dev \\
      e2fsprogs iproute2 procps ca-certificates postgresql docker-registry \\
    && rm -rf /var/lib/apt/lists/*
"""

#: What a machine container gets, as the field's docker-in-docker setups do without
#: --privileged (CAP_SYS_RESOURCE is not grantable on every kernel).
_CAPS = [
    *("AUDIT_CONTROL", "BLOCK_SUSPEND", "DAC_READ_SEARCH", "IPC_LOCK", "IPC_OWNER", "LEASE"),
    *("LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "NET_ADMIN", "NET_BROADCAST", "SYSLOG"),
    *("SYS_ADMIN", "SYS_BOOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE"),
    *("SYS_RAWIO", "SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM"),
]

#: Secrets of the harness's own services (fake; they never leave the harness's network).
MACHINE_ENV = {
    "AWS_ACCESS_KEY_ID": "machines",
    "AWS_SECRET_ACCESS_KEY": "machines",
    "AWS_DEFAULT_REGION": "us-east-1",
    "HANGAR_SCRIPTED_KEY": "scripted",
    "PIP_NO_INDEX": "1",
    "PIP_FIND_LINKS": "/srv/wheels",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "HANGAR_WARM_HEAD": "0",
}
REGISTRY_PORT, S3_PORT, MODEL_PORT = 5000, 5001, 8765


def docker(*args: str, timeout: float = 600, check: bool = True, **kw: Any) -> str:
    """The docker CLI; its stdout."""
    proc = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False, **kw
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def machine_image() -> str:
    """The machine image (built once, on the host network that reaches Debian's mirror)."""
    from hangar.sandbox.task_images import stock_image

    base = stock_image().tag
    text = MACHINE_DOCKERFILE.format(base=base)
    tag = f"hangar-machine:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if docker("images", "-q", tag).strip():
        return tag
    with tempfile.TemporaryDirectory() as context:
        (Path(context) / "Dockerfile").write_text(text)
        docker("build", "--network", "host", "-t", tag, context, timeout=1800)
    return tag


def wheelhouse(cache: Path) -> Path:
    """hangar's dependencies (its s3 and postgres extras) and moto's server, as wheels
    made with this host's pip: the machines' package mirror. Made once per pyproject."""
    spec = (ROOT / "pyproject.toml").read_bytes()
    folder = cache / f"wheels-{hashlib.sha256(spec).hexdigest()[:16]}"
    if (folder / ".done").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "-w",
            str(folder),
            f"{ROOT}[s3,postgres]",
            "moto[server]>=5,<6",
            "pip",
            "setuptools>=68",
            "wheel",
        ],
        check=True,
        capture_output=True,
        timeout=1800,
    )
    for own in folder.glob("hangar_farm-*"):
        own.unlink()  # the machines install hangar from their clone, not from here
    (folder / ".done").touch()
    return folder


@dataclass
class Machine:
    """One machine of the harness."""

    name: str
    container: str
    address: str = ""
    roles: set[str] = field(default_factory=set)

    def sh(self, command: str, *, timeout: float = 900, check: bool = True) -> str:
        """Run `command` by bash, as root, in root's home; its output (stdout and stderr)."""
        proc = subprocess.run(
            ["docker", "exec", "-w", "/root", self.container, "bash", "-c", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        out = proc.stdout + proc.stderr
        if check and proc.returncode != 0:
            raise RuntimeError(f"{self.name}$ {command}\nexit {proc.returncode}\n{out[-4000:]}")
        return out

    def ok(self, command: str) -> bool:
        """Whether `command` exits 0."""
        return (
            subprocess.run(
                ["docker", "exec", self.container, "bash", "-c", command], capture_output=True
            ).returncode
            == 0
        )

    def background(self, command: str, log: str) -> None:
        """Start `command` in the background, its output in `log` (in the machine)."""
        docker(
            "exec", "-d", "-w", "/root", self.container, "bash", "-c", f"({command}) >{log} 2>&1"
        )

    def put(self, source: Path, target: str) -> None:
        """Copy the host's `source` (a file or a folder) to `target` in the machine."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(source, arcname=Path(target).name)
        self.sh(f"mkdir -p {shlex.quote(str(Path(target).parent))}")
        subprocess.run(
            ["docker", "cp", "-", f"{self.container}:{Path(target).parent}"],
            input=buffer.getvalue(),
            check=True,
            capture_output=True,
        )


@dataclass
class Step:
    """One command of the guide: where it runs."""

    where: str
    """``every machine``, ``every node``, ``the head``, ``each other node``, ``the
    driver``, or ``copy`` (the token's copy, said in a comment)."""
    command: str


def guide_steps(guide: Path = GUIDE) -> list[Step]:
    """The commands of the clusters guide's first block, each with the machines its
    comment names (``# on every machine``, ``# on the head``, ``# ... then on each other
    node:``, ``# on the driver ...``); a comment telling to copy the token is a step."""
    text = guide.read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, f"{guide} has no sh block"
    steps: list[Step] = []
    where = ""
    for line in block.group(1).splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            low = line.lower()
            if "copy ~/.ray/auth_token" in low:
                steps.append(Step("copy", line))
            for place in (
                "every machine",
                "every node",
                "the head",
                "each other node",
                "the driver",
            ):
                if place in low:
                    where = place
            continue
        command = re.sub(r"\s+#.*$", "", line)
        assert where, f"{guide}: {command!r} comes before any '# on ...' comment"
        steps.append(Step(where, command))
    return steps


class Machines:
    """The machines of one harness run: `up` starts them, `down` removes everything."""

    def __init__(self, names: dict[str, set[str]], work: Path) -> None:
        """`names`: each machine's name and roles (``head``, ``node``, ``driver``,
        ``services``)."""
        self.run = uuid.uuid4().hex[:6]
        self.network = f"hm-{self.run}"
        self.work = work
        self.machines = {
            name: Machine(name, f"hm-{self.run}-{name}", roles=set(roles))
            for name, roles in names.items()
        }

    def __getitem__(self, name: str) -> Machine:
        return self.machines[name]

    def having(self, role: str) -> list[Machine]:
        return [m for m in self.machines.values() if role in m.roles]

    @property
    def head(self) -> Machine:
        return self.having("head")[0]

    @property
    def driver(self) -> Machine:
        return self.having("driver")[0]

    # -- starting and stopping -----------------------------------------------------------

    def up(self, wheels: Path) -> None:
        image = machine_image()
        docker("network", "create", "--driver", "bridge", self.network)
        repo = self.work / "hangar.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(repo)], check=True)
        for m in self.machines.values():
            self._start(m, image, wheels, repo)
        services = self.having("services")[0]
        self._services(services)
        for m in self.having("node"):
            self._engine(m)
        self._load_base_images()

    def _start(self, m: Machine, image: str, wheels: Path, repo: Path) -> None:
        (self.work / m.name / "docker").mkdir(parents=True, exist_ok=True)
        args = ["run", "-d", "--name", m.container, "--hostname", m.name]
        args += ["--network", self.network, "--shm-size", "2g", "--cgroupns", "host"]
        if "services" in m.roles:
            args += ["--network-alias", "services"]
        for cap in _CAPS:
            args += ["--cap-add", cap]
        for opt in ("seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"):
            args += ["--security-opt", opt]
        args += ["-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"]
        args += ["-v", f"{self.work / m.name / 'docker'}:/var/lib/docker"]
        args += ["-v", f"{wheels}:/srv/wheels:ro", "-v", f"{repo}:/srv/hangar.git:ro"]
        for key, value in MACHINE_ENV.items():
            args += ["-e", f"{key}={value}"]
        docker(*args, "--label", f"hangar.machines={self.run}", image, "sleep", "infinity")
        m.address = docker(
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            m.container,
        ).strip()

    def _engine(self, m: Machine) -> None:
        """The machine's own docker engine, trusting the services machine's registry as
        the guide says (`insecure-registries`), its containers under the machine's cgroup."""
        daemon = {"insecure-registries": [f"services:{REGISTRY_PORT}"]}
        config = shlex.quote(json.dumps(daemon))
        m.sh(f"mkdir -p /etc/docker && echo {config} > /etc/docker/daemon.json")
        parent = m.sh("awk -F: '/:freezer:/{print $3}' /proc/self/cgroup").strip() or "/"
        m.background(
            "dockerd --bridge=none --iptables=false --ip6tables=false "
            f"--cgroup-parent={shlex.quote(parent.rstrip('/') + '/engine')}",
            "/var/log/dockerd.log",
        )
        self._wait(m, "docker info >/dev/null 2>&1", "its docker engine")

    def _services(self, m: Machine) -> None:
        """PostgreSQL, S3 (moto's server), a registry and the scripted model, on the
        services machine."""
        m.sh(
            "cfg=$(ls -d /etc/postgresql/*/main) && "
            "echo \"listen_addresses = '*'\" >> $cfg/postgresql.conf && "
            "echo 'host all all 0.0.0.0/0 scram-sha-256' >> $cfg/pg_hba.conf && "
            "pg_ctlcluster $(basename $(dirname $cfg)) main start && "
            'su postgres -c "psql -qc \\"create user hangar password \'hangar\'\\"" && '
            "su postgres -c 'createdb -O hangar hangar'"
        )
        m.sh("python3 -m venv /opt/moto && /opt/moto/bin/pip install -q 'moto[server]>=5,<6'")
        m.background(f"/opt/moto/bin/moto_server -H 0.0.0.0 -p {S3_PORT}", "/var/log/moto.log")
        # The scripted model (hangar's, from the clone, in a virtualenv of its own), for
        # the decision suite's prompt trials: the models' endpoint on another machine.
        m.put(EXAMPLES / "decision", "/srv/model/decision")
        m.sh(
            "git clone -q /srv/hangar.git /srv/model/hangar && python3 -m venv /opt/model && "
            "/opt/model/bin/pip install -q /srv/model/hangar"
        )
        m.background(
            "cd /srv/model && /opt/model/bin/hangar model serve decision/scripted-model.yaml "
            f"--host 0.0.0.0 --port {MODEL_PORT}",
            "/var/log/model.log",
        )
        m.sh(
            "mkdir -p /etc/docker/registry && printf 'version: 0.1\\nstorage:\\n  filesystem:\\n"
            "    rootdirectory: /var/lib/registry\\nhttp:\\n  addr: 0.0.0.0:%s\\n' "
            f"{REGISTRY_PORT} > /etc/docker/registry/harness.yml"
        )
        m.background(
            "docker-registry serve /etc/docker/registry/harness.yml", "/var/log/registry.log"
        )
        self._wait(
            m,
            'python3 -c "import urllib.request as u; '
            f"u.urlopen(u.Request('http://localhost:{S3_PORT}/hangar', method='PUT'))\"",
            "S3 and its bucket",
        )

    def _load_base_images(self) -> None:
        """The base image and its stock variant, from this host into each node's engine."""
        from hangar.sandbox.images import DEFAULT_BASE_TAG

        saved = self.work / "base.tar"
        docker("save", "-o", str(saved), DEFAULT_BASE_TAG, timeout=900)
        for m in self.having("node"):
            with saved.open("rb") as f:
                subprocess.run(
                    ["docker", "exec", "-i", m.container, "docker", "load", "-q"],
                    stdin=f,
                    check=True,
                    capture_output=True,
                    timeout=900,
                )
        saved.unlink()

    def _wait(self, m: Machine, check: str, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not m.ok(check):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{m.name}: {what} did not come up in {timeout} s")
            time.sleep(1)

    def down(self) -> None:
        """Every machine and the network removed, and the machines' files."""
        for m in self.machines.values():
            docker("rm", "-f", m.container, check=False)
        docker("network", "rm", self.network, check=False)
        # Files the machines' root wrote (their engines' layers): removed from inside one.
        docker(
            "run",
            "--rm",
            "-v",
            f"{self.work}:/w",
            "--network",
            "none",
            machine_image(),
            "bash",
            "-c",
            "rm -rf /w/*",
            check=False,
        )

    # -- faults --------------------------------------------------------------------------

    def kill(self, name: str) -> None:
        docker("kill", self[name].container)

    def freeze(self, name: str) -> None:
        docker("pause", self[name].container)

    def thaw(self, name: str) -> None:
        docker("unpause", self[name].container)

    # -- the guide -----------------------------------------------------------------------

    def follow_guide(self, until: str = "the driver", slots: int | None = None) -> list[str]:
        """Run the clusters guide's commands on the machines they name, up to (not
        including) the first step on `until`; what each printed."""
        said = []
        for step in guide_steps():
            if step.where == until:
                break
            said += self.step(step)
        return said

    def step(self, step: Step) -> list[str]:
        """One step of the guide, on each machine it names."""
        if step.where == "copy":
            token = self.head.sh("cat ~/.ray/auth_token")
            for m in self.machines.values():
                if m is not self.head and m.roles & {"node", "driver"}:
                    copy = f"printf %s {shlex.quote(token)} > ~/.ray/auth_token"
                    m.sh(f"mkdir -p ~/.ray && umask 077 && {copy}")
            return []
        targets = {
            "every machine": [m for m in self.machines.values() if m.roles & {"node", "driver"}],
            "every node": self.having("node"),
            "the head": [self.head],
            "each other node": [m for m in self.having("node") if m is not self.head],
            "the driver": [self.driver],
        }[step.where]
        return [f"{m.name}$ {step.command}\n" + m.sh(self.filled(step.command, m)) for m in targets]

    def filled(self, command: str, m: Machine) -> str:
        """`command` with the guide's placeholders filled in for machine `m`."""
        return (
            command.replace("REPOSITORY", "/srv/hangar.git")
            .replace("THIS_MACHINE", m.address)
            .replace("HEAD", self.head.address)
        )

    def sandboxes(self) -> dict[str, list[str]]:
        """The hangar sandboxes each node's engine still has (a killed node's are gone
        with it)."""
        left = {}
        for m in self.having("node"):
            state = docker("inspect", "-f", "{{.State.Running}}", m.container, check=False).strip()
            if state != "true":
                continue
            out = m.sh("docker ps -aq --filter label=hangar.managed=true", check=False).split()
            left[m.name] = out
        return left


@contextlib.contextmanager
def machines(names: dict[str, set[str]], work: Path, wheels: Path) -> Any:
    """`Machines` up for the block, removed after."""
    harness = Machines(names, work)
    try:
        harness.up(wheels)
        yield harness
    finally:
        harness.down()


SWEEP = """\
# The harness's sweep: execution scenarios (a repository bundle, a local git folder),
# Harbor tasks built by the nodes and shared through the registry, and a decision suite.
id: {sweep_id}
scenarios: [median/scenario.yaml, median-local.yaml, dataset, decision/suite.yaml]
image_map:
  "ubuntu:*": hangar/base:bookworm-stock
  "debian:*": hangar/base:bookworm-stock
  "python:*": hangar/base:bookworm-stock
registry: services:{registry}/hangar
agents_file: agents.yaml
agents:
  oracle: {{kind: reference, role: oracle}}
  prompt: {{kind: prompt, reasoning_effort: low}}
models:
  - id: scripted-decider
    base_url: http://services:{model}/v1
    api_key_env: HANGAR_SCRIPTED_KEY
    price: {{input: 1.25, output: 10.0, cached_input: 0.125}}
store: postgresql+psycopg://hangar:hangar@services/hangar
evidence: s3://hangar/sweeps
evidence_endpoint: http://services:{s3}
"""

#: Checks the driver runs after sweeps (with hangar's interpreter; arguments: the store,
#: the sweep ids comma-separated, the S3 endpoint): per sweep, every trial's final attempt,
#: its verdict and node, and whether the evidence object at its URI has the sha256 the
#: store recorded; and every task image a trial used, by tag: [node, built, image id].
CHECK = """
import hashlib, io, json, sys, tarfile
from urllib.parse import urlparse
import boto3
from hangar.store import ResultsStore
store = ResultsStore(sys.argv[1], create=False)
s3 = boto3.client("s3", endpoint_url=sys.argv[3])
out = {"sweeps": {}, "builds": {}}
for sweep in sys.argv[2].split(","):
    mine = out["sweeps"][sweep] = {"final": {}, "mismatched": []}
    for r in store.results(sweep):
        mine["final"][r.trial_key] = {"verdict": str(r.verdict.value), "node": r.node,
            "reason": r.reason[:300], "scenario": r.scenario_id, "agent": r.agent, "arm": r.arm}
        if r.evidence_uri.startswith("store:///"):  # a pool's trial: kept with its result
            body = store.bundle(r.evidence_uri.removeprefix("store:///"))
        else:
            where = urlparse(r.evidence_uri)
            body = s3.get_object(Bucket=where.netloc, Key=where.path.lstrip("/"))["Body"].read()
        if hashlib.sha256(body).hexdigest() != (r.evidence_sha256 or "").removeprefix("sha256:"):
            mine["mismatched"].append(r.trial_key)
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.endswith("image.json"):
                    image = json.load(tar.extractfile(m))
                    if str(image.get("tag", "")).startswith("hangar-task/"):
                        out["builds"].setdefault(image["tag"], []).append(
                            [r.node.split("/")[0], image["built"], image["image_id"]])
    mine["attempts"] = sum(1 for _ in store.results(sweep, all_attempts=True))
print(json.dumps(out))
"""


def write_sweep(folder: Path, sweep_id: str, agents: str = "gold", repeats: int = 1) -> Path:
    """The harness's sweep in `folder` (the driver's working folder), as ``sweep.yaml``,
    each trial `repeats` times."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("median", "repos", "decision"):
        shutil.copytree(EXAMPLES / name, folder / name, dirs_exist_ok=True)
    (folder / "dataset").mkdir(exist_ok=True)
    for task in ("fix-median", "count-lines"):
        shutil.copytree(EXAMPLES / "harbor" / "dataset" / task, folder / "dataset" / task)
    statkit = folder / "repos" / "statkit"
    subprocess.run(
        ["git", "clone", "-q", str(folder / "repos" / "statkit.bundle"), str(statkit)], check=True
    )
    local = (folder / "median" / "scenario.yaml").read_text()
    local = local.replace("id: statkit-median-even", "id: statkit-median-local")
    local = local.replace("repository: ../repos/statkit.bundle", "repository: repos/statkit")
    for pinned in ("file: prepare.py", "file: verify.py", "source: hidden/"):
        local = local.replace(pinned, pinned.replace(": ", ": median/"))
    (folder / "median-local.yaml").write_text(local)
    chosen = yaml_pick(EXAMPLES / "agents.yaml", agents)
    (folder / "agents.yaml").write_text(chosen)
    (folder / "sweep.yaml").write_text(
        SWEEP.format(sweep_id=sweep_id, registry=REGISTRY_PORT, model=MODEL_PORT, s3=S3_PORT)
        + f"repeats: {repeats}\n"
    )
    return folder / "sweep.yaml"


def yaml_pick(path: Path, names: str) -> str:
    """The agents file with only the agents named (comma-separated)."""
    import yaml

    data = yaml.safe_load(path.read_text())
    return yaml.safe_dump({k: v for k, v in data.items() if k in names.split(",")})
