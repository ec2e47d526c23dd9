"""The Kubernetes manifests of a hangar farm: the Helm chart, rendered by helm.

The chart (``helm/hangar``) is the one source of the objects a farm installs (the worker
ServiceAccount and its Role in the sandbox namespace, the default-deny NetworkPolicy,
the KubeRay RayCluster with ``hangar_sandbox`` slots per worker, the dashboard
ConfigMaps, a PodMonitor, an optional RayJob running a sweep). `render` runs
``helm template`` (helm from `hangar.cluster.tools`) and adds an example sandbox Pod as
`KubernetesSandbox` creates it: `hangar cluster k8s-manifests` prints them for review
without a cluster, and the tests validate them against the Kubernetes and KubeRay
schemas. The NetworkPolicy is defined once, in ``sandbox/networkpolicy.yaml``, which the
chart reads (``files/networkpolicy.yaml`` links to it) and the backend creates.
"""

from __future__ import annotations

import copy
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from hangar.cluster.tools import require_helm
from hangar.errors import ConfigError
from hangar.sandbox.base import SandboxSpec
from hangar.sandbox.config import KubernetesConfig
from hangar.sandbox.kubernetes import pod_manifest

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


def helm_template(override: dict[str, Any] | None = None, release: str = "hangar") -> str:
    """``helm template`` of the chart with `override` over its values."""
    if not (CHART / "Chart.yaml").is_file():
        raise ConfigError(f"the Helm chart is not at {CHART}: run this from a hangar checkout")
    helm = require_helm()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
        yaml.safe_dump(override or {}, values)
        values.flush()
        run = subprocess.run(
            [str(helm), "template", release, str(CHART), "-f", values.name],
            capture_output=True,
            text=True,
            check=False,
        )
    if run.returncode != 0:
        raise ConfigError(f"helm template failed: {run.stderr.strip()}")
    return run.stdout


def render(override: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's objects as helm renders them, and an example sandbox Pod."""
    objects = [d for d in yaml.safe_load_all(helm_template(override)) if d]
    values = merge(default_values(), override or {})
    config = KubernetesConfig(
        namespace=values["sandbox"]["namespace"],
        runtime_class=values["sandbox"].get("runtimeClassName") or None,
    )
    example = SandboxSpec(image=values["sandbox"]["image"], sweep="example", trial="0" * 64)
    objects.append(pod_manifest(example, "hangar-example-sandbox", config))
    return objects


def render_yaml(override: dict[str, Any] | None = None) -> str:
    """`render` as one YAML stream."""
    return yaml.safe_dump_all(render(override), sort_keys=False)
