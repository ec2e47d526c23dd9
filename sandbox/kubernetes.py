"""`KubernetesSandbox`: one Pod per trial, through the official kubernetes client.

The pod gets no service-account token, runs as the non-root sandbox user with
``allowPrivilegeEscalation: false``, every capability dropped and the RuntimeDefault
seccomp profile, requests equal to limits, an optional ``runtimeClassName`` (gVisor),
the hangar labels, and ``activeDeadlineSeconds`` from the trial's budget. A default-deny
NetworkPolicy for sandbox pods is created once per namespace. The keeper
(``sleep infinity``) is PID 1 of the pod: the kernel ignores signals sent to a PID
namespace's init from inside it, so the agent cannot end its own sandbox.

Files move as tar streams over exec (like ``kubectl cp``). A "mount" cannot bind a
worker's folder into a pod on another node, so it is an emptyDir filled with the
folder's contents when the sandbox starts and, for a writable mount, copied back
(deletions included) when it stops: the trial sees the same workspace either way.
The exec API has no working directory, environment or user: commands run under
``env -C DIR VAR=...`` and every command runs as the pod's user; stdin goes through a
file. A pod that cannot be scheduled within a bound, or whose image cannot be pulled,
is `SandboxUnavailable` with the cluster's own reason (a trial's `infra_error`).

Not run against a real cluster here (none can run on the development machine): the
manifests are validated offline, and the conformance battery runs wherever
``KUBECONFIG`` reaches a cluster.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import re
import shlex
import shutil
import tarfile
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel

from hangar.errors import (
    ConfigError,
    SandboxError,
    SandboxFileNotFound,
    SandboxFileTooLarge,
    SandboxIsADirectory,
    SandboxUnavailable,
)
from hangar.sandbox.archive import extract_untrusted, tar_directory
from hangar.sandbox.base import (
    LABEL_MANAGED,
    SANDBOX_UID,
    SIGKILL_EXIT,
    ExecOutput,
    ExecResult,
    ExecStream,
    OutputCallback,
    Sandbox,
    SandboxSpec,
    command_argv,
    describe,
    timeout_argv,
)
from hangar.sandbox.bundle_images import COPY_COMMAND
from hangar.sandbox.config import KubernetesConfig
from hangar.sandbox.helper import POD_FOLDER, POD_PATH

log = logging.getLogger(__name__)

_PULL_FAILURES = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
_BROKEN = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


def _label_value(value: str) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:63].strip("-_.")
    return cleaned or "none"


def _copier(
    volume: str, target: str, image: str, config: KubernetesConfig, resources: dict[str, str]
) -> dict[str, Any]:
    """The init container that fills `volume` from a mount's image (an agent bundle's,
    `hangar.sandbox.bundle_images`) with the image's own static busybox: nothing of the
    task's image runs, and the sandbox container sees the volume read-only."""
    return {
        "name": f"copy-{volume}",
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": [*COPY_COMMAND, target],
        "resources": {"requests": resources, "limits": resources},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": volume, "mountPath": target}],
    }


def pod_name(spec: SandboxSpec) -> str:
    """A unique, valid pod name for the sandbox."""
    return f"hangar-{_label_value(spec.trial)[:20].lower().strip('-.')}-{uuid.uuid4().hex[:8]}"


