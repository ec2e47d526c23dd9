"""`DockerSandbox`: one container per trial, through the docker SDK for Python.

The container's keeper (hangar's static helper, live while the trial's lease is fresh,
under docker's init: `hangar.sandbox.lease`, `hangar.sandbox.helper`) runs as a user of
its own with no capabilities; every command runs as the sandbox user. The container has
no network, no capabilities, ``no-new-privileges``, CPU/memory/pids limits and only the
spec's mounts from the host, and hangar's helper read-only. Commands run through the exec
API under the helper's ``timeout -k``; files move as tar archives through the archive API
(the daemon does the copying, so it works whatever tools the image has)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import secrets
import select
import socket
import struct
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, cast

import docker
import docker.errors
import docker.types
from docker.models.containers import Container
from pydantic import BaseModel

from hangar.errors import (
    ImageNotFound,
    SandboxError,
    SandboxFileNotFound,
    SandboxFileTooLarge,
    SandboxIsADirectory,
    SandboxUnavailable,
    TooManyChanges,
)
from hangar.sandbox.archive import extract_untrusted, tar_directory
from hangar.sandbox.base import (
    LABEL_LEASE,
    SIGKILL_EXIT,
    Change,
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
from hangar.sandbox.config import DockerConfig
from hangar.sandbox.ending import (
    HELD_SHELL,
    HeldExec,
    ended_result,
    exec_second_part,
    second_part,
)
from hangar.sandbox.helper import HELPER_USER, helper_argv, helper_binary
from hangar.sandbox.helper import PATH as HELPER_PATH
from hangar.sandbox.layers import LAYER_ENTRIES, overlay_changes
from hangar.sandbox.lease import MOUNT as LEASE_MOUNT
from hangar.sandbox.lease import Lease, keeper_argv

#: (image id, user) -> (uid, gid), shared by the sandboxes of this process.
_USER_IDS: dict[tuple[str, str], tuple[int, int]] = {}

#: The repository of sandboxes' snapshots (`DockerSandbox.snapshot`).
SNAPSHOTS = "hangar-snapshot"
#: The kernel's count of OOM kills in this container's cgroup: cgroup v2, then v1.
_OOM_EVENTS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


@functools.cache
def docker_client() -> docker.DockerClient:
    """The process's shared docker client (API version negotiated with the daemon).

    Raises `SandboxUnavailable` with what to do when no daemon answers.
    """
    try:
        client = docker.from_env(version="auto", timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise SandboxUnavailable(
            f"no Docker daemon answers at {host} ({exc}). Start one "
            "(`sudo systemctl start docker`, or `sudo dockerd &`), install it "
            "(Debian: `sudo apt-get install docker.io`), or point DOCKER_HOST at one."
        ) from exc
    if client.api.base_url.startswith("http+docker://"):  # a unix socket: no proxy applies
        client.api.trust_env = False  # (requests reads the proxy variables per request)
    return client


def _unavailable(what: str, exc: Exception) -> SandboxUnavailable:
    return SandboxUnavailable(f"docker failed to {what}: {exc}")


class DockerSandbox(Sandbox):
    """A sandbox in a docker container (the default backend)."""

    backend: ClassVar[str] = "docker"
    config: DockerConfig
    scratch_mounts: ClassVar[bool] = True
    helper: ClassVar[bool] = True
    warm: ClassVar[bool] = True

    def __init__(
        self,
        spec: SandboxSpec,
        client: docker.DockerClient | None = None,
        *,
        config: DockerConfig | None = None,
    ) -> None:
        super().__init__(spec)
        self.config = config or DockerConfig()
        self._client = client
        self._container: Container | None = None
        self._path: str | None = None  # the PATH the container was created with
        self._ids: tuple[int, int] | None = None
        self._oom_seen = 0
        self._lease: Lease | None = None

    @classmethod
    def engine_problem(cls, config: BaseModel | None = None) -> str | None:
        """No engine answers, or it lacks the configured runtime."""
        try:
            runtimes = docker_client().info().get("Runtimes") or {}
        except (SandboxUnavailable, docker.errors.DockerException) as exc:
            return str(exc)
        runtime = getattr(config, "runtime", None)
        if runtime and runtime not in runtimes:
            return (
                f"the Docker engine has no runtime {runtime!r} (it has: "
                f"{', '.join(sorted(runtimes))}): install it and register it with dockerd, "
                "or remove `runtime:` from the sweep's `backend:` section"
            )
        return None

    @classmethod
    def image_problem(cls, image: str) -> str | None:
        """Why the engine cannot run `image` (it is not there), or None."""
        try:
            docker_client().images.get(image)
        except docker.errors.ImageNotFound:
            return (
                f"image {image!r} is not on the Docker engine: build it (`hangar image "
                f"build-base` or `hangar image build DIR`) or `docker pull` it"
            )
        except docker.errors.APIError as exc:
            raise _unavailable(f"look up image {image!r}", exc) from exc
        return None

    @classmethod
    def has_command(cls, image: str, command: str) -> bool | None:
        """Whether `image` has `command` on its PATH (a throwaway container, no network,
        as the sandbox user sees it); None when it cannot be told."""
        try:
            docker_client().containers.run(
                image,
                ["sh", "-c", 'command -v "$0" >/dev/null', command],
                network_mode="none",
                network_disabled=True,
                remove=True,
            )
        except docker.errors.ContainerError:
            return False
        except (docker.errors.ImageNotFound, docker.errors.APIError):
            return None
        return True

    @classmethod
    def image_record(cls, image: str) -> dict[str, object]:
        try:
            found = docker_client().images.get(image)
        except (docker.errors.ImageNotFound, docker.errors.APIError):
            return {}
        labels = {k: v for k, v in (found.labels or {}).items() if k.startswith("hangar.")}
        return {"image": image, "id": str(found.id), "labels": labels}

    @classmethod
    def image_folder(cls, image: str, path: str, cache: Path) -> Path | None:
        """A tar archive of folder `path` as it is in `image`, or None if it has none.

        Read once per image id from a created (never started) container and kept under
        `cache`; the archive's top entry is the folder itself.
        """
        api = docker_client().api
        try:
            image_id = str(docker_client().images.get(image).id).removeprefix("sha256:")
        except docker.errors.ImageNotFound as exc:
            raise ImageNotFound(cls.image_problem(image) or str(exc)) from exc
        except docker.errors.APIError as exc:
            raise _unavailable(f"look up image {image!r}", exc) from exc
        name = path.strip("/").replace("/", "_") or "root"
        archive = cache / "image-folders" / image_id[:32] / f"{name}.tar"
        missing = archive.with_suffix(".missing")
        if archive.exists():
            return archive
        if missing.exists():
            return None
        archive.parent.mkdir(parents=True, exist_ok=True)
        try:
            created = api.create_container(image, command=["true"], entrypoint=[])
        except docker.errors.APIError as exc:
            raise _unavailable(f"create a container from {image!r}", exc) from exc
        try:
            stream, _ = api.get_archive(created["Id"], path)
            with tempfile.NamedTemporaryFile(dir=archive.parent, delete=False) as part:
                for chunk in stream:
                    part.write(chunk)
            Path(part.name).replace(archive)  # whole or not at all, also with two writers
            return archive
        except docker.errors.NotFound:
            missing.touch()
            return None
        except docker.errors.APIError as exc:
            raise _unavailable(f"read {path} from image {image!r}", exc) from exc
        finally:
            with contextlib.suppress(docker.errors.APIError):
                api.remove_container(created["Id"], force=True)

    @property
    def client(self) -> docker.DockerClient:
        """The docker client this sandbox talks through."""
        if self._client is None:
            self._client = docker_client()
        return self._client

    @property
    def container(self) -> Container:
        """The running container; `start()` must have been called."""
        if self._container is None:
            raise SandboxError("the sandbox is not started (call start() or use `with`)")
        return self._container

    @property
    def timeout_program(self) -> tuple[str, ...]:
        """The helper's ``timeout``, finding a command named without a ``/`` in the PATH
        the container was created with (never in an environment the helper reads)."""
        return self.timeout_in(None)

    def timeout_in(self, env: dict[str, str] | None) -> tuple[str, ...]:
        """The helper's ``timeout`` for a command run with `env`: its PATH, if it names
        one, else the container's."""
        if env and env.get("PATH"):
            return (*helper_argv("timeout"), "-p", env["PATH"])
        if self._path is None:
            configured = self.container.attrs.get("Config", {}).get("Env") or []
            paths = [e.removeprefix("PATH=") for e in configured if e.startswith("PATH=")]
            self._path = paths[-1] if paths else ""
        return (*helper_argv("timeout"), *(("-p", self._path) if self._path else ()))

    @property
    def container_id(self) -> str:
        """The docker id of the container."""
        return str(self.container.id)

    def start(self) -> None:
        """Create and start the container."""
        if self._container is not None:
            return
        spec = self.spec
        # The keeper lives while this process renews the lease (see sandbox/lease.py).
        self._lease = Lease()
        try:
            self._container = self.client.containers.create(
                spec.image,
                entrypoint=[],
                command=keeper_argv(),
                # The keeper is hangar's helper, run as a user of its own with no
                # capabilities, so that the agent (even as root: killing another user's
                # process needs CAP_KILL) cannot kill it: an agent that could stop its
                # own container would turn a failing trial into a retried infra_error.
                user=HELPER_USER,
                working_dir=spec.workdir,
                environment={"HOME": spec.home, **spec.env},
                hostname="sandbox",
                # No network: a new namespace with loopback only. Disabled as well as
                # "none", so that the engine runs none of its network set-up for the
                # container (its prestart hook re-executes dockerd: half the CPU a
                # container start costs, docs/benchmarks.md).
                **self._network(),
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                ipc_mode="private",
                init=True,
                pids_limit=spec.limits.pids,
                mem_limit=spec.limits.memory,
                memswap_limit=spec.limits.memory,
                nano_cpus=int(spec.limits.cpus * 1e9),
                labels={**self.config.labels, **spec.labels(), LABEL_LEASE: str(self._lease.path)},
                mounts=self._mounts(),
                read_only=spec.read_only_root,
                runtime=self.config.runtime,
            )
            self._container.start()
        except docker.errors.ImageNotFound as exc:
            self.close()
            raise ImageNotFound(self.image_problem(spec.image) or str(exc)) from exc
        except docker.errors.APIError as exc:
            self.close()
            raise self._start_failure(exc) from exc

    def hand_over(self) -> dict[str, str]:
        """The container, still running, for `adopt` in another process; its lease is
        no longer renewed here."""
        container, self._container = self.container, None
        lease, self._lease = self._lease, None
        assert lease is not None
        lease.hand_over()
        return {"container": str(container.id), "lease": str(lease.path)}

    @classmethod
    def adopt(
        cls, spec: SandboxSpec, handle: dict[str, str], config: BaseModel | None = None
    ) -> DockerSandbox:
        """The running container of `handle` (`hand_over`), its lease renewed here."""
        sandbox = cls(spec, config=config if isinstance(config, DockerConfig) else None)
        sandbox._lease = Lease(Path(handle["lease"]))
        try:
            sandbox._container = sandbox.client.containers.get(handle["container"])
        except docker.errors.NotFound as exc:
            sandbox.close()
            raise SandboxUnavailable(f"warm container {handle['container'][:12]} is gone") from exc
        except docker.errors.APIError as exc:
            sandbox.close()
            raise _unavailable("inspect a warm container", exc) from exc
        if sandbox.container.status != "running":
            sandbox.close()
            raise SandboxUnavailable(f"warm container {handle['container'][:12]} stopped")
        return sandbox

    def _network(self) -> dict[str, Any]:
        """No network but loopback; or the trial's service network, when it has one."""
        spec = self.spec
        if spec.network == "none":
            return {"network_mode": "none", "network_disabled": True}
        return {"network": spec.network, "extra_hosts": dict(spec.hosts)}

    def _mounts(self) -> list[docker.types.Mount]:
        """The lease and hangar's helper (read-only), and the spec's folders, each a bind
        mount."""
        assert self._lease is not None
        mounts = [
            docker.types.Mount(
                target=LEASE_MOUNT, source=str(self._lease.path), type="bind", read_only=True
            ),
            docker.types.Mount(
                target=HELPER_PATH, source=str(helper_binary()), type="bind", read_only=True
            ),
        ]
        for m in self.spec.mounts:
            if not m.source.is_dir() and not m.source.is_file():
                raise SandboxError(f"mount source {m.source} does not exist on the host")
            mounts.append(
                docker.types.Mount(
                    target=m.target,
                    source=str(m.source.resolve()),
                    type="bind",
                    read_only=m.read_only,
                )
            )
        return mounts

    def _start_failure(self, exc: docker.errors.APIError) -> SandboxUnavailable:
        """What a refused start means: a runtime the engine lacks, or the engine failed."""
        runtime = self.config.runtime
        if runtime and "runtime" in str(exc).lower():
            return SandboxUnavailable(
                f"the container engine has no runtime {runtime!r} ({exc.explanation}): "
                "install it and register it with dockerd (`docker info` lists the "
                "runtimes), or remove `runtime:` from the sweep's `backend:` section"
            )
        return _unavailable(f"start a container from {self.spec.image!r}", exc)

    # -- exec -----------------------------------------------------------------------------

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
        """Run a command in the container (see `Sandbox.exec`)."""
        argv = timeout_argv(
            command_argv(cmd), timeout, self.spec.kill_after_s, self.timeout_in(env)
        )
        output = ExecOutput(self.spec, timeout, on_output)
        exec_id, attached = self._start_exec(
            argv,
            stdin=stdin is not None,
            env=env,
            workdir=self.resolve(cwd) if cwd else self.spec.workdir,
            user=user,
        )
        try:
            if stdin is not None:
                attached.raw.sendall(stdin.encode() if isinstance(stdin, str) else stdin)
                attached.raw.shutdown(socket.SHUT_WR)
            for stream, chunk in attached.frames(output.deadline):
                output.feed("stdout" if stream == 1 else "stderr", chunk)
        except OSError as exc:
            self._raise_if_dead(f"while running {describe(argv)}")
            raise SandboxUnavailable(f"lost the exec stream of {describe(argv)}: {exc}") from exc
        finally:
            attached.close()
        return self._concluded(exec_id, argv, output)

    def _concluded(self, exec_id: str, argv: list[str], output: ExecOutput) -> ExecResult:
        """The result of an exec whose stream has ended (or whose host deadline passed)."""
        info = self._exec_inspect(exec_id)
        if info.get("Running") or info.get("ExitCode") is None:
            # Stream ended (host deadline or a dead container) while the process still ran.
            self._raise_if_dead(f"while running {describe(argv)}")
            if not output.past_deadline:
                raise SandboxUnavailable(f"exec stream of {describe(argv)} ended early")
            code = SIGKILL_EXIT
        else:
            code = int(info["ExitCode"])
        timed_out = output.timed_out(code)
        oom = code == SIGKILL_EXIT and not timed_out and self._new_oom_kill()
        if code == SIGKILL_EXIT and not oom:
            # A SIGKILL we did not send may be the container dying under us; the daemon
            # can report it running for a moment after its processes were killed.
            settle = 0.0 if timed_out else 2.0
            self._raise_if_dead(f"while running {describe(argv)}", settle_s=settle)
        return output.result(code, timed_out=timed_out, oom=oom)

    def exec_held(self, script: str) -> HeldExec:
        """Run `script`, then hold this one exec for the second part (`Sandbox.exec_held`)."""
        return _DockerHeld(self, script)

    def _start_exec(
        self,
        argv: list[str],
        *,
        stdin: bool,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> tuple[str, _Attached]:
        """Create and start an exec: its id and its attached connection."""
        api = self.client.api
        try:
            exec_id = api.exec_create(
                self.container_id,
                argv,
                stdin=stdin,
                stdout=True,
                stderr=True,
                tty=False,
                environment=env or {},
                workdir=workdir or self.spec.workdir,
                user=user or self.spec.user,
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as exc:
            raise self._gone_or(exc, f"run {describe(argv)}") from exc
        return str(exec_id), _Attached(sock)

    def open_stream(self, argv: list[str], *, user: str | None = None) -> ExecStream:
        """Start `argv` with stdin and stdout attached (see `Sandbox.open_stream`)."""
        exec_id, attached = self._start_exec(argv, stdin=True, user=user)
        return _DockerStream(self, exec_id, attached)

    def _exec_inspect(self, exec_id: str) -> dict[str, Any]:
        try:
            for _ in range(50):
                info: dict[str, Any] = self.client.api.exec_inspect(exec_id)
                if not info.get("Running"):
                    return info
                time.sleep(0.02)
            return info
        except docker.errors.APIError as exc:
            raise self._gone_or(exc, "inspect an exec") from exc

    def _new_oom_kill(self) -> bool:
        """Whether the kernel OOM-killed something since we last looked."""
        count = 0
        for events in _OOM_EVENTS:
            try:
                res = self.container.exec_run(helper_argv("cat", events), user=HELPER_USER)
            except docker.errors.APIError:
                return False
            if res.exit_code == 0:
                break
        for line in cast(bytes, res.output).decode(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                count = int(value)
        new, self._oom_seen = count > self._oom_seen, count
        return new

    def _alive(self) -> bool:
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            raise _unavailable("inspect the container", exc) from exc
        return self.container.status == "running"

    def check_alive(self) -> None:
        """Raise `SandboxUnavailable` when the container is gone (see `Sandbox`)."""
        self._raise_if_dead("(checked after a failed command)")

    def _raise_if_dead(self, when: str, settle_s: float = 0.0) -> None:
        deadline = time.monotonic() + settle_s
        while self._alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not self._alive():
            raise SandboxUnavailable(
                f"container {self.container_id[:12]} stopped {when} "
                f"(status {self.container.status!r}); it was killed or the daemon restarted"
            )

    def _gone_or(self, exc: docker.errors.APIError, what: str) -> SandboxError:
        if not self._alive():
            return SandboxUnavailable(
                f"container {self.container_id[:12]} is not running; could not {what}"
            )
        return _unavailable(what, exc)

    # -- files ----------------------------------------------------------------------------

    def _sandbox_ids(self) -> tuple[int, int]:
        """Numeric uid and gid of the sandbox user (archives carry numbers, not names).

        Looked up once per image and user: an image's users never change.
        """
        if self._ids is None:
            key = (str(self.container.attrs.get("Image", self.spec.image)), self.spec.user)
            if key not in _USER_IDS:
                res = self.exec(helper_argv("ids"))
                if not res.ok:
                    raise SandboxError(f"cannot resolve user {self.spec.user!r}: {res.stderr}")
                uid, gid = res.stdout.split()
                _USER_IDS[key] = (int(uid), int(gid))
            self._ids = _USER_IDS[key]
        return self._ids

    def _mkdir(self, path: str) -> None:
        res = self.exec(helper_argv("mkdir", path))  # the helper's: never the image's mkdir
        if not res.ok:
            raise SandboxError(f"cannot create folder {path} in the sandbox: {res.stderr.strip()}")

    def _put(self, folder: str, archive: bytes | io.IOBase) -> None:
        """Extract a tar archive into `folder`, creating the folder if needed."""
        for attempt in (0, 1):
            try:
                if isinstance(archive, io.IOBase):
                    archive.seek(0)
                self.container.put_archive(folder, archive)
                return
            except docker.errors.NotFound as exc:
                if attempt:
                    raise SandboxError(f"cannot write into {folder}: {exc}") from exc
                self._mkdir(folder)
            except docker.errors.APIError as exc:
                raise self._gone_or(exc, f"write into {folder}") from exc

    def _get(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]]:
        try:
            stream, stat = self.container.get_archive(path)
        except docker.errors.NotFound as exc:
            if not self._alive():
                raise SandboxUnavailable(f"container is not running; cannot read {path}") from exc
            raise SandboxFileNotFound(f"no such file in the sandbox: {path}") from exc
        except docker.errors.APIError as exc:
            raise self._gone_or(exc, f"read {path}") from exc
        return stream, stat or {}

    def _read_bytes(self, path: str) -> bytes:
        return self._read_member(path)[0]

    def file_mode(self, path: str) -> tuple[bytes, int]:
        """A file's bytes and its permission bits (see `Sandbox.file_mode`)."""
        return self._read_member(self.resolve(path))

    def _read_member(self, path: str) -> tuple[bytes, int]:
        for _ in range(8):  # follow symlinks, inside the container's own file system
            stream, stat = self._get(path)
            mode = int(stat.get("mode", 0))
            if mode & (1 << 31):  # Go's os.ModeDir
                raise SandboxIsADirectory(f"{path} is a folder; use copy_out for folders")
            if int(stat.get("size", 0)) > self.spec.read_limit:
                raise SandboxFileTooLarge(
                    f"{path} is {stat['size']} bytes, over the read cap of "
                    f"{self.spec.read_limit} bytes (spec.read_limit)"
                )
            with tempfile.TemporaryFile() as spool:
                for chunk in stream:
                    spool.write(chunk)
                spool.seek(0)
                with tarfile.open(fileobj=spool) as tar:
                    member = tar.next()
                    if member is None:
                        raise SandboxFileNotFound(f"no such file in the sandbox: {path}")
                    if member.issym():
                        path = str(PurePosixPath(path).parent / member.linkname)
                        continue
                    handle = tar.extractfile(member)
                    if handle is None:
                        raise SandboxError(f"{path} is not a regular file")
                    return handle.read(), member.mode & 0o777
        raise SandboxError(f"too many levels of symbolic links at {path}")

    def _write_bytes(self, path: str, data: bytes, mode: int) -> None:
        uid, gid = self._sandbox_ids()
        p = PurePosixPath(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(p.name)
            info.size, info.mode, info.uid, info.gid = len(data), mode, uid, gid
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
        self._put(str(p.parent), buf.getvalue())

    def copy_in(self, source: Path, target: str) -> None:
        """Copy the contents of host folder `source` into `target` (owned by the user)."""
        if not source.is_dir():
            raise SandboxError(f"copy_in needs a host folder; {source} is not one")
        uid, gid = self._sandbox_ids()
        with tempfile.TemporaryFile() as spool:
            tar_directory(source, spool, uid=uid, gid=gid)
            self._put(self.resolve(target), spool)

    def copy_out(self, source: str, target: Path) -> None:
        """Copy the contents of sandbox folder `source` into host folder `target`."""
        path = self.resolve(source)
        stream, stat = self._get(path)
        if not int(stat.get("mode", 0)) & (1 << 31):
            raise SandboxError(f"copy_out needs a folder; {path} is not one (use read_file)")
        with tempfile.TemporaryFile() as spool:
            total = 0
            for chunk in stream:
                total += len(chunk)
                if total > self.spec.read_limit + 1024 * 1024:
                    raise SandboxFileTooLarge(
                        f"{path} is larger than the read cap of {self.spec.read_limit} bytes"
                    )
                spool.write(chunk)
            spool.seek(0)
            extract_untrusted(spool, target, strip=1, limit=self.spec.read_limit)

    # -- teardown -------------------------------------------------------------------------

    def stop(self) -> None:
        """Kill the container (every process in it dies with its init); keep it to remove."""
        container = self._container
        if container is None:
            return
        try:
            container.kill()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "is not running" not in str(exc):
                raise _unavailable(f"kill container {container.id}", exc) from exc

    def changes(self) -> list[Change]:
        """What the container changed (see `Sandbox.changes`): read from its overlay
        layer where this machine has it (`hangar.sandbox.layers`), else ``docker diff``.
        More changes than a layer is read for (`LAYER_ENTRIES`) are `TooManyChanges`."""
        driver = self.container.attrs.get("GraphDriver") or {}
        data = driver.get("Data") or {}
        if driver.get("Name") == "overlay2" and data.get("UpperDir"):
            lowers = [Path(p) for p in str(data.get("LowerDir") or "").split(":") if p]
            read = overlay_changes(Path(data["UpperDir"]), lowers)
            if read is not None:
                found, whole = read
                if not whole:
                    raise TooManyChanges(f"the sandbox changed more than {LAYER_ENTRIES} files")
                return found
        return self.engine_changes()

    def engine_changes(self) -> list[Change]:
        """``docker diff`` of the container: the engine's own listing of its changes."""
        try:
            found = self.container.diff() or []
        except docker.errors.APIError as exc:
            raise _unavailable(f"list the changes of container {self.container.id}", exc) from exc
        kinds = {0: "C", 1: "A", 2: "D"}
        return [Change(kind=kinds[int(c["Kind"])], path=str(c["Path"])) for c in found]  # type: ignore[arg-type]

    def snapshot(self) -> str:
        """``docker commit`` of the stopped container, labelled as hangar's with the
        sandbox's expiry (the reaper removes one a dead worker left)."""
        labels = self.spec.labels()
        changes = [f"LABEL {k}={json.dumps(v)}" for k, v in labels.items()]
        try:
            image = self.container.commit(
                repository=SNAPSHOTS, tag=secrets.token_hex(8), changes=changes, pause=False
            )
        except docker.errors.APIError as exc:
            raise _unavailable(f"snapshot container {self.container.id}", exc) from exc
        return str(image.id)

    @classmethod
    def remove_image(cls, image: str) -> None:
        try:
            docker_client().images.remove(image, force=True, noprune=False)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.APIError as exc:
            raise _unavailable(f"remove image {image}", exc) from exc

    def close(self) -> None:
        """Remove the container (force) and its anonymous volumes; idempotent."""
        container, self._container = self._container, None
        lease, self._lease = self._lease, None
        try:
            self._remove(container)
        finally:
            if lease is not None:  # a container left behind now stops within a minute
                lease.end()

    @staticmethod
    def _remove(container: Container | None) -> None:
        if container is None:
            return
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            # The labels let `hangar gc` and the reaper remove it later.
            raise _unavailable(f"remove container {container.id}", exc) from exc


class _DockerHeld(HeldExec):
    """One exec holding between the first part and the second (`HELD_SHELL`): the host
    sends a token on stdin; the shell prints it on both streams (with the first part's
    status on stdout) once the first part has ended, then reads the second part to the
    end of stdin. The token is unknown to anything in the sandbox, so no output of the
    first part can pass for the pause."""

    def __init__(self, sandbox: DockerSandbox, script: str) -> None:
        self._sandbox = sandbox
        self._token = secrets.token_hex(16).encode()
        self._argv = ["/bin/sh", "-c", HELD_SHELL, "hangar-held", script]
        self._done = False
        self._exec_id, self._attached = sandbox._start_exec(self._argv, stdin=True)
        try:
            self._attached.raw.sendall(self._token + b"\n")
            self.first = self._first_part()
        except BaseException:
            self._close()
            raise

    def _first_part(self) -> ExecResult:
        """Read the first part's output up to the token on both streams (its result);
        an exec that ends before (its first part exited the shell early, the sandbox
        died) is concluded as it is, and the second part becomes an exec of its own."""
        output = ExecOutput(self._sandbox.spec, None, None)
        held: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        marks: dict[int, int] = {}
        try:
            for stream, chunk in self._attached.frames(None):
                if stream in marks:
                    continue  # after the token: nothing more is written before the resume
                held[stream] += chunk
                at = held[stream].find(self._token)
                if at >= 0 and held[stream].find(b"\n", at) >= 0:  # the whole line is in
                    marks[stream] = at
                if len(marks) == 2:
                    break
                if at < 0 and len(held[stream]) > 2 * self._sandbox.spec.output_limit:
                    keep = len(self._token)  # the tail may hold the start of the token
                    output.feed("stdout" if stream == 1 else "stderr", bytes(held[stream][:-keep]))
                    del held[stream][:-keep]
        except OSError as exc:
            self._sandbox._raise_if_dead(f"while running {describe(self._argv)}")
            raise SandboxUnavailable(f"lost the held exec's stream: {exc}") from exc
        if len(marks) < 2:  # the exec ended: no pause
            for stream in (1, 2):
                output.feed("stdout" if stream == 1 else "stderr", bytes(held[stream]))
            self._close()
            return self._sandbox._concluded(self._exec_id, self._argv, output)
        output.feed("stdout", bytes(held[1][: marks[1]]))
        output.feed("stderr", bytes(held[2][: marks[2]]))
        status = bytes(held[1][marks[1] + len(self._token) :]).split()
        code = int(status[0]) if status and status[0].isdigit() else SIGKILL_EXIT
        return output.result(code, timed_out=False)

    def resume(
        self,
        argv: list[str],
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        end_user: bool = False,
    ) -> ExecResult:
        if self._done:  # no pause happened (or resumed before): an exec of its own
            sandbox = self._sandbox
            return exec_second_part(sandbox, argv, timeout=timeout, env=env, end_user=end_user)
        self._done = True
        kill_after = self._sandbox.spec.kill_after_s
        script = second_part(
            argv,
            timeout=timeout,
            kill_after=kill_after,
            env=env,
            end_user=end_user,
            program=self._sandbox.timeout_in(env),
        )
        output = ExecOutput(self._sandbox.spec, timeout, None)
        try:
            self._attached.raw.sendall(script.encode())
            self._attached.raw.shutdown(socket.SHUT_WR)
            for stream, chunk in self._attached.frames(output.deadline):
                output.feed("stdout" if stream == 1 else "stderr", chunk)
        except OSError as exc:
            self._sandbox._raise_if_dead(f"while running {describe(argv)}")
            raise SandboxUnavailable(f"lost the exec stream of {describe(argv)}: {exc}") from exc
        finally:
            self._attached.close()
        res = self._sandbox._concluded(self._exec_id, argv, output)
        return ended_result(res, timeout) if end_user else res

    def release(self) -> None:
        if not self._done:
            self._done = True
            with contextlib.suppress(OSError):
                self._attached.raw.shutdown(socket.SHUT_WR)  # an empty second part: the shell ends
                for _ in self._attached.frames(time.monotonic() + 30):
                    pass
        self._close()

    def _close(self) -> None:
        self._done = True
        self._attached.close()


class _DockerStream(ExecStream):
    """An exec with stdin attached: stdin raw on the socket, stdout/stderr framed."""

    def __init__(self, sandbox: DockerSandbox, exec_id: str, attached: _Attached) -> None:
        super().__init__()
        self._sandbox, self._exec_id, self._attached = sandbox, exec_id, attached
        self._frames = attached.frames(None)
        self._closed = False

    def recv(self) -> bytes:
        try:
            for stream, chunk in self._frames:
                if stream == 1:
                    return chunk
                self.errors.write(chunk)
        except OSError:
            pass
        return b""

    def send(self, data: bytes) -> None:
        try:
            self._attached.raw.sendall(data)
        except OSError as exc:
            raise SandboxUnavailable(f"lost the stream to the sandbox: {exc}") from exc

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._attached.raw.shutdown(socket.SHUT_RDWR)
        self._attached.close()

    def exit_code(self) -> int | None:
        try:
            code = self._sandbox.client.api.exec_inspect(self._exec_id).get("ExitCode")
        except docker.errors.APIError:
            return None
        return None if code is None else int(code)


class _Attached:
    """An exec's hijacked connection (docker's attach protocol): stdin written raw,
    stdout and stderr read as frames. Bytes read but not yet framed are kept here, so
    that one reader can stop and the next go on where it left off."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.raw = cast(socket.socket, getattr(sock, "_sock", sock))
        self._pending = _past_headers(sock, self.raw)
        # The client's read timeout would cut off a command that is silent for a while
        # (an agent thinking); deadlines are kept by select() in `frames` instead.
        self.raw.settimeout(None)

    def frames(self, deadline: float | None) -> Iterator[tuple[int, bytes]]:
        """Demultiplex the stream: 8-byte headers ``[stream, 0, 0, 0, size]``.

        Stops at end of stream or at `deadline` (monotonic seconds).
        """
        while True:
            while len(self._pending) >= 8:
                stream, size = struct.unpack(">BxxxL", self._pending[:8])
                if len(self._pending) < 8 + size:
                    break
                chunk, self._pending = self._pending[8 : 8 + size], self._pending[8 + size :]
                yield stream, chunk
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                ready, _, _ = select.select([self.raw], [], [], left)
                if not ready:
                    return
            chunk = self.raw.recv(65536)
            if not chunk:
                return
            self._pending += chunk

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def _past_headers(sock: Any, raw: socket.socket) -> bytes:
    """What the HTTP client read past the response's headers before handing over the
    socket. A command that writes before the client reads the headers (a quick command,
    a busy machine) has its first frames in the client's buffer, not on the socket:
    reading only the socket lost them."""
    response = getattr(getattr(sock, "_response", None), "raw", None)
    reader = getattr(getattr(response, "_fp", None), "fp", None)
    if not isinstance(reader, io.BufferedReader):
        return b""
    raw.setblocking(False)  # the buffer only: an empty one must not wait for the socket
    try:
        head = reader.peek()
    finally:
        raw.setblocking(True)
    return reader.read(len(head)) if head else b""
