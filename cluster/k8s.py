"""The Kubernetes manifests of a hangar farm, rendered from the Helm chart's values.

`render(values)` gives the objects the chart installs (the worker ServiceAccount and
its Role in the sandbox namespace, the default-deny NetworkPolicy, the KubeRay
RayCluster with ``hangar_sandbox`` slots per worker, the dashboard ConfigMaps, a
PodMonitor, an optional RayJob running a sweep) plus an example sandbox Pod as
`KubernetesSandbox` creates it: `hangar cluster k8s-manifests` prints them for review
without a cluster, and the tests validate them against the Kubernetes and KubeRay
schemas. The Helm templates in ``helm/hangar/templates`` build the same objects.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from hangar.dashboards.provisioning import rendered
from hangar.sandbox.base import SandboxSpec
from hangar.sandbox.kubernetes import KubernetesConfig, network_policy, pod_manifest

CHART = Path(__file__).resolve().parent.parent / "helm" / "hangar"


def default_values() -> dict[str, Any]:
    """The chart's values.yaml."""
    data: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return data


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` deep-merged over `base` (as Helm merges a values file)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _secret_env(secrets: dict[str, Any]) -> list[dict[str, Any]]:
    """Environment from existing Secrets, by reference only (no secret value in values)."""
    env = []
    for ref in secrets.get("env", []):
        env.append(
            {
                "name": ref["name"],
                "valueFrom": {
                    "secretKeyRef": {
                        "name": ref["secret"],
                        "key": ref["key"],
                        "optional": ref.get("optional", False),
                    }
                },
            }
        )
    return env


def _ray_container(v: dict[str, Any], name: str, extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "image": v["image"]["repository"] + ":" + str(v["image"]["tag"]),
        "imagePullPolicy": v["image"]["pullPolicy"],
        "env": [
            {"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_worker_niceness", "value": "0"},
            {
                "name": "RAY_AUTH_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {"name": v["ray"]["authTokenSecret"], "key": "token"}
                },
            },
            *extra_env,
            *_secret_env(v.get("secrets", {})),
        ],
        "ports": [{"containerPort": int(v["ray"]["metricsPort"]), "name": "metrics"}],
        "resources": v["ray"][name.replace("ray-", "")]["resources"],
    }


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object the chart installs, and an example sandbox Pod."""
    v = values
    ns, sandbox_ns = v["namespace"], v["sandbox"]["namespace"]
    name = v["name"]
    sa = f"{name}-worker"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": f"{name}-sandboxes", "namespace": sandbox_ns},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["create", "get", "list", "watch", "delete"],
                },
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["create", "get"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{name}-sandboxes", "namespace": sandbox_ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"{name}-sandboxes",
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        },
        network_policy(sandbox_ns),
    ]
    env = [
        {"name": "HANGAR_K8S_NAMESPACE", "value": sandbox_ns},
        {"name": "HANGAR_K8S_RUNTIME_CLASS", "value": v["sandbox"].get("runtimeClassName") or ""},
    ]
    head = _ray_container(v, "ray-head", env)
    worker = _ray_container(v, "ray-worker", env)
    slots = int(v["ray"]["worker"]["sandboxSlots"])
    metrics = str(v["ray"]["metricsPort"])
    labels = {"app.kubernetes.io/name": name}
    objects.append(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {
                "rayVersion": str(v["ray"]["version"]),
                "headGroupSpec": {
                    "serviceType": "ClusterIP",
                    "rayStartParams": {
                        "num-cpus": "0",
                        "dashboard-host": "0.0.0.0",  # noqa: S104 - in the pod, for its Service
                        "metrics-export-port": metrics,
                    },
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"serviceAccountName": sa, "containers": [head]},
                    },
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "sandbox-workers",
                        "replicas": int(v["ray"]["worker"]["replicas"]),
                        "minReplicas": int(v["ray"]["worker"]["minReplicas"]),
                        "maxReplicas": int(v["ray"]["worker"]["maxReplicas"]),
                        "rayStartParams": {
                            "resources": json.dumps({"hangar_sandbox": slots}),
                            "metrics-export-port": metrics,
                        },
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {"serviceAccountName": sa, "containers": [worker]},
                        },
                    }
                ],
            },
        }
    )
    if v["dashboards"]["configMaps"]:
        for file, text in rendered().items():
            objects.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": f"{name}-{file.removesuffix('.json')}",
                        "namespace": ns,
                        "labels": {"grafana_dashboard": "1"},
                    },
                    "data": {file: text},
                }
            )
    if v["metrics"]["podMonitor"]:
        objects.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PodMonitor",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
                },
            }
        )
    job = v["rayJob"]
    if job["enabled"]:
        objects.append(
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayJob",
                "metadata": {"name": f"{name}-sweep", "namespace": ns},
                "spec": {
                    "entrypoint": f"hangar run /etc/hangar/sweep/{job['sweepKey']} --json",
                    "clusterSelector": {"ray.io/cluster": name},
                    "submitterPodTemplate": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "submit",
                                    "image": head["image"],
                                    "volumeMounts": [
                                        {"name": "sweep", "mountPath": "/etc/hangar/sweep"}
                                    ],
                                }
                            ],
                            "volumes": [
                                {"name": "sweep", "configMap": {"name": job["sweepConfigMap"]}}
                            ],
                        }
                    },
                },
            }
        )
    config = KubernetesConfig(
        namespace=sandbox_ns, runtime_class=v["sandbox"].get("runtimeClassName") or None
    )
    example = SandboxSpec(image=v["sandbox"]["image"], sweep="example", trial="0" * 64)
    objects.append(pod_manifest(example, "hangar-example-sandbox", config))
    return objects


def render_yaml(values: dict[str, Any]) -> str:
    """`render` as one YAML stream."""
    return yaml.safe_dump_all(render(values), sort_keys=False)