def pod_manifest(spec: SandboxSpec, name: str, config: KubernetesConfig) -> dict[str, Any]:
    """The Pod of one sandbox (also what `hangar cluster k8s-manifests` prints)."""
    labels = spec.labels()
    volumes, mounts, inits = [], [], []
    cpu = f"{int(spec.limits.cpus * 1000)}m"
    resources = {"cpu": cpu, "memory": str(spec.limits.memory)}
    from_images = {m.target: m.image for m in spec.mounts if m.image}
    read_only = {m.target for m in spec.mounts if m.read_only}
    targets = sorted({spec.workdir, *(m.target for m in spec.mounts)})
    for i, target in enumerate(targets):
        volume: dict[str, Any] = {"name": f"files-{i}", "emptyDir": {}}
        volumes.append(volume)
        mounts.append(
            {"name": f"files-{i}", "mountPath": target}
            | ({"readOnly": True} if target in from_images and target in read_only else {})
        )
        if target in from_images:
            inits.append(_copier(f"files-{i}", target, from_images[target], config, resources))
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": config.namespace,
            "labels": {
                "app.kubernetes.io/name": "hangar-sandbox",
                LABEL_MANAGED: "true",
                "hangar.sweep": _label_value(spec.sweep),
                "hangar.trial": _label_value(spec.trial)[:16],
            },
            # Full values (labels are limited to 63 characters and no ':').
            "annotations": {k: v for k, v in labels.items() if k != LABEL_MANAGED},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": int(spec.ttl_s),
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": SANDBOX_UID,
                "runAsGroup": SANDBOX_UID,
                "fsGroup": SANDBOX_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "sandbox",
                    "image": spec.image,
                    "imagePullPolicy": config.image_pull_policy,
                    "command": ["sleep", "infinity"],
                    "workingDir": spec.workdir,
                    "env": [
                        {"name": "HOME", "value": spec.home},
                        *({"name": k, "value": v} for k, v in sorted(spec.env.items())),
                    ],
                    "resources": {"requests": resources, "limits": resources},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "privileged": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": mounts,
                }
            ],
            "volumes": volumes,
        },
    }
    if inits:
        pod["spec"]["initContainers"] = inits
    if config.runtime_class:
        pod["spec"]["runtimeClassName"] = config.runtime_class
    if config.node_selector:
        pod["spec"]["nodeSelector"] = dict(config.node_selector)
    if config.tolerations:
        pod["spec"]["tolerations"] = [t.model_dump(exclude_none=True) for t in config.tolerations]
    if config.service_account:
        pod["spec"]["serviceAccountName"] = config.service_account
    pod["metadata"]["labels"] = {**config.labels, **pod["metadata"]["labels"]}
    return pod


def network_policy(namespace: str) -> dict[str, Any]:
    """Deny all ingress and egress of hangar's sandbox pods in `namespace`: the policy of
    ``networkpolicy.yaml`` beside this module, which the Helm chart installs too."""
    source = Path(__file__).parent / "networkpolicy.yaml"
    policy: dict[str, Any] = yaml.safe_load(source.read_text())
    policy["metadata"]["namespace"] = namespace
    if policy["spec"]["podSelector"]["matchLabels"] != {LABEL_MANAGED: "true"}:
        raise ConfigError("networkpolicy.yaml must select the pods labelled hangar.managed")
    return policy


def _api() -> Any:
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise ConfigError("the kubernetes backend needs: pip install 'hangar-farm[k8s]'") from None
    try:
        config.load_incluster_config()
    except ConfigException:
        try:
            config.load_kube_config()
        except (ConfigException, OSError) as exc:
            raise SandboxUnavailable(
                f"no Kubernetes cluster configured ({exc}): set KUBECONFIG"
            ) from exc
    return client.CoreV1Api(), client.NetworkingV1Api()


class KubernetesSandbox(Sandbox):
    """A sandbox in a Kubernetes Pod."""

    backend: ClassVar[str] = "kubernetes"
    config: KubernetesConfig
    other_users: ClassVar[bool] = False
    live_mounts: ClassVar[bool] = False

    @classmethod
    def engine_problem(cls, config: BaseModel | None = None) -> str | None:
        """No cluster is configured, or its API refuses to list pods in the namespace."""
        namespace = getattr(config, "namespace", None) or KubernetesConfig().namespace
        try:
            core, _ = _api()
            core.list_namespaced_pod(namespace, limit=1)
        except (SandboxUnavailable, ConfigError) as exc:
            return str(exc)
        except Exception as exc:  # the client's ApiException, urllib3's connection errors
            return (
                f"the Kubernetes API refused to list pods in namespace {namespace!r}: "
                f"{getattr(exc, 'reason', None) or exc} (check KUBECONFIG, the namespace and "
                "the workers' ServiceAccount role)"
            )
        return None

    def __init__(self, spec: SandboxSpec, *, config: KubernetesConfig | None = None) -> None:
        super().__init__(spec)
        self.config = config or KubernetesConfig()
        self.name: str | None = None
        self._core: Any = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Create the pod, wait for it to run, fill its mounts."""
        if self.name is not None:
            return
        if self.spec.network != "none":
            raise SandboxError("the kubernetes backend cannot join a service network (use docker)")
        from kubernetes.client.exceptions import ApiException

        self._core, networking = _api()
        ns = self.config.namespace
        try:
            networking.create_namespaced_network_policy(ns, network_policy(ns))
        except ApiException as exc:
            if exc.status != 409:  # already there
                raise SandboxUnavailable(
                    f"cannot create the sandbox NetworkPolicy: {exc.reason}"
                ) from exc
        name = pod_name(self.spec)
        try:
            self._core.create_namespaced_pod(ns, pod_manifest(self.spec, name, self.config))
        except ApiException as exc:  # quota, admission webhooks, RBAC
            raise SandboxUnavailable(
                f"the cluster refused the sandbox pod: {exc.reason}: {(exc.body or '')[:300]}"
            ) from exc
        self.name = name
        self._wait_running()
        for mount in self.spec.mounts:
            if not mount.image:  # an init container filled it from its image
                self.copy_in(mount.source, mount.target)

    def _wait_running(self) -> None:
        deadline = time.monotonic() + self.config.schedule_timeout_s
        reason = "not scheduled yet"
        while time.monotonic() < deadline:
            pod = self._core.read_namespaced_pod(self.name, self.config.namespace)
            if pod.status.phase == "Running":
                return
            if pod.status.phase in ("Failed", "Succeeded"):
                raise SandboxUnavailable(f"sandbox pod {self.name} ended: {pod.status.reason}")
            for cond in pod.status.conditions or []:
                if cond.type == "PodScheduled" and cond.status == "False":
                    reason = f"{cond.reason}: {cond.message}"
            statuses = [
                *(pod.status.init_container_statuses or []),
                *(pod.status.container_statuses or []),
            ]
            for cs in statuses:
                waiting = cs.state.waiting if cs.state else None
                if waiting is not None and waiting.reason in _PULL_FAILURES | _BROKEN:
                    raise SandboxUnavailable(
                        f"sandbox pod {self.name}: {waiting.reason}: {waiting.message}"
                    )
            time.sleep(1)
        raise SandboxUnavailable(
            f"sandbox pod {self.name} did not start within {self.config.schedule_timeout_s:g} s "
            f"({reason})"
        )

    def stop(self) -> None:
        """Copy writable mounts back, then delete the pod (every process ends with it)."""
        if self.name is None:
            return
        try:
            for mount in self.spec.mounts:
                if not mount.read_only:
                    self._sync_back(mount.target, mount.source)
        finally:
            self.close()

    def _sync_back(self, target: str, source: Path) -> None:
        staging = Path(tempfile.mkdtemp(prefix="hangar-k8s-"))
        skipped: list[str] = []
        try:
            # What the agent put in its workspace is its outcome: a pipe or a link out of
            # it is left behind (and logged), never a failure of the farm.
            self._copy_out(target, staging / "out", skipped)
            if skipped:
                log.warning("left in pod %s when copying %s back: %s", self.name, target, skipped)
            for child in source.iterdir():  # deletions in the pod are deletions here
                shutil.rmtree(
                    child
                ) if child.is_dir() and not child.is_symlink() else child.unlink()
            for child in (staging / "out").iterdir():
                shutil.move(str(child), source / child.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def close(self) -> None:
        """Delete the pod at once; idempotent."""
        name, self.name = self.name, None
        if name is None or self._core is None:
            return
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.delete_namespaced_pod(name, self.config.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise SandboxUnavailable(f"cannot delete sandbox pod {name}: {exc.reason}") from exc

    # -- exec -----------------------------------------------------------------------------

    def open_stream(self, argv: list[str], *, user: str | None = None) -> ExecStream:
        """Start `argv` over the exec API with stdin open, binary both ways."""
        if user is not None and user != self.spec.user:
            raise SandboxError("a Kubernetes sandbox runs every command as the pod's user")
        return _WebSocketStream(self._stream(argv, stdin=True, binary=True))

    def _stream(self, argv: list[str], *, stdin: bool = False, binary: bool = False) -> Any:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        if self.name is None:
            raise SandboxError("the sandbox is not started (call start() or use `with`)")
        try:
            return stream(
                self._core.connect_get_namespaced_pod_exec,
                self.name,
                self.config.namespace,
                command=argv,
                stdin=stdin,
                binary=binary,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        except ApiException as exc:
            raise SandboxUnavailable(
                f"exec in sandbox pod {self.name} failed: {exc.reason}"
            ) from exc

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        stdin: str | bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run a command in the pod (see `Sandbox.exec`)."""
        if user is not None and user != self.spec.user:
            raise SandboxError("a Kubernetes sandbox runs every command as the pod's user")
        return self._run(
            cmd,
            timeout=timeout,
            cwd=cwd,
            env=env,
            stdin=stdin,
            on_output=on_output,
            limit=self.spec.output_limit,
        )

    def _run(
        self,
        cmd: str | Sequence[str],
        *,
        limit: int,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        argv = timeout_argv(command_argv(cmd), timeout, self.spec.kill_after_s)
        if stdin is not None:
            path = f"/tmp/.hangar-stdin-{uuid.uuid4().hex}"
            self._write_bytes(path, stdin.encode() if isinstance(stdin, str) else stdin, 0o600)
            argv = ["sh", "-c", 'f="$0"; shift; exec "$@" < "$f"', path, *argv]
        pairs = [f"{k}={v}" for k, v in (env or {}).items()]
        argv = ["env", "-C", self.resolve(cwd) if cwd else self.spec.workdir, *pairs, *argv]
        output = ExecOutput(self.spec, timeout, on_output, stdout_limit=limit)
        ws = self._stream(argv)
        try:
            while ws.is_open() and not output.past_deadline:
                ws.update(timeout=1)
                if text := ws.read_stdout():
                    output.feed("stdout", text.encode())
                if text := ws.read_stderr():
                    output.feed("stderr", text.encode())
            code = ws.returncode
        finally:
            ws.close()
        if code is None:
            if not self._running():
                raise SandboxUnavailable(
                    f"sandbox pod {self.name} went away during {describe(argv)}"
                )
            code = SIGKILL_EXIT
        return output.result(int(code))

    def check_alive(self) -> None:
        """Raise `SandboxUnavailable` when the pod is gone (see `Sandbox`)."""
        if not self._running():
            raise SandboxUnavailable(f"sandbox pod {self.name} is not running any more")

    def _running(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            pod = self._core.read_namespaced_pod(self.name, self.config.namespace)
        except ApiException:
            return False
        return bool(pod.status.phase == "Running")

    # -- files (tar over exec, base64 on the wire) -----------------------------------------

    @property
    def _transfer_limit(self) -> int:
        """Output kept for a file transfer: the read cap, base64-encoded, plus headroom."""
        return self.spec.read_limit * 4 // 3 + 1024 * 1024

    def _send(self, data: bytes, shell: str) -> ExecResult:
        """Run `shell` with `data` on its stdin (sent base64 inside the command's own file)."""
        encoded = base64.b64encode(data).decode()
        chunk = 64 * 1024
        path = f"/tmp/.hangar-upload-{uuid.uuid4().hex}"
        for i in range(0, max(len(encoded), 1), chunk):
            part = encoded[i : i + chunk]
            res = self.exec(["sh", "-c", f"printf %s {shlex.quote(part)} >> {path}"])
            if not res.ok:
                raise SandboxError(f"upload to the sandbox failed: {res.stderr.strip()}")
        return self.exec(
            ["sh", "-c", f"base64 -d < {path} | {shell}; rc=$?; rm -f {path}; exit $rc"]
        )

    def _write_bytes(self, path: str, data: bytes, mode: int) -> None:
        p = PurePosixPath(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(p.name)
            info.size, info.mode, info.uid, info.gid = len(data), mode, SANDBOX_UID, SANDBOX_UID
            tar.addfile(info, io.BytesIO(data))
        res = self._send(
            buf.getvalue(),
            f"mkdir -p {shlex.quote(str(p.parent))} && tar -x -o -C {shlex.quote(str(p.parent))}",
        )
        if not res.ok:
            raise SandboxError(f"cannot write {path} in the sandbox: {res.stderr.strip()}")

    def _read_bytes(self, path: str) -> bytes:
        q = shlex.quote(path)
        probe = self.exec(
            [
                "sh",
                "-c",
                f"if [ -d {q} ]; then echo dir; elif [ -e {q} ]; then "
                f"stat -L -c %s {q}; else echo missing; fi",
            ]
        )
        kind = probe.stdout.strip()
        if kind == "missing":
            raise SandboxFileNotFound(f"no such file in the sandbox: {path}")
        if kind == "dir":
            raise SandboxIsADirectory(f"{path} is a folder; use copy_out for folders")
        if int(kind or 0) > self.spec.read_limit:
            raise SandboxFileTooLarge(
                f"{path} is {kind} bytes, over the read cap of "
                f"{self.spec.read_limit} bytes (spec.read_limit)"
            )
        res = self._run(["sh", "-c", f"base64 < {q}"], limit=self._transfer_limit)
        if not res.ok:
            raise SandboxError(f"cannot read {path}: {res.stderr.strip()}")
        return base64.b64decode(res.stdout)

    def copy_in(self, source: Path, target: str) -> None:
        """Copy the contents of host folder `source` into `target` (tar over exec)."""
        if not source.is_dir():
            raise SandboxError(f"copy_in needs a host folder; {source} is not one")
        with tempfile.TemporaryFile() as spool:
            tar_directory(source, spool, uid=SANDBOX_UID, gid=SANDBOX_UID)
            spool.seek(0)
            data = spool.read()
        dest = shlex.quote(self.resolve(target))
        res = self._send(data, f"mkdir -p {dest} && tar -x -o -C {dest}")
        if not res.ok:
            raise SandboxError(f"cannot copy into {target}: {res.stderr.strip()}")

    def copy_out(self, source: str, target: Path) -> None:
        """Copy the contents of sandbox folder `source` into host folder `target`."""
        self._copy_out(source, target)

    def _copy_out(self, source: str, target: Path, skipped: list[str] | None = None) -> None:
        """The folder written by hangar's helper (`POD_PATH`, from its image), run by
        absolute path with no shell: nothing of the pod's image (its sh, env, tar or
        base64, which an agent may have replaced) takes part. Without the helper in the
        pod (a sweep with no registry) a folder is not copied out."""
        if not any(m.target == POD_FOLDER and m.image for m in self.spec.mounts):
            raise SandboxError(
                f"cannot copy {source} out of the pod: that needs hangar's helper in it, which "
                "reaches pods as an image through the sweep's `registry:` (give the sweep one)"
            )
        stream = self.open_stream([POD_PATH, "tar", self.resolve(source)])
        with tempfile.TemporaryFile() as spool:
            try:
                total = 0
                while chunk := stream.recv():
                    total += len(chunk)
                    if total > self.spec.read_limit + 1024 * 1024:
                        raise SandboxFileTooLarge(
                            f"{source} is larger than the cap of {self.spec.read_limit} bytes"
                        )
                    spool.write(chunk)
                code, errors = stream.exit_code(), stream.stderr()
            finally:
                stream.close()
            if code == 3:
                raise SandboxError(f"copy_out needs a folder; {source} is not one (use read_file)")
            left_out = [line.removeprefix("hangar-helper tar: ") for line in errors.splitlines()]
            if code not in (0, 1) or (code == 1 and skipped is None):
                raise SandboxError(f"cannot copy {source} out (exit {code}): {errors[-500:]}")
            if skipped is not None:
                skipped += left_out
            spool.seek(0)
            extract_untrusted(spool, target, strip=1, limit=self.spec.read_limit, skipped=skipped)


class _WebSocketStream(ExecStream):
    """The exec API's websocket (kubernetes.stream, binary mode) as an `ExecStream`.

    One thread reads (`recv`), others write (`send`): the websocket client locks sends
    and reads separately.
    """

    def __init__(self, ws: Any) -> None:
        super().__init__()
        self._ws = ws

    def recv(self) -> bytes:
        ws = self._ws
        while True:
            if ws.peek_stderr():
                self.errors.write(ws.read_stderr())
            if ws.peek_stdout():
                data = ws.read_stdout()
                return data if isinstance(data, bytes) else data.encode()
            if not ws.is_open():
                return b""
            try:
                ws.update(timeout=1)
            except Exception:  # the websocket broke: the stream has ended
                return b""

    def send(self, data: bytes) -> None:
        try:
            self._ws.write_stdin(data)
        except Exception as exc:
            raise SandboxUnavailable(f"lost the exec stream to the pod: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()

    def exit_code(self) -> int | None:
        code = self._ws.returncode
        return None if code is None else int(code)
